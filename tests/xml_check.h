#pragma once
// Checks on the SVG the project writes, shared by the SVG tests: a small XML well-formedness check
// and substring counting.
#include <cctype>
#include <string>
#include <vector>

namespace gf::testing {

inline size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + needle.size()))
    ++n;
  return n;
}

inline bool valid_entity_at(const std::string& s, size_t amp) {
  for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
    if (s.compare(amp, std::char_traits<char>::length(e), e) == 0) return true;
  return false;
}

// A small XML well-formedness check for what we emit: balanced start/end tags, quoted attributes,
// no raw '<' in attribute values and no '&' that does not start a known entity. Returns "" when
// well-formed, else a description of the first problem.
inline std::string xml_problem(const std::string& s) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  const auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_'; };
  while (i < s.size()) {
    if (s[i] == '&') {
      if (!valid_entity_at(s, i)) return "bad entity at " + std::to_string(i);
      ++i;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    if (s.compare(i, 4, "<!--") == 0) {
      i = s.find("-->", i);
      if (i == std::string::npos) return "unterminated comment";
      i += 3;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      size_t j = i + 2;
      while (j < s.size() && is_name_char(s[j])) ++j;
      const std::string name = s.substr(i + 2, j - i - 2);
      if (j >= s.size() || s[j] != '>') return "bad end tag " + name;
      if (stack.empty() || stack.back() != name)
        return "end tag </" + name + "> does not match <" + (stack.empty() ? "" : stack.back()) + ">";
      stack.pop_back();
      i = j + 1;
      continue;
    }
    size_t j = i + 1;
    while (j < s.size() && is_name_char(s[j])) ++j;
    const std::string name = s.substr(i + 1, j - i - 1);
    if (name.empty()) return "raw '<' at " + std::to_string(i);
    if (stack.empty()) ++roots;
    while (true) {  // attributes
      while (j < s.size() && s[j] == ' ') ++j;
      if (j >= s.size()) return "unterminated tag " + name;
      if (s.compare(j, 2, "/>") == 0) {
        j += 2;
        break;
      }
      if (s[j] == '>') {
        stack.push_back(name);
        ++j;
        break;
      }
      size_t k = j;
      while (k < s.size() && is_name_char(s[k])) ++k;
      if (k == j || k + 1 >= s.size() || s[k] != '=' || s[k + 1] != '"') return "bad attribute in <" + name + ">";
      const size_t end = s.find('"', k + 2);
      if (end == std::string::npos) return "unterminated attribute in <" + name + ">";
      for (size_t v = k + 2; v < end; ++v) {
        if (s[v] == '<') return "raw '<' in attribute of <" + name + ">";
        if (s[v] == '&' && !valid_entity_at(s, v)) return "bad entity in attribute of <" + name + ">";
      }
      j = end + 1;
    }
    i = j;
  }
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  if (roots != 1) return "expected one root element, got " + std::to_string(roots);
  if (s.rfind("<svg ", 0) != 0) return "document does not start with <svg";
  return "";
}

}  // namespace gf::testing

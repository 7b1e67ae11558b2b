#include "lab/fields.h"

#include <cmath>
#include <sstream>

namespace gf::lab::fields_detail {

std::string format_value(int64_t v) { return std::to_string(v); }
std::string format_value(double v) { return fmt::format("{}", v); }
std::string format_value(const std::string& v) { return v; }
std::string format_value(bool v) { return v ? "1" : "0"; }
std::string format_value(const std::vector<int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); }
std::string format_value(const std::vector<double>& v) {
  std::vector<std::string> parts;
  for (double x : v) parts.push_back(format_value(x));
  return fmt::format("{}", fmt::join(parts, ","));
}

void parse_value(const std::string& flag, const std::string& text, int64_t& out) {
  size_t used = 0;
  try {
    out = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == text.size(), "--{} expects an integer, got '{}'", flag, text);
}

void parse_value(const std::string& flag, const std::string& text, double& out) {
  size_t used = 0;
  try {
    out = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == text.size() && std::isfinite(out), "--{} expects a finite number, got '{}'", flag, text);
}

void parse_value(const std::string&, const std::string& text, std::string& out) { out = text; }

void parse_value(const std::string& flag, const std::string& text, bool& out) {
  GF_CHECK(text == "1" || text == "0" || text == "true" || text == "false" || text == "on" || text == "off",
           "--{} is a switch (1 or 0), got '{}'", flag, text);
  out = text == "1" || text == "true" || text == "on";
}

namespace {
template <class T>
void parse_list(const std::string& flag, const std::string& text, std::vector<T>& out) {
  out.clear();
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    T v{};
    parse_value(flag, part, v);
    out.push_back(v);
  }
  GF_CHECK(!out.empty(), "--{} expects a list separated by commas, got '{}'", flag, text);
}
}  // namespace

void parse_value(const std::string& flag, const std::string& text, std::vector<int64_t>& out) { parse_list(flag, text, out); }
void parse_value(const std::string& flag, const std::string& text, std::vector<double>& out) { parse_list(flag, text, out); }

}  // namespace gf::lab::fields_detail

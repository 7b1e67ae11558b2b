#include "train/run/json_fields.h"

#include <fmt/format.h>

namespace gf::train::json_fields {

int nesting_depth(std::string_view text, int stop) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > deepest && (deepest = depth) > stop) break;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

void bad_field_text(const std::string& key, std::string shown, const char* want) {
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  throw FieldError(fmt::format("'{}' must be {}, got {}", key, want, shown));
}

void missing_field(const std::string& key) { throw FieldError(fmt::format("missing field '{}'", key)); }

}  // namespace gf::train::json_fields

#include "train/run/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace gf::train::json_fields {

void bad_field(const std::string& key, const json& v, const char* want) {
  std::string shown = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  throw FieldError(fmt::format("'{}' must be {}, got {}", key, want, shown));
}

void read_value(const json& v, const std::string& key, int64_t& out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    bad_field(key, v, "an integer in the int64 range");
  out = v.get<int64_t>();
}

void read_value(const json& v, const std::string& key, uint64_t& out) {
  if (!v.is_number_unsigned()) bad_field(key, v, "a non-negative integer");
  out = v.get<uint64_t>();
}

void read_value(const json& v, const std::string& key, double& out) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) bad_field(key, v, "a finite number");
  out = v.get<double>();
}

void read_value(const json& v, const std::string& key, bool& out) {
  if (!v.is_boolean()) bad_field(key, v, "true or false");
  out = v.get<bool>();
}

void read_value(const json& v, const std::string& key, std::string& out) {
  if (!v.is_string()) bad_field(key, v, "a string");
  out = v.get<std::string>();
}

}  // namespace gf::train::json_fields

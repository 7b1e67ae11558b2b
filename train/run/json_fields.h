#pragma once
// Strict reading of the JSON fields of a run folder's files (config.json, state.json). nlohmann's
// get<int64_t>() converts 2.5 or 1e300 to an integer (the second is undefined behaviour), wraps -1
// into a uint64_t, and its type errors name no field; these check the value's JSON type and range
// first and throw FieldError naming the field, its value and what it must be.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace gf::train::json_fields {

using json = nlohmann::json;

// "'<key>' must be <what>, got <value>"; the readers of the files prefix the file's name.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad_field(const std::string& key, const json& v, const char* want);
// The value of v into out, or FieldError naming `key`. Integers must be JSON integers in range,
// numbers finite (JSON has no inf or NaN, but 1e999 parses as inf).
void read_value(const json& v, const std::string& key, int64_t& out);
void read_value(const json& v, const std::string& key, uint64_t& out);
void read_value(const json& v, const std::string& key, double& out);
void read_value(const json& v, const std::string& key, bool& out);
void read_value(const json& v, const std::string& key, std::string& out);

// obj[key] into out when present (out keeps its default otherwise); `path` prefixes the key in
// errors ("layer."). obj must be an object.
template <class T>
void read_optional(const json& obj, const char* key, T& out, const std::string& path = "") {
  if (auto it = obj.find(key); it != obj.end()) read_value(*it, path + key, out);
}
// obj[key] into out; FieldError when absent.
template <class T>
void read_required(const json& obj, const char* key, T& out, const std::string& path = "") {
  auto it = obj.find(key);
  if (it == obj.end()) throw FieldError("missing field '" + path + key + "'");
  read_value(*it, path + key, out);
}

}  // namespace gf::train::json_fields

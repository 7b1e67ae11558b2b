#pragma once
// Strict reading of the JSON files of a folder someone may hand over (a run folder's config.json,
// state.json and grad_stats.jsonl, a lab's NAME.json). nlohmann's get<int64_t>() converts 2.5 or
// 1e300 to an integer (the second is undefined behaviour), wraps -1 into a uint64_t, and its type
// errors name no field; its const operator[] on a missing key is undefined behaviour. These check
// the value's JSON type and range first and throw FieldError naming the field by its path in the
// document ("groups[2].name"), its value and what it must be; the readers of the files prefix the
// file's name. Every value read from such a file goes through them. They take nlohmann::json and
// nlohmann::ordered_json (grad_stats.jsonl keeps its keys' order) alike.
//
// parse() refuses text nested deeper than a bound before parsing it: the page writer, the error
// messages and nlohmann's dump recurse once per level, so 20,000 levels in 40 KB would exhaust
// the stack (and indentation that grows with depth, the disk).
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gf::train::json_fields {

using json = nlohmann::json;

// "'<key>' must be <what>, got <value>"; the readers of the files prefix the file's name.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The deepest nesting of objects and arrays in JSON text (1 for a flat object; brackets inside
// strings do not count), counted up to `stop` + 1 at most.
int nesting_depth(std::string_view text, int stop);
// The nesting bound of the run folder's JSON files; lab JSON has its own (app/lab_page.cpp).
constexpr int kMaxRunJsonDepth = 16;

// The text parsed, or FieldError for text nested deeper than max_depth; nlohmann's parse_error
// (which names the byte) for text that is not JSON.
template <class J = json>
J parse(std::string_view text, int max_depth) {
  if (const int depth = nesting_depth(text, max_depth); depth > max_depth)
    throw FieldError("nested more than " + std::to_string(max_depth) + " levels deep");
  return J::parse(text);
}

[[noreturn]] void bad_field_text(const std::string& key, std::string shown, const char* want);
template <class J>
[[noreturn]] void bad_field(const std::string& key, const J& v, const char* want) {
  // (Values are checked for depth before they get here, so dump's recursion is bounded.)
  bad_field_text(key, v.dump(-1, ' ', false, J::error_handler_t::replace), want);
}
[[noreturn]] void missing_field(const std::string& key);

// The value of v into out, or FieldError naming `key`. Integers must be JSON integers in range,
// numbers finite (JSON has no inf or NaN, but 1e999 parses as inf).
template <class J>
void read_value(const J& v, const std::string& key, int64_t& out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    bad_field(key, v, "an integer in the int64 range");
  out = v.template get<int64_t>();
}
template <class J>
void read_value(const J& v, const std::string& key, uint64_t& out) {
  if (!v.is_number_unsigned()) bad_field(key, v, "a non-negative integer");
  out = v.template get<uint64_t>();
}
template <class J>
void read_value(const J& v, const std::string& key, double& out) {
  if (!v.is_number() || !std::isfinite(v.template get<double>())) bad_field(key, v, "a finite number");
  out = v.template get<double>();
}
template <class J>
void read_value(const J& v, const std::string& key, bool& out) {
  if (!v.is_boolean()) bad_field(key, v, "true or false");
  out = v.template get<bool>();
}
template <class J>
void read_value(const J& v, const std::string& key, std::string& out) {
  if (!v.is_string()) bad_field(key, v, "a string");
  out = v.template get<std::string>();
}

// ---- checked accessors: `path` is the prefix that names obj's members in errors ("layer.",
// "groups[2]."); obj must already be an object (as_object).

// v itself when it is an object (or an array), else FieldError naming `key`.
template <class J>
const J& as_object(const J& v, const std::string& key) {
  if (!v.is_object()) bad_field(key, v, "an object");
  return v;
}
template <class J>
const J& as_array(const J& v, const std::string& key) {
  if (!v.is_array()) bad_field(key, v, "an array");
  return v;
}
// obj[key]; FieldError "missing field 'path key'" when absent.
template <class J>
const J& member(const J& obj, const char* key, const std::string& path = "") {
  auto it = obj.find(key);
  if (it == obj.end()) missing_field(path + key);
  return *it;
}
// obj[key], or nullptr when absent.
template <class J>
const J* find_member(const J& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}
// An array element's name: "groups[2]" for "groups" and 2 (with "." after it, its members' prefix).
inline std::string at_index(const std::string& name, size_t i) { return name + "[" + std::to_string(i) + "]"; }

// Typed members.
template <class J>
std::string string_at(const J& obj, const char* key, const std::string& path = "") {
  std::string s;
  read_value(member(obj, key, path), path + key, s);
  return s;
}
template <class J>
int64_t integer_at(const J& obj, const char* key, const std::string& path = "") {
  int64_t v = 0;
  read_value(member(obj, key, path), path + key, v);
  return v;
}
template <class J>
bool bool_at(const J& obj, const char* key, const std::string& path = "") {
  bool v = false;
  read_value(member(obj, key, path), path + key, v);
  return v;
}
// A number, or NaN for null (the writers write a non-finite statistic as null).
template <class J>
double number_or_null(const J& v, const std::string& key) {
  if (v.is_null()) return NAN;
  double d = 0;
  read_value(v, key, d);
  return d;
}
template <class J>
double number_or_null_at(const J& obj, const char* key, const std::string& path = "") {
  return number_or_null(member(obj, key, path), path + key);
}

// obj[key] into out when present (out keeps its default otherwise); `path` prefixes the key in
// errors ("layer."). obj must be an object.
template <class J, class T>
void read_optional(const J& obj, const char* key, T& out, const std::string& path = "") {
  if (auto it = obj.find(key); it != obj.end()) read_value(*it, path + key, out);
}
// obj[key] when present (checked as read_value does), else `fallback`.
template <class J, class T>
T value_or(const J& obj, const char* key, T fallback, const std::string& path = "") {
  read_optional(obj, key, fallback, path);
  return fallback;
}
// obj[key] into out; FieldError when absent.
template <class J, class T>
void read_required(const J& obj, const char* key, T& out, const std::string& path = "") {
  read_value(member(obj, key, path), path + key, out);
}

}  // namespace gf::train::json_fields

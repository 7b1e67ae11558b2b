#pragma once
// A lab's settings, declared once: a struct whose members carry their types and defaults, and one
// table of fields (flag name, help, the member it fills). From the table the runner derives the
// flags `gradflow lab NAME` takes and its --help (as `Option`s the app turns into flags), the
// parsing of their values, and the settings in NAME.json and on the HTML page:
//
//   struct Settings {
//     int64_t d_model = 64;
//     std::vector<double> warmups{0, 20, 40, 60};
//   };
//   const Fields<Settings> fields = {
//       {"d-model", &Settings::d_model, "model width"},
//       {"warmups", &Settings::warmups, "warm-up lengths in steps"},
//   };
//
// A list member (std::vector<int64_t> or std::vector<double>) is written "0,20,40,60". A nested
// struct's table joins with `Fields<S>::nest(&S::member, its_fields)`, so options several labs share
// (the synthetic task's, real data's) are declared once.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "lab/lab.h"
#include "tensor/check.h"

namespace gf::lab {

namespace fields_detail {
// A value as a flag writes it, and back. Throws std::invalid_argument naming the flag.
std::string format_value(int64_t v);
std::string format_value(double v);
std::string format_value(const std::string& v);
std::string format_value(bool v);
std::string format_value(const std::vector<int64_t>& v);
std::string format_value(const std::vector<double>& v);
void parse_value(const std::string& flag, const std::string& text, int64_t& out);
void parse_value(const std::string& flag, const std::string& text, double& out);
void parse_value(const std::string& flag, const std::string& text, std::string& out);
void parse_value(const std::string& flag, const std::string& text, bool& out);
void parse_value(const std::string& flag, const std::string& text, std::vector<int64_t>& out);
void parse_value(const std::string& flag, const std::string& text, std::vector<double>& out);
template <class T> Option::Kind kind_of();
template <> inline Option::Kind kind_of<int64_t>() { return Option::Int; }
template <> inline Option::Kind kind_of<double>() { return Option::Real; }
template <> inline Option::Kind kind_of<std::string>() { return Option::Text; }
template <> inline Option::Kind kind_of<bool>() { return Option::Switch; }
template <> inline Option::Kind kind_of<std::vector<int64_t>>() { return Option::Text; }
template <> inline Option::Kind kind_of<std::vector<double>>() { return Option::Text; }
}  // namespace fields_detail

template <class S>
class Field {
 public:
  template <class T>
  Field(std::string name, T S::*member, std::string help)
      : name_(std::move(name)), help_(std::move(help)), kind_(fields_detail::kind_of<T>()),
        get_([member](const S& s) { return fields_detail::format_value(s.*member); }),
        set_([member, flag = name_](S& s, const std::string& text) { fields_detail::parse_value(flag, text, s.*member); }) {}

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  Option::Kind kind() const { return kind_; }
  std::string get(const S& s) const { return get_(s); }
  void set(S& s, const std::string& text) const { set_(s, text); }

  // This field seen from an enclosing struct O whose member `part` is an S.
  template <class O>
  Field<O> within(S O::*part) const {
    return Field<O>(name_, help_, kind_, [get = get_, part](const O& o) { return get(o.*part); },
                    [set = set_, part](O& o, const std::string& text) { set(o.*part, text); });
  }
  Field(std::string name, std::string help, Option::Kind kind, std::function<std::string(const S&)> get,
        std::function<void(S&, const std::string&)> set)
      : name_(std::move(name)), help_(std::move(help)), kind_(kind), get_(std::move(get)), set_(std::move(set)) {}

 private:
  std::string name_, help_;
  Option::Kind kind_;
  std::function<std::string(const S&)> get_;
  std::function<void(S&, const std::string&)> set_;
};

template <class S>
class Fields {
 public:
  Fields(std::initializer_list<Field<S>> fields) : fields_(fields) {}
  Fields(std::vector<Field<S>> fields) : fields_(std::move(fields)) {}

  // The fields of a nested struct's table, prefixed to this one's: `Fields<S>::nest(&S::task, task_fields())`.
  template <class P>
  static std::vector<Field<S>> nest(P S::*part, const Fields<P>& inner) {
    std::vector<Field<S>> out;
    for (const auto& f : inner.all()) out.push_back(f.within(part));
    return out;
  }
  Fields& add(std::vector<Field<S>> more) {
    fields_.insert(fields_.end(), more.begin(), more.end());
    return *this;
  }

  const std::vector<Field<S>>& all() const { return fields_; }

  // The flags, with the defaults a default-constructed S holds.
  std::vector<Option> options() const {
    const S defaults{};
    std::vector<Option> out;
    for (const auto& f : fields_) out.push_back({f.name(), f.kind(), f.kind() == Option::Switch ? "" : f.get(defaults), f.help()});
    return out;
  }
  // The settings from flag values by name; a field without a value keeps its default. Throws
  // std::invalid_argument for a value that does not parse, naming the flag.
  S parse(const std::map<std::string, std::string>& values) const {
    S s{};
    for (const auto& f : fields_)
      if (auto it = values.find(f.name()); it != values.end()) f.set(s, it->second);
    return s;
  }
  // Every field's value as the flag would be written (NAME.json's "settings", the page's).
  std::map<std::string, std::string> values(const S& s) const {
    std::map<std::string, std::string> out;
    for (const auto& f : fields_) out[f.name()] = f.get(s);
    return out;
  }

 private:
  std::vector<Field<S>> fields_;
};

}  // namespace gf::lab

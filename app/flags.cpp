#include "app/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tensor/check.h"

namespace gf::app {

Flags::Flags(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

void Flags::add_string(const std::string& name, const std::string& def, const std::string& help) {
  flags_[name] = {Kind::String, def, help, def};
  order_.push_back(name);
}
void Flags::add_int(const std::string& name, long long def, const std::string& help) {
  flags_[name] = {Kind::Int, std::to_string(def), help, std::to_string(def)};
  order_.push_back(name);
}
void Flags::add_double(const std::string& name, double def, const std::string& help) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", def);
  flags_[name] = {Kind::Double, buf, help, buf};
  order_.push_back(name);
}
void Flags::add_bool(const std::string& name, const std::string& help) {
  flags_[name] = {Kind::Bool, "false", help, "false"};
  order_.push_back(name);
}
void Flags::append_help(const std::string& name, const std::string& more) {
  auto it = flags_.find(name);
  GF_CHECK(it != flags_.end(), "{}: append_help: no flag --{} is declared", command_, name);
  it->second.help += more;
}

void Flags::add_positional(const std::string& name, const std::string& help, bool required) {
  positional_names_.emplace_back(name, help);
  if (required) ++required_positionals_;
}

namespace {
bool parse_int(const std::string& s, long long& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}
bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return errno == 0 && *end == '\0' && std::isfinite(out);
}
}  // namespace

bool Flags::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      GF_CHECK_AS(UsageError, positional_values_.size() < positional_names_.size(), "{}: unexpected argument '{}'", command_, arg);
      positional_values_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    GF_CHECK_AS(UsageError, it != flags_.end(), "{}: unknown flag --{} (see gradflow {} --help)", command_, name, command_);
    Flag& f = it->second;
    if (f.kind == Kind::Bool) {
      GF_CHECK_AS(UsageError, !has_value || value == "true" || value == "false", "{}: --{} is a switch; it takes no value (got '{}')",
                  command_, name, value);
      f.value = has_value ? value : "true";
      f.given = true;
      continue;
    }
    if (!has_value) {
      GF_CHECK_AS(UsageError, i + 1 < argc, "{}: --{} needs a value", command_, name);
      value = argv[++i];
    }
    long long iv;
    double dv;
    GF_CHECK_AS(UsageError, f.kind != Kind::Int || parse_int(value, iv), "{}: --{} expects an integer, got '{}'", command_, name, value);
    GF_CHECK_AS(UsageError, f.kind != Kind::Double || parse_double(value, dv), "{}: --{} expects a number, got '{}'", command_, name,
                value);
    f.value = value;
    f.given = true;
  }
  GF_CHECK_AS(UsageError, positional_values_.size() >= required_positionals_, "{}: missing argument {} (see gradflow {} --help)", command_,
              positional_names_[positional_values_.size()].first, command_);
  return true;
}

const Flags::Flag& Flags::get(const std::string& name, Kind kind) const {
  auto it = flags_.find(name);
  GF_CHECK_AS(std::logic_error, it != flags_.end() && it->second.kind == kind, "{}: flag --{} not declared with that type", command_, name);
  return it->second;
}

std::string Flags::str(const std::string& name) const { return get(name, Kind::String).value; }
long long Flags::integer(const std::string& name) const { return std::stoll(get(name, Kind::Int).value); }
double Flags::real(const std::string& name) const { return std::stod(get(name, Kind::Double).value); }
bool Flags::on(const std::string& name) const { return get(name, Kind::Bool).value == "true"; }
bool Flags::given(const std::string& name) const {
  auto it = flags_.find(name);
  return it != flags_.end() && it->second.given;
}
const std::string& Flags::positional(size_t i) const {
  static const std::string empty;
  return i < positional_values_.size() ? positional_values_[i] : empty;
}

std::string Flags::help() const {
  std::string s = "usage: gradflow " + command_ + " [flags]";
  for (auto& [n, h] : positional_names_) s += " " + n;
  s += "\n\n" + summary_ + "\n";
  if (!positional_names_.empty()) {
    s += "\narguments:\n";
    for (auto& [n, h] : positional_names_) s += "  " + n + std::string(n.size() < 22 ? 22 - n.size() : 1, ' ') + h + "\n";
  }
  s += "\nflags:\n";
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    std::string left = "  --" + name + (f.kind == Kind::Bool ? "" : " X");
    s += left + std::string(left.size() < 24 ? 24 - left.size() : 1, ' ') + f.help;
    if (f.kind != Kind::Bool && !f.default_value.empty()) s += " (default " + f.default_value + ")";
    s += "\n";
  }
  s += "  --help                print this help\n";
  return s;
}

}  // namespace gf::app

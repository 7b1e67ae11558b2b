#pragma once
// A small typed flag parser for the subcommands: `--name value` or `--name=value`, boolean
// switches, positional arguments, and errors that name the flag and what was wrong with it.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gf::app {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Flags {
 public:
  Flags(std::string command, std::string summary);

  // Declare flags with defaults; help text shows the default.
  void add_string(const std::string& name, const std::string& def, const std::string& help);
  void add_int(const std::string& name, long long def, const std::string& help);
  void add_double(const std::string& name, double def, const std::string& help);
  void add_bool(const std::string& name, const std::string& help);  // a switch, default false
  void add_positional(const std::string& name, const std::string& help, bool required = true);
  // Adds `more` to a declared flag's help: a note about several flags, written once after them.
  void append_help(const std::string& name, const std::string& more);

  // Throws UsageError on an unknown flag, a missing or malformed value, or a missing positional.
  // Returns false when --help was given (help has been printed).
  bool parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  long long integer(const std::string& name) const;
  double real(const std::string& name) const;
  bool on(const std::string& name) const;
  bool given(const std::string& name) const;  // set on the command line (not a default)
  bool has(const std::string& name) const { return flags_.count(name) != 0; }  // declared
  const std::string& positional(size_t i) const;
  size_t positional_count() const { return positional_values_.size(); }
  const std::string& command() const { return command_; }  // for error messages: "translate: --beam ..."

  std::string help() const;

 private:
  enum class Kind { String, Int, Double, Bool };
  struct Flag {
    Kind kind;
    std::string value, help;
    std::string default_value;  // what --help shows, whatever the command line set
    bool given = false;
  };
  const Flag& get(const std::string& name, Kind kind) const;

  std::string command_, summary_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::vector<std::pair<std::string, std::string>> positional_names_;
  size_t required_positionals_ = 0;
  std::vector<std::string> positional_values_;
};

}  // namespace gf::app

// gradflow lab: the gradient-flow experiments (lab/). `gradflow lab` lists them, `gradflow lab NAME`
// runs one, `gradflow lab all` runs every lab with its defaults.
#include <fmt/core.h>

#include <filesystem>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "lab/lab.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::app {
namespace {

void list_labs() {
  fmt::print("usage: gradflow lab NAME [--out DIR] [--seeds N] [--seed S] [lab flags]   (gradflow lab NAME --help)\n"
             "       gradflow lab all [--out DIR]   (every lab with its defaults, each into DIR/NAME)\n\nlabs:\n");
  for (const auto& l : lab::labs()) fmt::print("  {:<12}{}\n              {}\n", l.name, l.title, l.reference);
  fmt::print("\nEach prints tables, writes NAME.svg and NAME.json into --out (default runs/lab/NAME), and ends with a\n"
             "check line computed from its own numbers: exit 0 when it agrees with the published claim, 3 when not.\n");
}

}  // namespace

Flags lab_flags(const lab::Lab& l, const std::string& default_out) {
  Flags f("lab " + l.name, l.title + "\n" + l.reference + "\n" + l.question);
  f.add_string("out", default_out, "output folder for NAME.svg, NAME.json and any other files");
  f.add_int("seeds", l.default_seeds, "independent runs (seeds) where one would mislead");
  f.add_int("seed", 1, "first seed (runs use seed, seed+1, ...)");
  f.add_int("threads", 0, "threads (default: the hardware's)");
  for (const auto& o : l.options) {
    switch (o.kind) {
      case lab::Option::Int: f.add_int(o.name, std::stoll(o.default_value), o.help); break;
      case lab::Option::Real: f.add_double(o.name, std::stod(o.default_value), o.help); break;
      case lab::Option::Text: f.add_string(o.name, o.default_value, o.help); break;
      case lab::Option::Switch: f.add_bool(o.name, o.help); break;
    }
  }
  return f;
}

Flags lab_all_flags() {
  Flags f("lab all", "Runs every lab with its defaults, one after another, each into DIR/NAME.");
  f.add_string("out", "runs/lab", "parent folder");
  return f;
}

void check_lab_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, f.integer("seeds") >= 1, "{}: --seeds must be at least 1, got {}", f.command(), f.integer("seeds"));
}

namespace {

// Declares the lab's flags, parses them, and runs it. Returns the lab's exit code.
int run_lab(const lab::Lab& l, int argc, char** argv, const std::string& default_out) {
  Flags f = lab_flags(l, default_out);
  if (!f.parse(argc, argv)) return 0;
  check_lab_flags(f);
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  std::map<std::string, std::string> settings{
      {"out", f.str("out")}, {"seeds", std::to_string(f.integer("seeds"))}, {"seed", std::to_string(f.integer("seed"))}};
  for (const auto& o : l.options) {
    switch (o.kind) {
      case lab::Option::Int: settings[o.name] = std::to_string(f.integer(o.name)); break;
      case lab::Option::Real: settings[o.name] = fmt::format("{}", f.real(o.name)); break;
      case lab::Option::Text: settings[o.name] = f.str(o.name); break;
      case lab::Option::Switch: settings[o.name] = f.on(o.name) ? "1" : "0"; break;
    }
  }
  lab::Report report(l, settings);
  l.run(report);
  return report.finish();
}

}  // namespace

int cmd_lab(int argc, char** argv) {
  if (argc == 0 || std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h") {
    list_labs();
    return 0;
  }
  const std::string name = argv[0];
  if (name == "all") {
    Flags f = lab_all_flags();
    if (!f.parse(argc - 1, argv + 1)) return 0;
    int worst = 0;
    std::vector<std::string> summary;
    for (const auto& l : lab::labs()) {
      char* none[] = {nullptr};
      const int rc = run_lab(l, 0, none, (std::filesystem::path(f.str("out")) / l.name).string());
      summary.push_back(fmt::format("  {:<12}{}", l.name, rc == 0 ? "agrees" : "DISAGREES"));
      worst = std::max(worst, rc);
      fmt::print("\n");
    }
    fmt::print("all labs:\n");
    for (const auto& s : summary) fmt::print("{}\n", s);
    return worst;
  }
  const lab::Lab* found = nullptr;
  try {
    found = &lab::find_lab(name);
  } catch (const std::invalid_argument& e) {
    GF_FAIL_AS(UsageError, "{}", e.what());
  }
  return run_lab(*found, argc - 1, argv + 1, "runs/lab/" + name);
}

}  // namespace gf::app

// gradflow lab: the gradient-flow experiments (lab/). `gradflow lab` lists them, `gradflow lab NAME`
// runs one, `gradflow lab NAME --control` its negative control, `gradflow lab NAME --claims` prints
// its rows of the claims table, `gradflow lab all` runs every lab and then every control.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "app/child_jobs.h"
#include "app/command_flags.h"
#include "app/commands.h"
#include "app/flags.h"
#include "app/lab_page.h"
#include "app/lab_run.h"
#include "lab/claims.h"
#include "lab/lab.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/parallel.h"
#include "train/run/checkpoint.h"

namespace gf::app {
namespace {

void list_labs() {
  fmt::print("usage: gradflow lab NAME [--out DIR] [--seeds N] [--seed S] [lab flags]   (gradflow lab NAME --help)\n"
             "       gradflow lab NAME --control   (its negative control: the causal ingredient removed; its targets must not be supported)\n"
             "       gradflow lab NAME --claims    (its claims: statement, threshold, source and design, written before the run)\n"
             "       gradflow lab all [--out DIR]  (every lab with its defaults, then every control, each into DIR/NAME[-control])\n\nlabs:\n");
  for (const auto& l : lab::labs()) fmt::print("  {:<12}{}\n              {}\n", l.name, l.title, l.reference);
  fmt::print("\nEach prints tables, writes NAME.svg and NAME.json into --out (default runs/lab/NAME), and ends with a\n"
             "verdict computed from its own numbers. A paper claim is supported when its interval across seeds (Holm-adjusted\n"
             "across the lab's paper claims) lies on the claimed side of the threshold, contradicted when it lies on the other\n"
             "side, unsettled when it contains the threshold; an exact check passes when its value lies on the claimed side.\n"
             "Exit 0 when every paper claim is supported and every check passes, 3 when one is contradicted or a check fails,\n"
             "4 otherwise (unsettled).\n");
}

// A paper claim's design (lab/claims.h): its smallest effect and the seeds that settle it at the
// pilot's sd and Holm's strictest level for the lab's paper claims (docs/labs.md, "Seeds by design").
void print_design(const lab::ClaimSpec& c, const std::vector<lab::ClaimSpec>& specs, int default_seeds) {
  if (c.kind != lab::ClaimKind::Paper) return;
  if (!c.designed()) {
    fmt::print("    design: no smallest effect stated\n");
    return;
  }
  const int m = static_cast<int>(std::count_if(specs.begin(), specs.end(), [](const auto& s) { return s.kind == lab::ClaimKind::Paper; }));
  const int n = lab::seeds_needed(c.min_effect, c.pilot_sd, lab::design_alpha(m));
  fmt::print("    smallest effect: {:g} ({}); pilot sd {:g} over {} seeds: {} seeds settle it at 0.05 / {} (the lab runs {} by default)\n",
             c.min_effect, c.min_effect_reason, c.pilot_sd, c.pilot_n, n >= 1000 ? "1000 or more" : std::to_string(n), m, default_seeds);
}

// The lab's rows of the claims table, as `--claims` prints them.
void print_claims(const lab::Lab& l) {
  const auto specs = lab::claim_specs_of(l.name);
  fmt::print("lab {}: {}\n  {}\n  control: {}\n", l.name, l.title, l.reference, l.control.empty() ? "(none)" : l.control);
  if (specs.empty()) fmt::print("\n  (no rows in lab/claims.cpp)\n");
  for (const auto& c : specs) {
    fmt::print("\n  {} {}{}\n    {}\n    holds when {} {} {:g}\n    source: {}\n", lab::kind_name(c.kind), c.id,
               c.control_targets ? " (a target of the control: --control must make it fail)" : "", c.statement,
               c.kind == lab::ClaimKind::Paper ? "supported when the (Holm-adjusted) interval across seeds lies" : "the value is",
               c.side == lab::Compare::Above ? "above" : "below", c.threshold, c.source);
    print_design(c, specs, l.default_seeds);
  }
}

struct Outcome {
  int code = 0;
  double seconds = 0;
  std::string line;               // the verdict line
  bool targets_all_fail = false;  // a control: at least one targeted claim, and none is supported
};

}  // namespace

Flags lab_flags(const lab::Lab& l, const std::string& default_out) {
  Flags f("lab " + l.name, l.title + "\n" + l.reference + "\n" + l.question +
                               (l.control.empty() ? "" : "\n--control: " + l.control));
  f.add_string("out", default_out, "output folder for NAME.svg, NAME.json and any other files (with --control: default ...-control)");
  f.add_int("seeds", l.default_seeds, "independent runs (seeds): paper claims take a 95% interval across them");
  f.add_int("seed", static_cast<long long>(l.first_seed), "first seed (runs use seed, seed+1, ...)");
  f.add_int("threads", 0, "threads (default: the hardware's)");
  f.add_bool("control", l.placebo ? "the placebo: each paper claim's contrast between two groups of seeds of one arm; the rule must call it "
                                     "supported in at most 5% of splits"
                                   : "the negative control: the same protocol without the causal ingredient; its targeted claims must not be "
                                     "supported");
  if (l.takes_models)
    f.add_string("models", "", "RUN [RUN ...]: trained run folders (gradflow train --out RUN) to analyse in place of the lab's own toy "
                               "models, one seed per folder; each is loaded as translate loads it (digests and config checked)");
  if (l.placebo) f.add_int("pools", 0, "--control: the placebo's pools, each of --seeds seeds on runs of their own (0: the lab's own number)");
  if (!l.ablation.empty())
    f.add_bool("ablate", "the ablation: " + l.ablation + " (output: --out with -ablate appended); its targeted claims must not be supported");
  f.add_bool("claims", "print the lab's claims (statement, threshold, source) and exit");
  f.add_bool("html", "also write NAME.html: the claims with their intervals, the control's result when it ran, the figures (docs/report.md)");
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
  Flags f("lab all", "Runs every lab with its defaults, then every lab's negative control, each into DIR/NAME or DIR/NAME-control,\n"
                     "and prints a summary. Exit 0 when every lab's paper claims are all supported and no control supports a target,\n"
                     "3 when a claim is contradicted, a check fails or a control supports a target, 4 otherwise (unsettled).");
  f.add_string("out", "runs/lab", "parent folder");
  f.add_bool("claims", "print every lab's claims and exit");
  f.add_bool("html", "also write DIR/index.html and each lab's page, DIR/NAME/NAME.html (docs/report.md)");
  f.add_int("jobs", 0, "labs run at once, each a process of its own with threads / jobs threads, its output in DIR/NAME/lab.log "
                       "(0: one per core; 1: one after the other in this process)");
  f.add_string("only", "", "comma-separated labs to run (default: all)");
  return f;
}

void check_lab_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, f.integer("seeds") >= 1, "{}: --seeds must be at least 1, got {}", f.command(), f.integer("seeds"));
}

namespace {

// Parses the lab's flags and runs it. `control_default`: --control on from the start (lab all).
// Returns the lab's exit code and verdict.
Outcome run_lab(const lab::Lab& l, int argc, char** argv, const std::string& default_out, bool control_default = false,
                bool ablate_default = false) {
  Flags f = lab_flags(l, default_out);
  // --models takes every folder up to the next flag: given as one value, the folders a line each.
  std::vector<std::string> words;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    words.push_back(argv[i]);
    if (words.back() != "--models") continue;
    std::string folders;
    while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) folders += std::string(argv[++i]) + "\n";
    words.push_back(folders);
  }
  for (std::string& w : words) args.push_back(w.data());
  if (!f.parse(static_cast<int>(args.size()), args.data())) return {};
  if (f.on("claims")) {
    print_claims(l);
    return {};
  }
  check_lab_flags(f);
  const bool control = control_default || f.on("control");
  const bool ablate = ablate_default || (!l.ablation.empty() && f.on("ablate"));
  GF_CHECK_AS(UsageError, !control || !l.control.empty(), "lab {}: this lab has no negative control (--control)", l.name);
  GF_CHECK_AS(UsageError, !(control && ablate), "lab {}: --control and --ablate are two runs; give one", l.name);
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  const std::string out = f.given("out") || !(control || ablate) ? f.str("out") : f.str("out") + (ablate ? "-ablate" : "-control");
  std::map<std::string, std::string> settings{{"out", out},
                                              {"seeds", std::to_string(f.integer("seeds"))},
                                              {"seed", std::to_string(f.integer("seed"))},
                                              {"control", control ? "1" : "0"},
                                              {"ablate", ablate ? "1" : "0"}};
  if (l.placebo && f.integer("pools") > 0) settings["pools"] = std::to_string(f.integer("pools"));
  if (const std::string models = l.takes_models ? f.str("models") : ""; !models.empty()) {
    GF_CHECK_AS(UsageError, !f.given("seeds"), "lab {}: --models gives one seed per folder; --seeds does not go with it", l.name);
    GF_CHECK_AS(UsageError, std::count(models.begin(), models.end(), '\n') >= 2,
                "lab {}: --models needs two or more run folders (an interval across models needs two)", l.name);
    settings["models"] = models;
  }
  for (const auto& o : l.options) {
    switch (o.kind) {
      case lab::Option::Int: settings[o.name] = std::to_string(f.integer(o.name)); break;
      case lab::Option::Real: settings[o.name] = fmt::format("{}", f.real(o.name)); break;
      case lab::Option::Text: settings[o.name] = f.str(o.name); break;
      case lab::Option::Switch: settings[o.name] = f.on(o.name) ? "1" : "0"; break;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  lab::Report report(l, settings);
  l.run(report);
  Outcome r;
  r.code = report.finish();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.line = report.verdict();
  int targets = 0, failed = 0;
  for (const auto& c : report.claims()) targets += c.spec.control_targets, failed += c.spec.control_targets && !c.holds;
  r.targets_all_fail = targets > 0 && failed == targets;
  if (report.placebo_mode()) r.targets_all_fail = r.code == 0;
  if (control || ablate) r.code = r.code == 1 ? 1 : r.targets_all_fail ? 0 : 3;  // a control's own exit: 0 when it did its job  // a placebo: every claim's false-positive rate within bounds
  if (f.on("html")) fmt::print("page: {}\n", write_lab_page(out));
  return r;
}

// One run of `lab all`: a lab, its control or its ablation.
struct AllJob {
  const lab::Lab* lab = nullptr;
  const char* kind = "";  // "", "control" or "ablate"
  std::string out;        // its output folder
  int after = -1;         // a control waits for its lab: exposure's and attribution's load the lab's models
};

// The runs of `lab all`: every lab (of --only), then every control and ablation.
std::vector<AllJob> all_jobs(const Flags& f) {
  std::vector<const lab::Lab*> chosen;
  std::string only = f.str("only");
  for (size_t at = 0; !only.empty() && at <= only.size();) {
    const size_t comma = std::min(only.find(',', at), only.size());
    const std::string name = only.substr(at, comma - at);
    try {
      const lab::Lab* l = &lab::find_lab(name);
      if (std::find(chosen.begin(), chosen.end(), l) == chosen.end()) chosen.push_back(l);  // a name given twice runs once
    } catch (const std::invalid_argument& e) {
      GF_FAIL_AS(UsageError, "lab all --only: {}", e.what());
    }
    at = comma + 1;
  }
  if (only.empty())
    for (const auto& l : lab::labs()) chosen.push_back(&l);
  std::vector<AllJob> jobs;
  for (const lab::Lab* l : chosen) jobs.push_back({l, "", (std::filesystem::path(f.str("out")) / l->name).string()});
  const size_t labs = jobs.size();
  for (size_t i = 0; i < labs; ++i) {
    if (!jobs[i].lab->control.empty()) jobs.push_back({jobs[i].lab, "control", jobs[i].out + "-control", static_cast<int>(i)});
    if (!jobs[i].lab->ablation.empty()) jobs.push_back({jobs[i].lab, "ablate", jobs[i].out + "-ablate", static_cast<int>(i)});
  }
  return jobs;
}

// Runs the jobs one after the other in this process.
std::vector<Outcome> run_in_process(const std::vector<AllJob>& jobs) {
  std::vector<Outcome> out;
  for (const AllJob& j : jobs) {
    const bool control = std::string(j.kind) == "control", ablate = std::string(j.kind) == "ablate";
    char* none[] = {nullptr};
    try {  // one lab's error is reported and counted, and the others still run
      out.push_back(run_lab(*j.lab, 0, none, j.out, control, ablate));
    } catch (const std::exception& e) {
      fmt::print("gradflow lab {}{}{}: error: {}\n", j.lab->name, *j.kind ? " --" : "", j.kind, e.what());
      out.push_back({1, 0, "error", false});
    }
    fmt::print("\n");
  }
  return out;
}

// Runs the jobs as child processes, `parallel` at once, each printed whole when it ends. A child's
// exit code is its outcome: a lab's 0, 3 or 4; a control's 0 when it did its job, else 3; 1 an error.
std::vector<Outcome> run_as_children(const std::vector<AllJob>& jobs, int parallel, bool html) {
  const int threads = std::max(1, max_threads() / parallel);
  std::vector<ChildJob> children;
  for (const AllJob& j : jobs) {
    std::filesystem::create_directories(j.out);
    ChildJob c{{"lab", j.lab->name, "--out", j.out, "--threads", std::to_string(threads)}, (std::filesystem::path(j.out) / "lab.log").string(), j.after};
    if (*j.kind) c.args.push_back(std::string("--") + j.kind);
    if (html) c.args.push_back("--html");
    children.push_back(std::move(c));
  }
  fmt::print("lab all: {} runs, {} at once, {} thread{} each; each run's output is printed when it ends\n\n", jobs.size(), parallel,
             threads, threads == 1 ? "" : "s");
  std::fflush(stdout);
  const auto results = run_child_jobs(children, parallel, [&](size_t i, const ChildResult& r) {
    fmt::print("==== gradflow {} ({:.1f} s, exit {})\n{}\n", fmt::join(children[i].args, " "), r.seconds, r.code,
               train::read_text_file(children[i].log));
    std::fflush(stdout);
  });
  std::vector<Outcome> out;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const int code = results[i].code == 0 || results[i].code == 3 || results[i].code == 4 ? results[i].code : 1;
    out.push_back({code, results[i].seconds, "", *jobs[i].kind && code == 0});
  }
  return out;
}

// `gradflow lab all`: every lab, then every control, and a summary. Exit 0 when every paper claim
// is supported and no control supports a target; 3 when a claim is contradicted, a check fails, a
// lab errs or a control supports a target; 4 otherwise (something unsettled).
int run_all(int argc, char** argv) {
  Flags f = lab_all_flags();
  if (!f.parse(argc, argv)) return 0;
  if (f.on("claims")) {
    for (const auto& l : lab::labs()) print_claims(l), fmt::print("\n");
    return 0;
  }
  GF_CHECK_AS(UsageError, f.integer("jobs") >= 0, "lab all: --jobs must be 0 (one per core) or more, got {}", f.integer("jobs"));
  const std::vector<AllJob> jobs = all_jobs(f);
  const int parallel = f.integer("jobs") > 0 ? static_cast<int>(f.integer("jobs")) : max_threads();
  const std::vector<Outcome> outcomes = parallel == 1 ? run_in_process(jobs) : run_as_children(jobs, parallel, f.on("html"));
  struct Row {
    std::string name;
    Outcome lab, control, ablation;
    bool has_control = false, has_ablation = false;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string kind = jobs[i].kind;
    if (kind.empty()) rows.push_back({jobs[i].lab->name, outcomes[i], {}, {}, false, false});
    Row& r = rows[static_cast<size_t>(kind.empty() ? rows.size() - 1 : jobs[i].after)];
    if (kind == "control") r.control = outcomes[i], r.has_control = true;
    if (kind == "ablate") r.ablation = outcomes[i], r.has_ablation = true;
  }
  int code = 0;
  double total = 0;
  fmt::print("all labs (lab: every paper claim supported, exit 0; control: no target supported):\n  {:<12}  {:<12}  {:>8}  {:<12}  {:>8}\n", "lab",
             "lab", "seconds", "control", "seconds");
  for (const auto& r : rows) {
    const bool control_ok = (!r.has_control || (r.control.code != 1 && r.control.targets_all_fail)) &&
                            (!r.has_ablation || (r.ablation.code != 1 && r.ablation.targets_all_fail));
    const int lab_code = r.lab.code == 1 ? 3 : r.lab.code;
    if (lab_code == 3 || !control_ok) code = 3;  // a contradiction outranks anything unsettled
    else if (lab_code == 4 && code == 0) code = 4;
    total += r.lab.seconds + r.control.seconds + r.ablation.seconds;
    const char* lab_word = r.lab.code == 1 ? "ERROR" : r.lab.code == 0 ? "supports all" : r.lab.code == 3 ? "CONTRADICTS" : "unsettled";
    const bool any_control = r.has_control || r.has_ablation;
    const bool control_error = (r.has_control && r.control.code == 1) || (r.has_ablation && r.ablation.code == 1);
    fmt::print("  {:<12}  {:<12}  {:>8.1f}  {:<12}  {:>8}\n", r.name, lab_word, r.lab.seconds,
               !any_control ? "(none)" : control_error ? "ERROR" : control_ok ? "no target" : "TARGET HOLDS",
               any_control ? fmt::format("{:.1f}", r.control.seconds + r.ablation.seconds) : "-");
  }
  fmt::print("  total {:.1f} s of runs{}; {}\n", total, parallel > 1 ? fmt::format(", {} at once", parallel) : "",
             code == 0 ? "every lab's claims supported and no control supports a target"
                       : code == 4 ? "some claims unsettled; none contradicted, and no control supports a target"
                                   : "a claim contradicted, a check failed, or a control supports a target");
  if (f.on("html")) fmt::print("pages: {}\n", write_lab_index(f.str("out")));
  return code;
}

}  // namespace

int cmd_lab(int argc, char** argv) {
  if (argc == 0 || std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h") {
    list_labs();
    return 0;
  }
  // The labs measure float32 gradient flow, whatever --precision auto picks for train and eval
  // here; the precision lab rounds to bfloat16 itself, with the scalar conversion.
  const kernels::PrecisionScope fp32(Precision::Float32);
  const std::string name = argv[0];
  if (name == "all") return run_all(argc - 1, argv + 1);
  if (name == "run") {
    GF_CHECK_AS(UsageError, argc >= 2 && argv[1][0] != '-',
                "lab run: give the experiment file first: gradflow lab run FILE [--out DIR] [--seeds N] [--seed S] [--control] [--html] "
                "(docs/labs.md, \"Ask your own question\")");
    const LabSpec spec = parse_lab_spec(argv[1]);
    return run_lab(spec_lab(spec), argc - 2, argv + 2, "runs/lab/" + spec.name).code;
  }
  const lab::Lab* found = nullptr;
  try {
    found = &lab::find_lab(name);
  } catch (const std::invalid_argument& e) {
    GF_FAIL_AS(UsageError, "{}", e.what());
  }
  return run_lab(*found, argc - 1, argv + 1, "runs/lab/" + name).code;
}

}  // namespace gf::app

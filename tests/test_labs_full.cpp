// Every lab of `gradflow lab`, run as a user runs it, from the built program (issue 35, item 7):
//  - the lab at its CI settings must give, for each paper claim, its recorded outcome (supported,
//    contradicted or unsettled; lab/report.h), every exact check passing, each claim in the JSON
//    with its kind, outcome, mean and interval, and no paper claim whose per-seed values are all
//    equal (that is a check, item 4);
//  - its negative control, where it has one (--control: the same protocol without the causal
//    ingredient), must leave every claim marked control_targets (beside its code) unsupported.
// The margin. A lab trains through BLAS, whose summation order differs between CPUs and kernels, so
// a claim whose interval sits near its threshold can land on the other side of it on another
// machine. The test therefore accepts the *neighbouring* outcome (unsettled for a recorded
// supported or contradicted claim, or the nearer decided one for a recorded unsettled claim) when the
// deciding interval's end lies within half of its own half-width of the threshold, and unsettled
// for a recorded decided claim that the run calls "unsettled by design" (fewer seeds than its
// design's n*, lab/report.h). A flip between supported and contradicted always fails. It takes
// minutes, not seconds (the labs' own timing is in docs/labs.md, measured alone, not here). The CI settings are the lab's defaults, or fewer seeds,
// steps or sweep points; under the sanitizers' short budget (GRADFLOW_TEST_SHORT, tests/test_budget.h)
// `short_args` is added to cut them further. A lab is one line at the end of this file.
#include <doctest/doctest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_budget.h"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code = -1;
  std::string log;
  json j;
  bool svg = false;
};

// kind: "" for the lab, "control" or "ablate" for its control (the flag of that name).
Run run_gradflow_lab(const std::string& name, const std::string& args, const std::string& kind) {
  const std::string tag = name + (kind.empty() ? "" : "_" + kind) + "_" + std::to_string(::getpid());
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_full_" + tag);
  fs::remove_all(out);
  const fs::path log = out.string() + ".log";
  // One thread: `ctest -j2` runs two labs at once on CI's two cores, and the labs' small models run
  // as fast or faster on one thread than on two (docs/labs.md, "Time").
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab " + name + " --threads 1 --out " + out.string() + " " + args +
                          (kind.empty() ? "" : " --" + kind) + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  Run r;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  r.log = text.str();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  const fs::path jpath = out / (name + ".json");
  if (fs::exists(jpath)) {
    std::ifstream jf(jpath);
    r.j = json::parse(jf);
  }
  r.svg = fs::exists(out / (name + ".svg"));
  // GRADFLOW_LABS_KEEP=DIR keeps each run's JSON and log as DIR/NAME[-kind]/ (the outcome tables in
  // the closing notes come from there: scripts/lab_tables.py DIR).
  if (const char* keep = std::getenv("GRADFLOW_LABS_KEEP"); keep && *keep) {
    const fs::path dir = fs::path(keep) / (name + (kind.empty() ? "" : "-" + kind));
    fs::create_directories(dir);
    if (fs::exists(jpath)) fs::copy_file(jpath, dir / (name + ".json"), fs::copy_options::overwrite_existing);
    fs::copy_file(log, dir / (name + ".log"), fs::copy_options::overwrite_existing);
  }
  fs::remove_all(out);
  fs::remove(log);
  return r;
}

// Every claim's JSON fields (lab/report.h), whatever its verdict.
void check_fields(const json& c) {
  CAPTURE(c.dump());
  CHECK((c.at("kind") == "paper" || c.at("kind") == "check"));
  for (const char* k : {"id", "statement", "method", "side", "source", "evidence", "outcome"}) CHECK(c.at(k).is_string());
  for (const char* k : {"holds", "control_targets"}) CHECK(c.at(k).is_boolean());
  CHECK(c.at("threshold").is_number());
  CHECK(c.at("n").is_number_integer());
  for (const char* k : {"mean", "lo", "hi"}) CHECK((c.at(k).is_number() || c.at(k).is_null()));  // null: NaN
}

// A paper claim's recorded outcome on the recording machine (docs/labs.md says which).
struct Recorded {
  std::string id;
  std::string outcome;  // "supported", "contradicted" or "unsettled"
};

// How far the deciding interval clears the threshold on the claimed side (positive when it lies
// strictly there) and on the other side, and the margin: half of the interval's half-width.
struct Clearance {
  double supported = NAN, contradicted = NAN, margin = NAN;
};
Clearance clearance(const json& c) {
  const json& iv = c.contains("decisive") ? c.at("decisive") : c;
  if (!iv.at("lo").is_number() || !iv.at("hi").is_number()) return {};
  const double lo = iv.at("lo").get<double>(), hi = iv.at("hi").get<double>(), t = c.at("threshold").get<double>();
  const bool above = c.at("side") == "above";
  return {above ? lo - t : t - hi, above ? t - hi : lo - t, (hi - lo) / 4};
}

// The observed outcome against the recorded one, by the margin rule at the top of this file.
bool outcome_accepted(const json& c, const std::string& recorded) {
  const std::string seen = c.at("outcome").get<std::string>();
  if (seen == recorded) return true;
  // A claim its lab cannot settle at these seeds by its own design (design.by_design: unsettled with
  // fewer seeds than the design's n*) was decided by chance where it was recorded, and another
  // kernel's summation order may leave it unsettled: exposure's ss_derailment_trend at 3 seeds needs
  // 11 by its pilot, and under OpenBLAS's Cooperlake kernel its per-seed slopes were -0.047, -0.093,
  // +0.017. Unsettled is accepted there; the opposite decision still fails.
  if (seen == "unsettled" && recorded != "unsettled" && c.contains("design") && c.at("design").value("by_design", false)) return true;
  const Clearance k = clearance(c);
  if (!std::isfinite(k.margin)) return false;
  if (recorded == "supported" && seen == "unsettled") return k.supported >= -k.margin;
  if (recorded == "contradicted" && seen == "unsettled") return k.contradicted >= -k.margin;
  if (recorded == "unsettled" && seen == "supported") return k.supported <= k.margin;
  if (recorded == "unsettled" && seen == "contradicted") return k.contradicted <= k.margin;
  return false;  // supported <-> contradicted: never
}

// The lab at its CI settings: each paper claim as recorded (`recorded`, default supported), every
// exact check passing, paper claims across >= 3 seeds with some spread.
void lab_as_recorded(const std::string& name, const std::string& args, const std::string& short_args, const std::vector<Recorded>& recorded) {
  const Run r = run_gradflow_lab(name, gf::test::short_budget() ? args + " " + short_args : args, "");
  INFO(r.log);
  REQUIRE((r.exit_code == 0 || r.exit_code == 3 || r.exit_code == 4));  // other: an error
  CHECK(r.svg);
  REQUIRE(r.j.is_object());
  CHECK(r.j.at("lab") == name);
  CHECK(r.j.at("control") == false);
  REQUIRE(r.j.at("claims").size() >= 2);
  for (const auto& rec : recorded) {
    const auto& cs = r.j.at("claims");
    CAPTURE(rec.id);
    CHECK(std::any_of(cs.begin(), cs.end(), [&](const json& c) { return c.at("id") == rec.id && c.at("kind") == "paper"; }));
  }
  bool every_supported = true, any_contradicted = false, every_check = true;
  for (const auto& c : r.j.at("claims")) {
    check_fields(c);
    const std::string id = c.at("id").get<std::string>();
    CAPTURE(id);
    CAPTURE(c.dump());
    if (c.at("kind") == "check") {
      CHECK(c.at("holds").get<bool>());
      every_check = every_check && c.at("holds").get<bool>();
      continue;
    }
    CHECK(c.at("n").get<int>() >= 3);
    std::string want = "supported";
    for (const auto& rec : recorded)
      if (rec.id == id) want = rec.outcome;
    CAPTURE(want);
    CHECK(outcome_accepted(c, want));
    every_supported = every_supported && c.at("outcome") == "supported";
    any_contradicted = any_contradicted || c.at("outcome") == "contradicted";
    // Item 4: a paper claim must vary from seed to seed; equal values make it a check.
    std::vector<double> v;
    for (const auto& x : c.at("values"))
      if (x.is_number()) v.push_back(x.get<double>());
    CHECK(v.size() >= 3);
    CHECK(std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) != v.end());
  }
  // The exit code and the verdict line follow the outcomes (lab/report.h). A lab of exact checks
  // only (nan, graph) is a demonstration and says so instead of naming a paper.
  const int code = any_contradicted || !every_check ? 3 : every_supported ? 0 : 4;
  CHECK(r.exit_code == code);
  const bool demonstration = !std::any_of(r.j.at("claims").begin(), r.j.at("claims").end(), [](const json& c) { return c.at("kind") == "paper"; });
  const std::string verdict = demonstration ? (code == 0 ? "demonstration: " : "demonstration: FAILS")
                              : code == 0   ? "check: AGREES with"
                              : code == 4   ? "check: UNSETTLED for"
                                            : "check: ";
  CHECK(r.log.find(verdict) != std::string::npos);
}

// Its control. A placebo (Lab::placebo: each contrast's own statistic over pools of runs of the null
// condition that share no seed, lab/runner.h) must have the decision rule call each contrast
// supported in at most 5% of its pools (with fewer than 20 pools: in none); an ablation (the causal ingredient
// removed: --control of a lab without a placebo, or --ablate) must leave every claim marked
// control_targets unsupported. Either way the control exits 0 when it did its job.
void control_no_target(const std::string& name, const std::string& args, const std::string& short_args, const std::string& kind = "control") {
  const Run r = run_gradflow_lab(name, gf::test::short_budget() ? args + " " + short_args : args, kind);
  INFO(r.log);
  CHECK(r.log.find("control: ") != std::string::npos);
  REQUIRE(r.j.is_object());
  CHECK(r.j.at("control") == true);
  if (r.j.contains("placebo")) {
    CHECK(r.exit_code == 0);
    int tested = 0;
    for (const auto& p : r.j.at("placebo").at("claims")) {
      CAPTURE(p.dump());
      if (p.at("splits").get<int>() == 0) continue;  // no contrast: no placebo
      ++tested;
      CHECK(p.at("splits").get<int>() >= 1);  // the pools
      CHECK(p.at("rate").get<double>() <= 0.05);
    }
    CHECK(tested >= 1);
    return;
  }
  CHECK(r.exit_code == 0);  // a control's exit: 0 when it did its job
  int targets = 0;
  for (const auto& c : r.j.at("claims")) {
    check_fields(c);
    CAPTURE(c.at("id").get<std::string>());
    if (!c.at("control_targets").get<bool>()) continue;
    ++targets;
    CHECK(c.at("outcome") != "supported");
  }
  CHECK(targets >= 1);
}

// One lab: as recorded, and its control (where it has one) at the same settings.
void lab_and_control(const std::string& name, const std::string& args, const std::string& short_args, const std::vector<Recorded>& recorded,
                     bool has_control = true) {
  SUBCASE("as recorded") { lab_as_recorded(name, args, short_args, recorded); }
  if (has_control) SUBCASE("its control supports no target") { control_no_target(name, args, short_args); }
}

}  // namespace

// name, CI settings, what the short budget adds, and the recorded outcomes of the paper claims that
// are not supported (every other paper claim: supported). Recorded alone on a 2-core AMD EPYC (Zen 4,
// OpenBLAS's own kernel choice), docs/labs.md; the margin above covers the other kernels.
// norm's, entropy's and padding's dose-response claims (warm-up length, learning rate, padded length)
// are named as scale's and depth's are below.
TEST_CASE("lab norm") {
  lab_and_control("norm", "", "--seeds 3", {{"postln_warmup_trend", "supported"}});
  SUBCASE("its ablation (Pre-LN in every arm) supports no target") { control_no_target("norm", "", "--seeds 3", "ablate"); }
}
TEST_CASE("lab leak") { lab_and_control("leak", "", "", {}); }
TEST_CASE("lab padding") {
  lab_and_control("padding", "", "", {{"pad_change_trend", "supported"}});
  SUBCASE("its ablation (both padding masks in every arm) supports no target") { control_no_target("padding", "", "", "ablate"); }
}
// nan and graph are demonstrations: exact checks only, so no control.
TEST_CASE("lab nan") { lab_and_control("nan", "", "", {}, false); }
// The dose-response claims (issue 35, item 5: a trend over 4 or more levels of the causal factor) are
// named, so that the test fails if one goes missing; they are recorded supported, scale's unscaled
// trend at -0.261 [-0.282, -0.241] against -0.2 and smoothing's gap trend well below -1.
TEST_CASE("lab scale") {
  lab_and_control("scale", "", "--seeds 3 --steps 100", {{"unscaled_gradient_trend", "supported"}, {"scaled_gradient_trend", "supported"}});
}
TEST_CASE("lab depth") {
  // --seeds 5: CI's settings; the lab's default is 6, the seeds its design asks (docs/labs/depth.md, Seeds).
  lab_and_control("depth", "--seeds 5", "--depths 1,2,4,8,16", {{"postln_amplifies_more", "supported"}, {"preln_nearer_log", "supported"}});
}
TEST_CASE("lab entropy") {
  lab_and_control("entropy", "", "", {{"entropy_collapse_trend", "supported"}});
  SUBCASE("its ablation (the safe rate in both arms) supports no target") { control_no_target("entropy", "", "", "ablate"); }
}
// The two labs that train translators start from an empty cache, as a fresh build would.
// Attribution's control (its ablation) loads the lab's models and measures them otherwise;
// exposure's placebo trains a pool of teacher-forced models on seeds of their own.
namespace {
std::string fresh_cache(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gradflow_lab_full_cache_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}
}  // namespace
// attribution: each attribution method agrees more with attention than with the other methods, so
// two of Jain and Wallace's three claims are contradicted and the third is unsettled
// (docs/labs/attribution.md).
TEST_CASE("lab attribution") {
  const std::string cache = fresh_cache("attribution");
  const std::string shorter = "--sentences 20 --ig-steps 16 --permutations 4";
  lab_as_recorded("attribution", "--cache " + cache, shorter, {{"methods_agree_gxi", "unsettled"}, {"methods_agree_loo", "contradicted"}, {"methods_agree_ig", "contradicted"}});
  control_no_target("attribution", "--cache " + cache, shorter);
  fs::remove_all(cache);
}
// exposure, 3 seeds (its budget) at 4 levels of scheduled sampling's speed, each model kept at its
// best free-running accuracy (--select free-running): "derails" is supported; the gap's growth and
// both trends are unsettled by design, on one thread under Cooperlake, Haswell and SkylakeX alike
// (the derailment's trend: deciding intervals [-0.267, +0.192], [-0.446, +0.292] and [-0.309, +0.085]
// against -0.02; docs/labs/exposure.md).
TEST_CASE("lab exposure") {
  const std::string cache = fresh_cache("exposure");
  lab_as_recorded("exposure", "--cache " + cache, "",
                  {{"gap_grows", "unsettled"}, {"derails", "supported"}, {"ss_gap_trend", "unsettled"}, {"ss_derailment_trend", "unsettled"}});
  control_no_target("exposure", "--cache " + cache, "");
  fs::remove_all(cache);
}
TEST_CASE("lab graph") { lab_and_control("graph", "", "", {}, false); }
// kvcache times steps, so the short budget times fewer.
TEST_CASE("lab kvcache") { lab_and_control("kvcache", "", "--seeds 3 --lengths 32,64,128,256 --reps 3", {}); }
// gqa at its default 5 seeds, which settle both paper claims on every kernel tried (docs/labs/gqa.md).
// At 3 seeds the outcome depended on the summation order: unsettled on two threads, supported on one
// (the quality trend's deciding interval ended at -0.001, then at -0.049, against -0.01).
TEST_CASE("lab gqa") { lab_and_control("gqa", "", "", {}); }
TEST_CASE("lab smoothing") { lab_and_control("smoothing", "", "--seeds 3", {{"logit_gap_trend", "supported"}}); }
TEST_CASE("lab crossattn") { lab_and_control("crossattn", "", "--seeds 3 --steps 300 --eval 100", {}); }
// precision rounds with the scalar bfloat16 of tensor/dtype.h, so it runs on any CPU.
TEST_CASE("lab precision") { lab_and_control("precision", "", "--seeds 3 --steps 200", {}); }

// `lab all` runs its labs as child processes, two at once, a control only after its lab (exposure's
// and attribution's load the lab's models); each run's output is printed whole as it ends, and the
// summary counts what the children's exit codes say. --jobs 1 runs them in this process instead.
TEST_CASE("lab all") {
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_all_" + std::to_string(::getpid()));
  fs::remove_all(out);
  auto run = [&](const std::string& args) {
    const fs::path log = out.string() + ".log";
    const int status = std::system((std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab all --out " + out.string() + " " + args + " > " +
                                    log.string() + " 2>&1")
                                       .c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    fs::remove(log);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str());
  };
  const auto [code, log] = run("--only nan,padding,graph --jobs 2");
  CAPTURE(log);
  CHECK(code == 0);
  CHECK(log.find("lab all: 5 runs, 2 at once, ") != std::string::npos);
  const std::string started = "==== gradflow lab padding --out ";
  const size_t lab_end = log.find(started + (out / "padding").string() + " --threads 1 ("),
               control_end = log.find(started + (out / "padding-control").string() + " --threads 1 --control (");
  REQUIRE(lab_end != std::string::npos);
  REQUIRE(control_end != std::string::npos);
  CHECK(control_end > lab_end);  // each run is printed as it ends: the control ended after its lab
  for (const char* dir : {"nan", "graph", "padding", "padding-control", "padding-ablate"}) {
    CAPTURE(dir);
    CHECK(fs::exists(out / dir / "lab.log"));
  }
  std::ifstream jf(out / "padding-control" / "padding.json");
  CHECK(json::parse(jf).at("control") == true);
  CHECK(log.find("padding       supports all") != std::string::npos);
  CHECK(log.find("no target") != std::string::npos);

  const auto [one_code, one_log] = run("--only nan,graph,nan --jobs 1");  // a name given twice runs once
  CHECK(one_code == 0);
  size_t nan_runs = 0;
  for (size_t at = one_log.find("lab nan: "); at != std::string::npos; at = one_log.find("lab nan: ", at + 1)) ++nan_runs;
  CHECK(nan_runs == 1);
  CHECK(one_log.find("lab all: ") == std::string::npos);  // in this process: no children
  CHECK(one_log.find("graph         supports all") != std::string::npos);

  const auto [bad_code, bad_log] = run("--only nan,nope");
  CHECK(bad_code == 2);
  CHECK(bad_log.find("nope") != std::string::npos);
  fs::remove_all(out);
}

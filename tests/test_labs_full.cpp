// Every lab of `gradflow lab`, run as a user runs it, from the built program, twice (issue 27):
//  - the lab at its CI settings must AGREE: exit 0, every paper claim's interval on its claimed
//    side, every exact check passing, each claim in the JSON with its kind, mean and interval;
//  - its negative control (--control: the same protocol without the causal ingredient) must
//    DISAGREE: exit 3, and EVERY claim marked control_targets in lab/claims.cpp failing.
// A claim that passes either way fails this test. It takes minutes, not seconds (the labs' own
// timing is in docs/labs.md, measured alone, not here). The CI settings are the lab's defaults,
// or fewer seeds (at least 3 for paper claims), steps or sweep points; under the sanitizers' short
// budget (GRADFLOW_TEST_SHORT, tests/test_budget.h) `short_args` is added to cut them further,
// every claim still asserting. A lab is one line at the end of this file.
#include <doctest/doctest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
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

Run run_gradflow_lab(const std::string& name, const std::string& args, bool control) {
  const std::string tag = name + (control ? "_control" : "") + "_" + std::to_string(::getpid());
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_full_" + tag);
  fs::remove_all(out);
  const fs::path log = out.string() + ".log";
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab " + name + " --out " + out.string() + " " + args +
                          (control ? " --control" : "") + " > " + log.string() + " 2>&1";
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
  fs::remove_all(out);
  fs::remove(log);
  return r;
}

// Every claim's JSON fields (lab/report.h), whatever its verdict.
void check_fields(const json& c) {
  CAPTURE(c.dump());
  CHECK((c.at("kind") == "paper" || c.at("kind") == "check"));
  for (const char* k : {"id", "statement", "method", "side", "source", "evidence"}) CHECK(c.at(k).is_string());
  for (const char* k : {"holds", "control_targets"}) CHECK(c.at(k).is_boolean());
  CHECK(c.at("threshold").is_number());
  CHECK(c.at("n").is_number_integer());
  for (const char* k : {"mean", "lo", "hi"}) CHECK((c.at(k).is_number() || c.at(k).is_null()));  // null: NaN
}

// The lab at its CI settings: AGREES, every claim holding; paper claims across >= 3 seeds.
void lab_agrees(const std::string& name, const std::string& args, const std::string& short_args) {
  const Run r = run_gradflow_lab(name, gf::test::short_budget() ? args + " " + short_args : args, false);
  INFO(r.log);
  REQUIRE(r.exit_code == 0);  // 0: agrees; 3: disagrees; other: an error
  CHECK(r.log.find("check: AGREES with") != std::string::npos);
  CHECK(r.svg);
  REQUIRE(r.j.is_object());
  CHECK(r.j.at("lab") == name);
  CHECK(r.j.at("control") == false);
  CHECK(r.j.at("check").at("agrees").get<bool>());
  REQUIRE(r.j.at("claims").size() >= 2);
  for (const auto& c : r.j.at("claims")) {
    check_fields(c);
    CAPTURE(c.at("id").get<std::string>());
    CHECK(c.at("holds").get<bool>());
    if (c.at("kind") == "paper") CHECK(c.at("n").get<int>() >= 3);
  }
}

// Its control: DISAGREES, with every targeted claim failing.
void control_disagrees(const std::string& name, const std::string& args, const std::string& short_args) {
  const Run r = run_gradflow_lab(name, gf::test::short_budget() ? args + " " + short_args : args, true);
  INFO(r.log);
  REQUIRE(r.exit_code == 3);
  CHECK(r.log.find("control: ") != std::string::npos);
  CHECK(r.log.find("check: DISAGREES with") != std::string::npos);
  REQUIRE(r.j.is_object());
  CHECK(r.j.at("control") == true);
  int targets = 0;
  for (const auto& c : r.j.at("claims")) {
    check_fields(c);
    CAPTURE(c.at("id").get<std::string>());
    if (!c.at("control_targets").get<bool>()) continue;
    ++targets;
    CHECK_FALSE(c.at("holds").get<bool>());
  }
  CHECK(targets >= 1);
}

// A lab whose run disagrees with part of its paper, robustly (each failing claim's interval lies on
// the wrong side of its threshold, well clear of it): exit 3, exactly the claims `fail` failing,
// every other claim holding. The page of the lab says why; a claim that flips either way fails.
void lab_disagrees_on(const std::string& name, const std::string& args, const std::string& short_args, const std::vector<std::string>& fail) {
  const Run r = run_gradflow_lab(name, gf::test::short_budget() ? args + " " + short_args : args, false);
  INFO(r.log);
  REQUIRE(r.exit_code == 3);
  CHECK(r.log.find("check: DISAGREES with") != std::string::npos);
  CHECK(r.svg);
  REQUIRE(r.j.is_object());
  CHECK(r.j.at("control") == false);
  REQUIRE(r.j.at("claims").size() >= 2);
  for (const auto& c : r.j.at("claims")) {
    check_fields(c);
    const std::string id = c.at("id").get<std::string>();
    CAPTURE(id);
    CHECK(c.at("holds").get<bool>() == (std::find(fail.begin(), fail.end(), id) == fail.end()));
    if (c.at("kind") == "paper") CHECK(c.at("n").get<int>() >= 3);
  }
}

// One lab: the lab must agree and its control disagree, at the same settings.
void lab_and_control(const std::string& name, const std::string& args = "", const std::string& short_args = "") {
  SUBCASE("agrees") { lab_agrees(name, args, short_args); }
  SUBCASE("its control disagrees") { control_disagrees(name, args, short_args); }
}

}  // namespace

// name, CI settings, and what the short budget adds. Paper claims take a t interval across seeds,
// whose width at 3 seeds (t = 4.30) some claims' margins do not survive: those labs keep their 5.
TEST_CASE("lab norm") { lab_and_control("norm", "--seeds 3", "--steps 100"); }
TEST_CASE("lab leak") { lab_and_control("leak"); }
TEST_CASE("lab padding") { lab_and_control("padding"); }
TEST_CASE("lab nan") { lab_and_control("nan"); }
TEST_CASE("lab scale") { lab_and_control("scale", "--seeds 3", "--steps 100"); }
TEST_CASE("lab depth") { lab_and_control("depth", "", "--depths 1,2,4,8,16"); }
// entropy keeps its defaults even under the short budget: its collapse claim's interval (upper end
// 0.097 against 0.1 at 5 seeds) survives neither fewer seeds nor fewer steps.
TEST_CASE("lab entropy") { lab_and_control("entropy"); }
// The two labs that train translators start from an empty cache, as a fresh build would; the
// control then loads the lab's models (it changes what is measured, not the models).
namespace {
std::string fresh_cache(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gradflow_lab_full_cache_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}
}  // namespace
// attribution disagrees with Jain and Wallace on the methods' agreement, each interval below 0
// (docs/labs/attribution.md).
TEST_CASE("lab attribution") {
  const std::string cache = fresh_cache("attribution");
  const std::string shorter = "--sentences 20 --ig-steps 16 --permutations 4";
  lab_disagrees_on("attribution", "--cache " + cache, shorter, {"methods_agree_gxi", "methods_agree_loo", "methods_agree_ig"});
  control_disagrees("attribution", "--cache " + cache, shorter);
  fs::remove_all(cache);
}
// exposure, trained to convergence, disagrees on the gap's growth and on scheduled sampling
// narrowing it (docs/labs/exposure.md); convergence leaves nothing to shorten.
TEST_CASE("lab exposure") {
  const std::string cache = fresh_cache("exposure");
  lab_disagrees_on("exposure", "--cache " + cache, "", {"gap_grows", "ss_narrows_gap"});
  control_disagrees("exposure", "--cache " + cache, "");
  fs::remove_all(cache);
}
TEST_CASE("lab graph") { lab_and_control("graph"); }
// The new labs (issue 27): kvcache times steps, so the short budget times fewer; gqa's quality claim
// needs its full training (a shorter checkpoint or uptraining leaves grouped attention further
// behind multi-head: it failed at 300 + 80 steps), so it runs at its defaults under either budget.
TEST_CASE("lab kvcache") { lab_and_control("kvcache", "", "--seeds 3 --lengths 32,64,128,256 --reps 3"); }
TEST_CASE("lab gqa") { lab_and_control("gqa"); }
TEST_CASE("lab smoothing") { lab_and_control("smoothing", "--seeds 3"); }
TEST_CASE("lab crossattn") { lab_and_control("crossattn", "--seeds 3", "--steps 300 --eval 100"); }
// precision rounds with the scalar bfloat16 of tensor/dtype.h, so it runs on any CPU.
TEST_CASE("lab precision") { lab_and_control("precision", "", "--seeds 3 --steps 200"); }

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
    if (c.at("kind") == "paper" && !c.value("untyped", false)) CHECK(c.at("n").get<int>() >= 3);
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
// Not yet converted to typed claims and a control (issue 27): the lab only.
TEST_CASE("lab entropy") { lab_agrees("entropy", "", "--seeds 1 --lrs 3e-4,3e-3,3e-2 --steps 150"); }
// The two labs that train a translator keep no cache here, so each trains from scratch as a fresh
// build would.
TEST_CASE("lab attribution") { lab_agrees("attribution", "--cache \"\"", "--seeds 1 --train-steps 200"); }
TEST_CASE("lab exposure") { lab_agrees("exposure", "--cache \"\"", "--seeds 1 --train-steps 200"); }
TEST_CASE("lab graph") { lab_and_control("graph"); }

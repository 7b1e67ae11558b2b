// Every lab of `gradflow lab`, run as a user runs it: the command with its defaults, from the
// built program. Each must end with its check line agreeing with the published claim (exit 0),
// and write NAME.json (claims computed, every one holding) and NAME.svg. This is issue 7's "done
// when" as a test; it takes minutes, not seconds (the labs' own timing is in docs/labs.md, measured
// alone, not here). Under the sanitizers' short budget (GRADFLOW_TEST_SHORT, tests/test_budget.h)
// the long labs run with fewer seeds or steps, their claims checked the same way.
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

// `extra` is added to the lab's command line; `short_extra` too under the short budget
// (tests/test_budget.h): fewer seeds, steps or points of a sweep, each chosen so that the lab's
// claims still hold, and checked as strictly as at the defaults.
void run_lab(const std::string& name, const std::string& extra = "", const std::string& short_extra = "") {
  const std::string args = gf::test::short_budget() ? extra + " " + short_extra : extra;
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_full_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const fs::path log = out.string() + ".log";
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab " + name + " --out " + out.string() + " " + args + " > " +
                          log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  INFO(text.str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 0: agrees; 3: disagrees; other: an error
  CHECK(text.str().find("check: AGREES with") != std::string::npos);
  CHECK(fs::exists(out / (name + ".svg")));
  const fs::path jpath = out / (name + ".json");
  REQUIRE(fs::exists(jpath));
  std::ifstream jf(jpath);
  json j = json::parse(jf);
  CHECK(j.at("lab") == name);
  CHECK(j.at("check").at("agrees").get<bool>());
  REQUIRE(j.at("claims").size() >= 2);
  for (const auto& c : j.at("claims")) CHECK(c.at("holds").get<bool>());
  fs::remove_all(out);
  fs::remove(log);
}

}  // namespace

TEST_CASE("lab norm") { run_lab("norm", "", "--seeds 1 --depths 2,4,8 --steps 100"); }
TEST_CASE("lab leak") { run_lab("leak", "", "--seeds 1 --steps 200"); }
TEST_CASE("lab padding") { run_lab("padding", "", "--seeds 1"); }
TEST_CASE("lab nan") { run_lab("nan"); }
TEST_CASE("lab scale") { run_lab("scale"); }
TEST_CASE("lab depth") { run_lab("depth", "", "--seeds 2"); }
TEST_CASE("lab entropy") { run_lab("entropy", "", "--seeds 1 --lrs 3e-4,3e-3,3e-2 --steps 150"); }
// The two labs that train a translator keep no cache here, so each trains from scratch as a fresh
// build would.
TEST_CASE("lab attribution") { run_lab("attribution", "--cache \"\"", "--seeds 1 --train-steps 200"); }
TEST_CASE("lab exposure") { run_lab("exposure", "--cache \"\"", "--seeds 1 --train-steps 200"); }
TEST_CASE("lab graph") { run_lab("graph"); }

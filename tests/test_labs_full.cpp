// Every lab of `gradflow lab`, run as a user runs it: the command with its defaults, from the
// built program. Each must end with its check line agreeing with the published claim (exit 0),
// and write NAME.json (claims computed, every one holding) and NAME.svg. This is issue 7's "done
// when" as a test; it takes minutes, not seconds (the labs' own timing is in docs/labs.md, measured
// alone, not here).
#include <doctest/doctest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

void run_lab(const std::string& name, const std::string& extra = "") {
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_full_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const fs::path log = out.string() + ".log";
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab " + name + " --out " + out.string() + " " + extra + " > " +
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

TEST_CASE("lab norm") { run_lab("norm"); }
TEST_CASE("lab leak") { run_lab("leak"); }
TEST_CASE("lab padding") { run_lab("padding"); }
TEST_CASE("lab nan") { run_lab("nan"); }
TEST_CASE("lab scale") { run_lab("scale"); }
TEST_CASE("lab depth") { run_lab("depth"); }
TEST_CASE("lab entropy") { run_lab("entropy"); }
// The two labs that train a translator keep no cache here, so each trains from scratch as a fresh
// build would.
TEST_CASE("lab attribution") { run_lab("attribution", "--cache \"\""); }
TEST_CASE("lab exposure") { run_lab("exposure", "--cache \"\""); }
TEST_CASE("lab graph") { run_lab("graph"); }

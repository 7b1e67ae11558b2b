// The example experiment files that re-express claims of built-in labs (examples/experiments/)
// give the same per-seed numbers as those labs at the same seeds and settings: norm_warmup.json's
// trend is lab norm's postln_warmup_trend, entropy_collapse.json's is lab entropy's
// entropy_collapse_trend. Both sides run as a user runs them (the built program, one thread);
// two seeds, to keep the test to a few minutes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json run(const std::string& args, const std::string& name) {
  const fs::path out = fs::temp_directory_path() / ("gradflow_lab_run_full_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string cmd = std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab " + args + " --threads 1 --seeds 2 --out " + out.string() + " > " +
                          out.string() + ".log 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream log(out.string() + ".log");
  INFO(std::string(std::istreambuf_iterator<char>(log), {}));
  REQUIRE(WIFEXITED(status));
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3 || WEXITSTATUS(status) == 4));
  std::ifstream in(out / (name + ".json"));
  REQUIRE(in.good());
  const json j = json::parse(in);
  fs::remove_all(out);
  return j;
}

std::vector<double> values(const json& j, const std::string& id) {
  for (const auto& c : j.at("claims"))
    if (c.at("id") == id) return c.at("values").get<std::vector<double>>();
  FAIL("no claim " << id);
  return {};
}

void same_numbers(const std::string& file, const std::string& name, const std::string& lab, const std::string& id) {
  const std::vector<double> mine = values(run("run " + std::string(GRADFLOW_SOURCE_DIR) + "/examples/experiments/" + file, name), id);
  const std::vector<double> theirs = values(run(lab, lab), id);
  REQUIRE(mine.size() == 2);
  REQUIRE(theirs.size() == 2);
  for (size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(i);
    CHECK(mine[i] == theirs[i]);  // the same runs, bit for bit
  }
}

}  // namespace

TEST_CASE("examples/experiments/norm_warmup.json: lab norm's warm-up trend, seed by seed") {
  same_numbers("norm_warmup.json", "norm_warmup", "norm", "postln_warmup_trend");
}

TEST_CASE("examples/experiments/entropy_collapse.json: lab entropy's collapse trend, seed by seed") {
  same_numbers("entropy_collapse.json", "entropy_collapse", "entropy", "entropy_collapse_trend");
}

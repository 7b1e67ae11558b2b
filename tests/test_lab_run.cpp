// `gradflow lab run FILE` (app/lab_spec.h, app/lab_run.cpp): a bad experiment file is refused with
// an error naming the key and the problem before anything runs; a small one runs through the labs'
// runner, writes what a built-in lab writes, and an interrupted run resumes from the runs it kept.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/flags.h"
#include "app/lab_spec.h"

using namespace gf;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

// A tiny experiment: two arms of a 1-layer model on 100 built-in pairs, 3 steps, 3 seeds.
json tiny() {
  return json::parse(R"J({
    "name": "tiny", "question": "Does the tiny recipe run?", "source": "the tests",
    "recipe": "--d-model 16 --heads 2 --layers 1 --ff 32 --dropout 0 --lr 0.003 --schedule constant --warmup 0 --max-tokens 256",
    "arms": {"post": "", "pre": "--norm-first"},
    "seeds": 3, "steps": 3,
    "data": {"builtin": {"pairs": 100}},
    "measures": {"loss": "test_loss", "first": "train_loss@1", "g": "grad_norm[dec0.ffn]@2", "h": "entropy[dec0.cross]@2",
                 "drop": "difference(first, loss)"},
    "claims": [{"id": "learns", "type": "value", "arm": "post", "measure": "drop", "statement": "the loss falls",
                "side": "above", "threshold": 0},
               {"id": "pre_differs", "type": "difference", "a": {"arm": "pre"}, "b": {"arm": "post"}, "measure": "loss",
                "statement": "Pre-LN ends lower", "side": "below", "threshold": 0}]
  })J");
}

fs::path write(const json& j, const std::string& name) {
  const fs::path p = fs::temp_directory_path() / fmt::format("gradflow_lab_run_{}_{}.json", name, ::getpid());
  std::ofstream(p) << j.dump(1);
  return p;
}

// The error of a bad file: it must name `says`.
void refused(json j, const std::string& says) {
  CAPTURE(says);
  CHECK_THROWS_WITH_AS(app::parse_lab_spec(write(j, "bad").string()), doctest::Contains(says.c_str()), app::UsageError);
}

int run(const std::string& args, std::string* log = nullptr) {
  const fs::path out = fs::temp_directory_path() / fmt::format("gradflow_lab_run_log_{}", ::getpid());
  const int status = std::system((std::string(GRADFLOW_BINARY_DIR) + "/gradflow lab run " + args + " > " + out.string() + " 2>&1").c_str());
  if (log) {
    std::ifstream in(out);
    *log = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("lab run: a bad file names the key and the problem, and nothing runs") {
  const app::LabSpec ok = app::parse_lab_spec(write(tiny(), "ok").string());
  CHECK(ok.arms.size() == 2);
  CHECK(ok.measures.size() == 5);
  CHECK(ok.digest.starts_with("xxh3-64:"));
  json j = tiny();
  j["colour"] = "red";
  refused(j, "colour: unknown key");
  j = tiny(), j["arms"]["pre"] = "--no-such-flag";
  refused(j, "arms.pre: --no-such-flag is not a recipe flag");
  j = tiny(), j["recipe"] = "--steps 10";
  refused(j, "recipe: --steps is not a recipe flag");
  j = tiny(), j["arms"]["pre"] = "--heads three";
  refused(j, "the recipe of arm 'pre'");
  j = tiny(), j["measures"]["x"] = "perplexity";
  refused(j, "measures.x: unknown measure 'perplexity'");
  j = tiny(), j["measures"] = json::parse(R"J({"r": "ratio(a, b)", "a": "test_loss", "b": "test_loss"})J");
  refused(j, "reads 'a', which is not a measure defined before it");
  j = tiny(), j["measures"]["g"] = "grad_norm@2";
  refused(j, "measures.g: 'grad_norm@2' needs a module or attention and a step");
  j = tiny(), j["measures"]["g"] = "grad_norm[dec0.ffn]@9";
  refused(j, "step 9 is past the run's 3 steps");
  j = tiny(), j["claims"][0].erase("threshold");
  refused(j, "claims[0].threshold: missing");
  j = tiny(), j["claims"][1]["a"]["arm"] = "sideways";
  refused(j, "claims[1].a.arm: no arm 'sideways'");
  j = tiny(), j["factor"] = json::parse(R"({"flag": "--lr", "levels": [0.001]})");
  refused(j, "factor.levels: a factor needs two or more levels");
  j = tiny(), j["factor"] = json::parse(R"({"flag": "--lr", "levels": [0.001, 0.002]})");
  j["claims"][0] = json::parse(R"({"id": "t", "type": "trend", "arm": "post", "measure": "loss", "statement": "s", "side": "below", "threshold": 0})");
  refused(j, "a trend needs 4 or more levels");
  j = tiny(), j["claims"][0]["level"] = 3;
  refused(j, "claims[0].level: arm 'post' has no factor");
  j = tiny(), j["name"] = "../escape";
  refused(j, "name: '../escape' must be letters, digits");
  CHECK_THROWS_WITH_AS(app::parse_lab_spec("/nonexistent/experiment.json"), doctest::Contains("/nonexistent/experiment.json"), std::exception);
}

TEST_CASE("lab run: a tiny experiment writes its claims, tables and runs; a second run reads the kept runs") {
  const fs::path file = write(tiny(), "tiny");
  const fs::path out = fs::temp_directory_path() / fmt::format("gradflow_lab_run_out_{}", ::getpid());
  fs::remove_all(out);
  std::string log;
  const int code = run(file.string() + " --threads 1 --out " + out.string(), &log);
  INFO(log);
  REQUIRE((code == 0 || code == 3 || code == 4));
  std::ifstream in(out / "tiny.json");
  const json j = json::parse(in);
  REQUIRE(j.at("claims").size() == 2);
  CHECK(j.at("claims")[0].at("values").size() == 3);
  CHECK(j.at("data").at("runs").size() == 6);  // 2 arms x 3 seeds
  for (const auto& r : j.at("data").at("runs")) {
    CHECK(r.at("measured").at("g").get<double>() > 0);
    CHECK(r.at("measured").at("h").get<double>() > 0);
  }
  CHECK(fs::exists(out / "tiny.svg"));
  CHECK(fs::exists(out / "runs" / "post-seed1.json"));
  CHECK(fs::exists(out / "runs" / "post-seed1" / "grad_stats.jsonl"));
  // Interrupted or not, the second run trains nothing: it reads the kept measures (and gets the same claims).
  fs::remove_all(out / "runs" / "post-seed1");
  std::string again;
  CHECK(run(file.string() + " --threads 1 --out " + out.string(), &again) == code);
  CHECK_FALSE(fs::exists(out / "runs" / "post-seed1" / "grad_stats.jsonl"));
  std::ifstream in2(out / "tiny.json");
  const json k = json::parse(in2);
  CHECK(k.at("claims")[0].at("values") == j.at("claims")[0].at("values"));
  fs::remove_all(out);
}

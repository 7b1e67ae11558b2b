// The labs on a trained translator (attribution, exposure) and `gradflow attention --grad`: Kendall's
// tau, the model cache, the SVG panel, and tiny runs of both labs. The maps they read
// (train/inspect/) are tested in tests/test_inspect.cpp.
#include <doctest/doctest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "app/commands.h"
#include "lab/runner.h"
#include "lab/report.h"
#include "lab/trained_model.h"
#include "nn_test_util.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "train/run/run_config.h"
#include "train/data/vocab.h"
#include "temp_dir.h"
#include "tiny_run.h"
#include "train/data/parallel_text.h"

using namespace gf;
using namespace gf::testing;
namespace fs = std::filesystem;

TEST_CASE("kendall_tau: tau-b by hand, with and without ties") {
  // (1,2,3) against (1,3,2): pairs (0,1) and (0,2) concordant, (1,2) discordant: (2 - 1) / 3.
  CHECK(lab::kendall_tau({1, 2, 3}, {1, 3, 2}) == doctest::Approx(1.0 / 3.0).epsilon(1e-15));
  // a ties its first two: 2 concordant of 3 pairs, 2 untied in a, 3 in b: 2 / sqrt(2 x 3).
  CHECK(lab::kendall_tau({1, 1, 2}, {1, 2, 3}) == doctest::Approx(2.0 / std::sqrt(6.0)).epsilon(1e-15));
  CHECK(lab::kendall_tau({3, 2, 1}, {1, 2, 3}) == doctest::Approx(-1.0));
  CHECK(std::isnan(lab::kendall_tau({1, 1, 1}, {1, 2, 3})));  // a constant side ranks nothing
}

TEST_CASE("a model trained for a lab is cached and loaded back with the same weights and test pairs") {
  const test::TempDir cache_tmp("gradflow_test_lab_trained_cache");
  const fs::path cache = cache_tmp.path;
  const lab::Lab& attribution = lab::find_lab("attribution");
  std::map<std::string, std::string> settings{{"out", (cache / "out").string()}, {"seeds", "1"}, {"seed", "1"}};
  for (const auto& o : attribution.options) settings[o.name] = o.default_value.empty() && o.kind == lab::Option::Switch ? "0" : o.default_value;
  std::FILE* sink = std::tmpfile();
  lab::Report r(attribution, settings, sink);  // where the model says where it came from
  lab::TrainedModelSettings s;
  s.cache = cache.string(), s.corpus = 300, s.d_model = 16, s.heads = 2, s.layers = 1, s.train_steps = 3, s.warmup = 2;
  lab::TrainedModel a = lab::trained_model(s, nullptr, 1, r);
  CHECK(a.steps == 3);
  CHECK(a.train_seconds > 0);
  REQUIRE(fs::exists(cache / lab::cache_key(s, 1) / "config.json"));
  CHECK(lab::cache_key(s, 1) == "ko-n300-d16-h2-l1-s3-lr0.002-w2-c1-seed1");  // the key the cache has always used
  lab::TrainedModel b = lab::trained_model(s, nullptr, 1, r);  // from the cache
  CHECK(b.train_seconds == 0);
  CHECK(b.losses == a.losses);
  REQUIRE(b.test.size() == a.test.size());
  CHECK(b.test[0].src == a.test[0].src);
  CHECK(b.test[0].tgt == a.test[0].tgt);
  const auto wa = a.model->state_dict(), wb = b.model->state_dict();
  for (const auto& [name, t] : wa) CHECK(max_abs_diff(t, wb.at(name)) == 0.0);
  CHECK(lab::cache_key(s, 1) != lab::cache_key(s, 2));  // each seed its own model
  std::fclose(sink);
}

TEST_CASE("gradflow attention --grad adds the gradient x input panel to the SVG") {
  const test::TempDir dir_tmp("gradflow_test_lab_trained_attention");
  const fs::path dir = dir_tmp.path;
  fs::create_directories(dir);
  // A run folder Translator::load reads: config, vocabularies and weights of an untrained model.
  const train::RunConfig c = gf::test::tiny_run();
  train::Vocab src({"<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c"}), tgt({"<pad>", "<unk>", "<bos>", "<eos>", "x", "y"});
  nn::Seq2SeqTransformer model(c.model_options(src.size(), tgt.size()), 2);
  src.save(dir / "vocab.src.txt");
  tgt.save(dir / "vocab.tgt.txt");
  save_safetensors((dir / "best.safetensors").string(), model.state_dict());
  write_file_atomic((dir / "config.json").string(), c.to_json());

  const std::string model_dir = dir.string(), svg = (dir / "a.svg").string(), svg_grad = (dir / "g.svg").string();
  std::vector<std::string> plain{"--model", model_dir, "--src", "a b c a", "--out", svg};
  std::vector<std::string> with_grad{"--model", model_dir, "--src", "a b c a", "--out", svg_grad, "--grad"};
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return app::cmd_attention(static_cast<int>(argv.size()), argv.data());
  };
  REQUIRE(run(plain) == 0);
  REQUIRE(run(with_grad) == 0);
  const std::string a = train::read_file_bytes(svg, "test"), g = train::read_file_bytes(svg_grad, "test");
  CHECK(a.find("gradient x input") == std::string::npos);
  CHECK(g.find("gradient x input") != std::string::npos);
  CHECK(g.find("average of all layers and heads") != std::string::npos);
  CHECK(g.size() > a.size());
}

namespace {

// Runs `gradflow lab NAME` on tiny models trained for a few steps (no cache), two seeds (paper
// claims need an interval), and returns its JSON.
nlohmann::json run_tiny_lab(const std::string& name, const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{name,        "--out",  out.string(), "--cache", "",         "--seeds", "2",   "--corpus", "400",
                                "--d-model", "16",     "--heads",    "2",       "--layers", "1",       "--train-steps", "4",
                                "--warmup",  "2",      "--sentences", "10"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int rc = app::cmd_lab(static_cast<int>(argv.size()), argv.data());
  CHECK((rc == 0 || rc == 3));  // the claims were computed (a 4-step model need not agree)
  return nlohmann::json::parse(train::read_file_bytes(out / (name + ".json"), "test"));
}

// A run's measurement in a lab's JSON (lab/runner.h writes every run into "runs").
const nlohmann::json& measured(const nlohmann::json& j, uint64_t seed, double level = 0) {
  for (const auto& run : j.at("data").at("runs"))
    if (run.at("seed").get<uint64_t>() == seed && run.at("level").get<double>() == level) return run.at("measured");
  FAIL("no run of seed " << seed << " at level " << level);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("the attribution lab runs end to end on a tiny model: one number per sentence and pair of maps") {
  const test::TempDir out_tmp("gradflow_test_lab_trained_attribution_lab");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("attribution", out, {"--ig-steps", "4", "--permutations", "2"});
  const auto& seed = measured(j, 1);
  for (const char* pair : {"att-gxi", "att-loo", "att-ig", "gxi-loo", "gxi-ig", "loo-ig"}) {
    CAPTURE(pair);
    REQUIRE(seed.at("per_sentence_spearman").at(pair).size() == 10);
    for (const auto& rho : seed.at("per_sentence_spearman").at(pair)) CHECK(std::abs(rho.get<double>()) <= 1.0);
  }
  for (const char* cf : {"per_sentence_permuted_tv", "per_sentence_uniform_tv"})
    for (const auto& tv : seed.at(cf)) CHECK((tv.get<double>() >= 0 && tv.get<double>() <= 1));
  CHECK(j.at("claims").size() == 7);
  CHECK(fs::exists(out / "attribution.svg"));
}

TEST_CASE("the attribution lab's control: uniform cross-attention agrees with nothing and permuting it changes nothing") {
  const test::TempDir out_tmp("gradflow_test_lab_trained_attribution_control");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("attribution", out, {"--ig-steps", "2", "--permutations", "2", "--control"});
  CHECK(j.at("control") == true);
  const auto& seed = measured(j, 1);
  for (const char* pair : {"att-gxi", "att-loo", "att-ig"})
    for (const auto& rho : seed.at("per_sentence_spearman").at(pair)) CHECK(rho.get<double>() == 0.0);
  for (const char* cf : {"per_sentence_permuted_tv", "per_sentence_uniform_tv"})
    for (const auto& tv : seed.at(cf)) CHECK(tv.get<double>() < 1e-6);
}

TEST_CASE("the exposure lab runs end to end on tiny models: every level, every sentence counted once per position and forced step") {
  const test::TempDir out_tmp("gradflow_test_lab_trained_exposure_lab");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("exposure", out, {"--min-support", "2", "--valid-every", "2", "--ss-rates", "0,10,25,50"});
  // Teacher forcing, then scheduled sampling at k = 100 / rate: 10, 4, 2.
  for (double level : {0.0, 10.0, 25.0, 50.0}) {
    CAPTURE(level);
    const auto& seed = measured(j, 1, level);
    CHECK(seed.at("positions").at("total").at(0).get<int64_t>() == 10);
    CHECK(seed.at("forced").at("sentences").get<int64_t>() == 10);
    CHECK(seed.at("forced").at("steps").at(0).get<int64_t>() == 10);  // the forced run always has a token after k
    const int64_t errors = seed.at("forced").at("errors_forced").at(0).get<int64_t>();
    CHECK(errors <= seed.at("forced").at("reference_steps").at(0).get<int64_t>());
    CHECK(seed.at("model").at("valid_steps").size() == 2);  // measured at steps 2 and 4
  }
  CHECK(j.at("data").at("runs").size() == 8);  // 4 levels x 2 seeds
  CHECK(j.at("claims").size() == 4);
  // The dose-response: both statistics at each of the 4 levels for both seeds, one trend per seed.
  REQUIRE(j.at("dose_response").size() == 2);
  for (const auto& d : j.at("dose_response")) {
    CHECK(d.at("levels") == nlohmann::json({0.0, 10.0, 25.0, 50.0}));
    CHECK(d.at("trends").size() == 2);
  }
  CHECK(fs::exists(out / "exposure.svg"));
}

TEST_CASE("the exposure lab feeds a token other than the reference's at step k; its control is a placebo over teacher-forced models") {
  const std::vector<std::string> tiny{"--min-support", "2", "--valid-every", "2", "--ss-rates", "0,10,25,50"};
  const test::TempDir out_tmp("gradflow_test_lab_trained_exposure_forced");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("exposure", out, tiny);
  const auto& e = j.at("data").at("example");
  const size_t k = e.at("forced_step").get<size_t>();
  REQUIRE(e.at("forced").size() > k);
  CHECK(e.at("forced").at(k) != e.at("reference").at(k));
  std::vector<std::string> control = tiny;
  control.push_back("--control");
  const test::TempDir pl_tmp("gradflow_test_lab_trained_exposure_placebo");
  const fs::path pl = pl_tmp.path;
  const nlohmann::json p = run_tiny_lab("exposure", pl, control);
  CHECK(p.at("control") == true);
  // The trends' placebo: one pool of 2 seeds x 4 teacher-forced runs in the levels' places; the two
  // claims on the teacher-forced arm alone have none.
  std::map<std::string, std::pair<int, int>> pools;
  for (const auto& c : p.at("placebo").at("claims")) pools[c.at("id").get<std::string>()] = {c.at("splits").get<int>(), c.at("pool").get<int>()};
  using Pool = std::pair<int, int>;
  CHECK(pools == std::map<std::string, Pool>{{"gap_grows", {0, 0}}, {"derails", {0, 0}}, {"ss_gap_trend", {1, 8}}, {"ss_derailment_trend", {1, 8}}});
}

namespace {

// A toy lab on the runner: two conditions, and a claim whose statistic is how many runs its seed's
// view counts in SeedView::all() (exposure's positions are computed over all of them).
struct Toy {
  uint64_t seed = 0;
};
lab::Lab toy_lab() {
  lab::Experiment<lab::NoContext, lab::NoContext, Toy> e{
      .info = {.name = "toy", .title = "toy", .reference = "none", .question = "none", .default_seeds = 2, .null = {"a", 0},
               .null_description = "arm a"},
      .settings = lab::Fields<lab::NoContext>(std::vector<lab::Field<lab::NoContext>>{}),
      .arms = [](const lab::NoContext&) { return std::vector<lab::ArmSpec>{{"a", {}}, {"b", {}}}; },
      .measure = [](const lab::NoContext&, lab::NoContext&, const lab::RunKey& k) { return Toy{k.seed}; },
      .claims = [](const lab::NoContext&) {
        return std::vector<lab::ClaimDef<Toy>>{{.spec = {.id = "runs_seen", .kind = lab::ClaimKind::Paper, .statement = "runs seen",
                                                         .side = lab::Compare::Above, .threshold = 0, .source = "a test", .control_targets = false},
                                                .per_seed = [](const lab::SeedView<Toy>& v) {
                                                  return v("a").seed + v("b").seed > 0 ? static_cast<double>(v.all().size()) : 0.0;
                                                }}};
      }};
  return lab::make_lab(std::move(e));
}

}  // namespace

TEST_CASE("the runner's placebo measures its whole pool first: every placebo seed's SeedView::all() is every run of the pool") {
  const lab::Lab l = toy_lab();
  const test::TempDir out("gradflow_test_lab_trained_toy");
  for (bool placebo : {false, true}) {
    CAPTURE(placebo);
    std::map<std::string, std::string> all{{"out", out.file(placebo ? "placebo" : "lab")}, {"seeds", "2"}, {"seed", "1"}};
    if (placebo) all["control"] = "1";
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    REQUIRE(sink != nullptr);
    lab::Report report(l, all, sink.get());
    l.run(report);
    REQUIRE(report.claims().size() == 1);
    // The lab: 2 arms x 2 seeds. The placebo: 2 seeds x 2 conditions, each a run of arm a on a seed of its own.
    CHECK(report.claims()[0].values == std::vector<double>{4, 4});
  }
}

TEST_CASE("the exposure lab refuses --ss-rates that are fewer than 4, not increasing, or do not start at teacher forcing") {
  const lab::Lab& l = lab::find_lab("exposure");
  const test::TempDir out("gradflow_test_lab_trained_exposure_rates");
  auto error_with = [&](const std::string& rates) {
    std::map<std::string, std::string> all{{"out", out.file("out")}, {"seeds", "2"}, {"seed", "1"}};
    for (const auto& o : l.options) all[o.name] = o.default_value.empty() ? "0" : o.default_value;
    all["model"] = "";
    all["ss-rates"] = rates;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    REQUIRE(sink != nullptr);
    lab::Report report(l, all, sink.get());
    return error_of([&] { l.run(report); });  // refused before any model is trained
  };
  GF_CHECK_CONTAINS(error_with("0,0.5,1"), "--ss-rates needs 4 or more levels");
  GF_CHECK_CONTAINS(error_with("0,0.5,0.25,1"), "--ss-rates must increase");
  GF_CHECK_CONTAINS(error_with("0.25,0.5,1,2"), "--ss-rates must start at 0");
}

TEST_CASE("the attribution lab analyses trained run folders given by --models, one seed per folder") {
  const test::TempDir tmp("gradflow_test_lab_trained_models");
  std::vector<std::string> runs;
  for (uint64_t seed : {1, 2}) {  // two small runs of gradflow train, as a user's would be
    train::RunConfig c = gf::test::tiny_run(400);
    c.steps = 4, c.seed = seed;
    runs.push_back(tmp.file("run" + std::to_string(seed)));
    train::train_translator(c, gf::test::quiet_options(runs.back()));
  }
  std::vector<std::string> args{"attribution", "--out", tmp.file("out"), "--sentences", "6", "--ig-steps", "2", "--permutations", "2",
                                "--models", runs[0], runs[1]};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int rc = app::cmd_lab(static_cast<int>(argv.size()), argv.data());
  CHECK((rc == 0 || rc == 3 || rc == 4));  // a 4-step model's outcomes are whatever they are; the runs are what is tested
  const nlohmann::json j = nlohmann::json::parse(train::read_file_bytes(fs::path(tmp.file("out")) / "attribution.json", "test"));
  const auto& measured_runs = j.at("data").at("runs");
  REQUIRE(measured_runs.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    CHECK(measured_runs[i].at("model") == runs[i]);  // seed i is folder i
    CHECK(measured_runs[i].at("measured").at("per_sentence_spearman").at("att-gxi").size() == 6);
  }
  // The two folders hold two models: their measurements differ.
  CHECK(measured_runs[0].at("measured").at("per_sentence_spearman") != measured_runs[1].at("measured").at("per_sentence_spearman"));

  // A folder that is not a run is named, and nothing is measured.
  args = {"attribution", "--out", tmp.file("out2"), "--models", runs[0], tmp.file("nothing")};
  argv.clear();
  for (auto& a : args) argv.push_back(a.data());
  GF_CHECK_CONTAINS(error_of([&] { app::cmd_lab(static_cast<int>(argv.size()), argv.data()); }), "nothing' does not exist");
  CHECK(!fs::exists(fs::path(tmp.file("out2")) / "attribution.json"));
}

TEST_CASE("the attribution lab refuses --model: its claims need one model per seed") {
  const lab::Lab& l = lab::find_lab("attribution");
  const test::TempDir out("gradflow_test_lab_trained_attribution_model");
  std::map<std::string, std::string> all{{"out", out.file("out")}, {"seeds", "2"}, {"seed", "1"}};
  for (const auto& o : l.options) all[o.name] = o.default_value.empty() && o.kind == lab::Option::Switch ? "0" : o.default_value;
  all["model"] = out.file("run");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
  REQUIRE(sink != nullptr);
  lab::Report report(l, all, sink.get());
  GF_CHECK_CONTAINS(error_of([&] { l.run(report); }), "lab attribution: --model is not supported");  // before any model is loaded or trained
}

// Labs `norm` and `depth`: their measurements (per-layer linear2 gradients, the distance from rank
// 1, Admin's output change, the attention-only stack) on tiny models, and tiny runs of both labs
// that must write their JSON with every claim.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "lab/claims.h"
#include "lab/common.h"
#include "lab/depth.h"
#include "lab/lab.h"
#include "lab/norm.h"
#include "lab/report.h"
#include "train/run/batch_loss.h"

using namespace gf;
using namespace gf::lab;

namespace {

// The exit code lab/report.h gives for these outcomes: 0 all supported, 3 one contradicted (or a
// check failing), 4 otherwise.
int expected_code(const nlohmann::json& j) {
  bool contradicted = false, unsettled = false;
  for (const auto& c : j.at("claims")) {
    const std::string o = c.at("outcome").get<std::string>();
    contradicted = contradicted || o == "contradicted" || o == "fails";
    unsettled = unsettled || o == "unsettled";
  }
  return contradicted ? 3 : unsettled ? 4 : 0;
}

IdData tiny_data() { return synthetic_task("reverse", 8, 3, 6, 40, 0, 5); }

train::Batch tiny_batch(const IdData& data) { return batches(data.train, 64, 1).front(); }

// Runs lab `name` with its defaults overridden by `settings` into a fresh folder; returns the JSON.
nlohmann::json run_lab(const std::string& name, std::map<std::string, std::string> settings, int* exit_code) {
  const Lab& l = find_lab(name);
  const auto dir = std::filesystem::temp_directory_path() / ("gradflow_test_lab_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::map<std::string, std::string> all{{"out", dir.string()}, {"seeds", "2"}, {"seed", "1"}};
  for (const auto& o : l.options) all[o.name] = o.default_value.empty() && o.kind == Option::Switch ? "0" : o.default_value;  // a switch: off
  for (const auto& [k, v] : settings) all[k] = v;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);  // the printed report, discarded
  REQUIRE(sink != nullptr);
  Report report(l, all, sink.get());
  l.run(report);
  *exit_code = report.finish();
  if (!all.count("control")) REQUIRE(std::filesystem::exists(dir / (name + ".svg")));  // a placebo draws no figure
  std::ifstream in(dir / (name + ".json"));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("linear2_grad_norms: finite per-layer norms, the residual stream, and the same loss and gradients as the model's own forward") {
  const IdData data = tiny_data();
  const train::Batch batch = tiny_batch(data);
  for (bool pre_ln : {false, true}) {
    CAPTURE(pre_ln);
    nn::Seq2SeqTransformer model(small_model(data, 16, 2, 3, 32, pre_ln), 7);
    const LayerGradNorms g = linear2_grad_norms(model, batch);
    REQUIRE(g.encoder.size() == 3);
    REQUIRE(g.decoder.size() == 3);
    for (double v : g.encoder) CHECK((std::isfinite(v) && v > 0));
    for (double v : g.decoder) CHECK((std::isfinite(v) && v > 0));
    REQUIRE(g.encoder_x.size() == 3);
    REQUIRE(g.decoder_dx.size() == 3);
    for (double v : g.decoder_dx) CHECK((std::isfinite(v) && v > 0));
    if (pre_ln) {
      CHECK(g.encoder_x[2] > g.encoder_x[0]);  // every layer adds to the stream
    } else {
      // Post-LN's stream is a LayerNorm's output (weight 1, bias 0 at init): |x| = sqrt(B S D) in every layer.
      const double expected = std::sqrt(static_cast<double>(batch.rows * batch.src_len * 16));
      for (double v : g.encoder_x) CHECK(v == doctest::Approx(expected).epsilon(1e-3));
    }
    // At initialisation the loss is near ln(vocabulary) (12 symbols).
    CHECK(g.loss > 0.5 * std::log(12.0));
    CHECK(g.loss < 2.0 * std::log(12.0));
    // The gradients are cleared afterwards ...
    CHECK_FALSE(model.transformer->decoder->layers->operator[](2).linear2->weight.grad().defined());
    // ... and the numbers are those of the decoder's and encoder's linear2.weight after one backward.
    Variable loss = train::batch_loss(model, train::to_tensors(batch), 0.0);  // ()
    loss.backward();
    CHECK(g.loss == doctest::Approx(loss.item()).epsilon(1e-6));
    CHECK(g.decoder[2] == doctest::Approx(l2_norm(model.transformer->decoder->layers->operator[](2).linear2->weight.grad())).epsilon(1e-6));
    CHECK(g.encoder[0] == doctest::Approx(l2_norm(model.transformer->encoder->layers->operator[](0).linear2->weight.grad())).epsilon(1e-6));
    model.zero_grad();
  }
}

TEST_CASE("rank1_residual: 0 for identical tokens, the hand-computed value otherwise, and its errors") {
  Tensor same = Tensor::of({1, 2, 3, 1, 2, 3, 1, 2, 3}, {1, 3, 3});  // (1, 3, 3): one row three times
  CHECK(rank1_residual(same) == doctest::Approx(0.0));
  // Rows (1, 0) and (0, 1): mean row (0.5, 0.5), |X - 1 x^T|^2 = 1, |X|^2 = 2.
  Tensor eye = Tensor::of({1, 0, 0, 1}, {1, 2, 2});  // (1, 2, 2)
  CHECK(rank1_residual(eye) == doctest::Approx(std::sqrt(0.5)));
  // The mean over the batch: one collapsed sequence and one at sqrt(0.5).
  Tensor both = Tensor::of({1, 1, 1, 1, 1, 0, 0, 1}, {2, 2, 2});  // (2, 2, 2)
  CHECK(rank1_residual(both) == doctest::Approx(0.5 * std::sqrt(0.5)));
  CHECK_THROWS_AS(rank1_residual(Tensor::zeros({2, 2})), std::invalid_argument);
}

TEST_CASE("relative_output_change: 0 at eps 0, about linear in eps, and the weights restored bit for bit") {
  const IdData data = tiny_data();
  const train::Batch batch = tiny_batch(data);
  nn::Seq2SeqTransformer model(small_model(data, 16, 2, 2, 32, false), 3);
  model.eval();
  const auto before = model.state_dict();
  std::map<std::string, Tensor> copy;
  for (const auto& [k, v] : before) copy[k] = v.clone();
  CHECK(relative_output_change(model, batch, 0.0, 11) == 0.0);
  const double small = relative_output_change(model, batch, 1e-3, 11), twice = relative_output_change(model, batch, 2e-3, 11);
  CHECK(small > 0);
  CHECK(twice / small == doctest::Approx(2.0).epsilon(0.05));
  for (const auto& [k, v] : model.state_dict()) {
    CAPTURE(k);
    bool same = true;
    for (int64_t i = 0; i < v.numel(); ++i) same = same && v.flat_get(i) == copy.at(k).flat_get(i);
    CHECK(same);
  }
}

TEST_CASE("attention_stack: sizes, finite ratios, collapse without skips and not with them") {
  const AttentionStack no = attention_stack(4, false, 16, 2, 8, 2, 1);
  const AttentionStack yes = attention_stack(4, true, 16, 2, 8, 2, 1);
  for (const auto* s : {&no, &yes}) {
    REQUIRE(s->res.size() == 5);
    REQUIRE(s->q_over_v.size() == 4);
    REQUIRE(s->k_over_v.size() == 4);
    for (double v : s->q_over_v) CHECK(std::isfinite(v));
    for (double v : s->k_over_v) CHECK(std::isfinite(v));
  }
  CHECK(no.res.front() == doctest::Approx(yes.res.front()));  // the same input X_0
  CHECK(no.res.back() < 1e-3 * no.res.front());
  CHECK(yes.res.back() > 0.3 * yes.res.front());
  CHECK(no.q_over_v.back() < no.q_over_v.front());
}

TEST_CASE("lab norm, tiny settings: writes its JSON with its seven claims (lab/claims.cpp) and their evidence") {
  int rc = -1;
  const nlohmann::json j = run_lab("norm", {{"pairs", "60"}, {"d-model", "16"}, {"heads", "2"}, {"ff", "32"}, {"layers", "2"}, {"batches", "1"},
                                            {"depths", "1,2"}, {"steps", "3"}, {"warmups", "0,1,2,3"}, {"max-tokens", "256"}},
                                   &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("norm").size());
  REQUIRE(j.at("claims").size() == 7);
  bool all = true;
  for (const auto& c : j.at("claims")) {
    CHECK_FALSE(c.at("statement").get<std::string>().empty());
    CHECK_FALSE(c.at("evidence").get<std::string>().empty());
    all = all && c.at("holds").get<bool>();
  }
  CHECK(j.at("check").at("agrees").get<bool>() == all);
  CHECK(rc == expected_code(j));
  // Every run's measurement: 3 stacks at init, 2 x 2 depths, 4 + 2 + 1 training runs, for each seed.
  REQUIRE(j.at("data").at("runs").size() == static_cast<size_t>(3 + 4 + 7) * 2);  // 2 seeds
  for (const auto& run : j.at("data").at("runs"))
    if (run.at("arm") == "init:Post-LN") CHECK(run.at("measured").at("decoder").size() == 2);
  CHECK(j.at("tables").contains("warmup"));
  // The dose-response on the warm-up length (lab/report.h): Post-LN's NLL per level, a plain slope.
  REQUIRE(j.at("dose_response").size() == 1);
  const auto& d = j.at("dose_response")[0];
  CHECK(d.at("levels") == nlohmann::json({0.0, 1.0, 2.0, 3.0}));
  CHECK(d.at("trend") == "slope");
  for (const auto& c : j.at("claims"))
    if (c.at("id") == "postln_warmup_trend") CHECK(c.at("values") == d.at("trends"));
}

TEST_CASE("lab norm: --warmups needs 4 or more whole lengths from 0, at most --steps") {
  int rc = -1;
  std::map<std::string, std::string> tiny{{"pairs", "60"}, {"d-model", "16"}, {"heads", "2"}, {"ff", "32"}, {"layers", "2"}, {"batches", "1"},
                                          {"depths", "1,2"}, {"steps", "3"}, {"max-tokens", "256"}};
  for (const auto& [levels, says] : std::vector<std::pair<std::string, std::string>>{{"0,1,2", "4 or more warm-up lengths"},
                                                                                      {"1,2,3,4", "must start at 0"},
                                                                                      {"0,1,2,9", "at most at --steps 3"},
                                                                                      {"0,1,1.5,3", "whole numbers of steps"},
                                                                                      {"0,2,1,3", "increasing whole numbers"}}) {
    CAPTURE(levels);
    tiny["warmups"] = levels;
    CHECK_THROWS_WITH_AS(run_lab("norm", tiny, &rc), doctest::Contains(says.c_str()), std::invalid_argument);
  }
}

TEST_CASE("lab entropy, tiny settings: the learning-rate dose-response of the least head's entropy and its levels flag") {
  int rc = -1;
  std::map<std::string, std::string> tiny{{"pairs", "40"}, {"symbols", "6"}, {"min-len", "3"}, {"max-len", "5"}, {"d-model", "16"},
                                          {"heads", "2"}, {"layers", "1"}, {"ff", "32"}, {"steps", "4"}, {"every", "2"}, {"max-tokens", "128"}};
  const nlohmann::json j = run_lab("entropy", tiny, &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("entropy").size());
  CHECK(rc == expected_code(j));
  REQUIRE(j.at("dose_response").size() == 1);
  const auto& d = j.at("dose_response")[0];
  CHECK(d.at("levels") == nlohmann::json({0.001, 0.002, 0.005, 0.01}));
  CHECK(d.at("trend") == "slope per doubling");
  for (const auto& c : j.at("claims"))
    if (c.at("id") == "entropy_collapse_trend") CHECK(c.at("values") == d.at("trends"));
  tiny["lrs"] = "0.001,0.01,0.1";
  CHECK_THROWS_WITH_AS(run_lab("entropy", tiny, &rc), doctest::Contains("4 or more learning rates"), std::invalid_argument);
  tiny["lrs"] = "0,0.001,0.01,0.1";
  CHECK_THROWS_WITH_AS(run_lab("entropy", tiny, &rc), doctest::Contains("must be above 0"), std::invalid_argument);
}

TEST_CASE("lab padding, tiny settings: the padded-length dose-response and its levels flag") {
  int rc = -1;
  std::map<std::string, std::string> tiny{{"pairs", "200"}, {"d-model", "16"}, {"batches", "2"}, {"steps", "2"}};
  const nlohmann::json j = run_lab("padding", tiny, &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("padding").size());
  CHECK(rc == expected_code(j));
  REQUIRE(j.at("dose_response").size() == 1);
  const auto& d = j.at("dose_response")[0];
  CHECK(d.at("levels") == nlohmann::json({8.0, 16.0, 32.0, 64.0}));
  CHECK(d.at("trend") == "slope per doubling");
  for (const auto& c : j.at("claims"))
    if (c.at("id") == "pad_change_trend") CHECK(c.at("values") == d.at("trends"));
  // Every run: 4 mask settings, 4 stages x batchings, 4 padded lengths, for each seed. The exact
  // checks hold on any model; without the masks the sentence's output moves.
  REQUIRE(j.at("data").at("runs").size() == 12 * 2);
  for (const auto& c : j.at("claims"))
    if (c.at("kind") == "check") CHECK(c.at("outcome") == "passes");
  auto no_masks = [](const nlohmann::json& runs) {
    double least = INFINITY;  // the smallest encoder-output difference over seeds, no padding masks
    for (const auto& run : runs)
      if (run.at("arm") == "no padding masks") least = std::min(least, run.at("measured").at("encoder_out").get<double>());
    return least;
  };
  CHECK(no_masks(j.at("data").at("runs")) > 1e-6);
  // --ablate: both padding masks in every arm, so that arm computes what the masked one does.
  auto ablate = tiny;
  ablate["ablate"] = "1";
  CHECK(no_masks(run_lab("padding", ablate, &rc).at("data").at("runs")) < 1e-12);
  // --control: the trend's placebo, initialised models of seeds of their own padded to the middle
  // length in every length's place (2 seeds x 4 lengths); the other paper claims have none.
  auto control = tiny;
  control["control"] = "1";
  const nlohmann::json p = run_lab("padding", control, &rc);
  REQUIRE(p.at("claims").size() == 1);
  CHECK(p.at("claims")[0].at("id") == "pad_change_trend");
  const auto& pl = p.at("placebo").at("claims");
  REQUIRE(pl.size() == 5);
  for (const auto& x : pl) CHECK(x.at("pool") == (x.at("id") == "pad_change_trend" ? 8 : 0));
  tiny["lengths"] = "8,16,32";
  CHECK_THROWS_WITH_AS(run_lab("padding", tiny, &rc), doctest::Contains("4 or more padded lengths"), std::invalid_argument);
  tiny["lengths"] = "2,16,32,64";
  CHECK_THROWS_WITH_AS(run_lab("padding", tiny, &rc), doctest::Contains("must lie above"), std::invalid_argument);
}

// Lab leak at tiny settings: both arms for each seed, its five claims, the exact checks that hold on
// any model (the causal mask zeroes every later input's path; softmax reaches every one without
// it), and its placebo: the masked model in both arms of each contrast.
TEST_CASE("lab leak, tiny settings: both arms per seed, its five claims, and its placebo") {
  int rc = -1;
  const std::map<std::string, std::string> tiny{{"symbols", "6"}, {"min-len", "3"}, {"max-len", "5"}, {"train", "40"}, {"eval", "10"},
                                                {"d-model", "16"}, {"layers", "1"}, {"steps", "4"}, {"eval-every", "2"}, {"max-tokens", "128"},
                                                {"jacobian-sentences", "2"}};
  const nlohmann::json j = run_lab("leak", tiny, &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("leak").size());
  REQUIRE(j.at("claims").size() == 5);
  CHECK(rc == expected_code(j));
  for (const auto& c : j.at("claims")) {
    CAPTURE(c.dump());
    CHECK_FALSE(c.at("evidence").get<std::string>().empty());
    if (c.at("kind") == "check") CHECK(c.at("outcome") == "passes");
    else CHECK(c.at("values").size() == 2);
  }
  REQUIRE(j.at("data").at("runs").size() == 4);  // 2 arms x 2 seeds
  for (const auto& run : j.at("data").at("runs")) {
    CHECK((run.at("arm") == "causal" || run.at("arm") == "none"));
    CHECK(run.at("measured").at("losses").size() == 4);
    CHECK(run.at("measured").at("probe_steps") == nlohmann::json({1.0, 2.0, 4.0}));
    const auto& J = run.at("measured").at("jacobian");
    REQUIRE(J.size() >= 4);  // <bos> and 3 to 5 symbols: a grid of the longest held-out target
    if (run.at("arm") == "causal") CHECK(J[0][1].get<double>() == 0.0);
    else CHECK(J[0][1].get<double>() > 0.0);
  }
  CHECK(j.at("tables").contains("jacobian"));

  auto control = tiny;
  control["control"] = "1";
  const nlohmann::json p = run_lab("leak", control, &rc);
  CHECK(p.at("control") == true);
  // The two contrasts, each over one pool of masked models; reads_answer reads one arm: no placebo.
  REQUIRE(p.at("claims").size() == 2);
  for (const auto& c : p.at("claims")) CHECK(c.at("values").size() == 2);
  const auto& pl = p.at("placebo").at("claims");
  REQUIRE(pl.size() == 3);
  CHECK(pl[0].at("id") == "reads_answer");
  CHECK(pl[0].at("splits") == 0);
  for (size_t k = 1; k < 3; ++k) CHECK(pl[k].at("pool") == 4);  // 2 seeds x the 2 conditions a contrast reads
}

// Lab nan at tiny settings: the three runs of the batch with the empty source on the seed's one
// model (naive, anomaly mode, guarded) and the training runs at three rates, its six exact checks
// (properties of the code and the protocol, which hold at any size), and its flags' errors.
TEST_CASE("lab nan, tiny settings: its runs, its six exact checks, and its flags") {
  int rc = -1;
  std::map<std::string, std::string> tiny{{"pairs", "200"}, {"d-model", "16"}, {"layers", "1"}, {"batch", "4"}, {"steps", "3"}};
  const nlohmann::json j = run_lab("nan", tiny, &rc);
  REQUIRE(j.at("claims").size() == 6);
  for (const auto& c : j.at("claims")) {
    CAPTURE(c.dump());
    CHECK(c.at("outcome") == "passes");
  }
  CHECK(rc == 0);
  REQUIRE(j.at("data").at("runs").size() == (3 + 3 * 3) * 2);  // 3 batch runs and 3 arms x 3 rates, 2 seeds
  for (const auto& run : j.at("data").at("runs")) {
    const auto& m = run.at("measured");
    if (run.at("arm") == "anomaly") CHECK(m.at("row") == 3);  // the empty source: the batch's last row
    if (run.at("arm") == "naive") CHECK(m.at("loss").is_null());
    if (run.at("arm") == "train:naive") CHECK(m.at("losses")[1].is_null());  // NaN from step 2, the empty source's
    if (run.at("arm") == "train:guarded") CHECK(m.at("nan_params_after") == 0);
  }
  tiny["steps"] = "1";
  CHECK_THROWS_WITH_AS(run_lab("nan", tiny, &rc), doctest::Contains("--steps must be at least 2"), std::invalid_argument);
}

TEST_CASE("lab depth, tiny settings: writes its JSON with its five claims (lab/claims.cpp) and their evidence") {
  int rc = -1;
  const nlohmann::json j = run_lab("depth", {{"pairs", "60"}, {"d-model", "16"}, {"heads", "2"}, {"ff", "32"}, {"max-tokens", "128"},
                                             {"depths", "1,2,3,4"}, {"draws", "1"}, {"attn-layers", "3"}, {"attn-d-model", "16"},
                                             {"tokens", "6"}, {"attn-batch", "2"}},
                                   &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("depth").size());
  REQUIRE(j.at("claims").size() == 5);
  bool all = true;
  for (const auto& c : j.at("claims")) {
    CHECK_FALSE(c.at("evidence").get<std::string>().empty());
    all = all && c.at("holds").get<bool>();
  }
  CHECK(j.at("check").at("agrees").get<bool>() == all);
  CHECK(rc == expected_code(j));
  CHECK(j.at("data").at("amplification").at("Post-LN").at("relative_change_mean").size() == 4);
  // The dose-response on depth (lab/report.h): Post-LN and Pre-LN, each slope per seed the one its claim reads.
  REQUIRE(j.at("dose_response").size() == 2);
  for (const auto& d : j.at("dose_response")) {
    CHECK(d.at("levels") == nlohmann::json({1.0, 2.0, 3.0, 4.0}));
    CHECK(d.at("trend") == "slope per doubling");
    CHECK(d.at("trends").size() == 2);  // run_lab's 2 seeds
    CHECK(d.at("lo").size() == 4);
  }
  CHECK(j.at("data").at("attention_only").at("no_skip").at("res_mean").size() == 4);
}

// The dose-response labs at tiny settings (lab/report.h): each writes its trend claims, the
// per-level band in the JSON, and refuses fewer than 4 levels.
TEST_CASE("lab scale, tiny settings: the d_k dose-response, its two trend claims, and its levels flag") {
  int rc = -1;
  const std::map<std::string, std::string> tiny{{"batch", "2"}, {"queries", "4"}, {"keys", "4"}, {"pairs", "200"}, {"sentences", "4"},
                                                {"dks", "8,16,32,64"}, {"train", "40"}, {"eval", "10"}, {"train-d-model", "16"},
                                                {"train-layers", "1"}, {"steps", "2"}, {"max-tokens", "128"}};
  const nlohmann::json j = run_lab("scale", tiny, &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("scale").size());
  CHECK(rc == expected_code(j));
  REQUIRE(j.at("dose_response").size() == 2);
  for (const auto& d : j.at("dose_response")) {
    CHECK(d.at("levels") == nlohmann::json({8.0, 16.0, 32.0, 64.0}));
    CHECK(d.at("trend") == "slope per doubling");
    CHECK(d.at("per_seed").size() == 2);
  }
  for (const auto& c : j.at("claims"))
    if (c.at("id") == "unscaled_gradient_trend") CHECK(c.at("values") == j.at("dose_response")[0].at("trends"));
  auto few = tiny;
  few["dks"] = "16,32,64";
  CHECK_THROWS_WITH_AS(run_lab("scale", few, &rc), doctest::Contains("4 or more d_k levels"), std::invalid_argument);
  // --control: two placebos of two null conditions. The training claim reads models trained with
  // 1/sqrt(d_k) in both arms (2 seeds x 2); the unscaled trend, initialised layers at the middle
  // d_k in every level's place (2 seeds x 4 levels); the scaled trend claims no fall: no placebo.
  auto control = tiny;
  control["control"] = "1";
  const nlohmann::json p = run_lab("scale", control, &rc);
  REQUIRE(p.at("claims").size() == 2);
  const auto& pl = p.at("placebo").at("claims");
  REQUIRE(pl.size() == 3);
  CHECK(pl[0].at("id") == "unscaled_gradient_trend");
  CHECK(pl[0].at("pool") == 8);
  CHECK(pl[0].at("how").get<std::string>().find("real:unscaled @ 32") != std::string::npos);
  CHECK(pl[1].at("splits") == 0);
  CHECK(pl[2].at("id") == "unscaled_trains_worse");
  CHECK(pl[2].at("pool") == 4);
}

TEST_CASE("lab smoothing, tiny settings: the eps dose-response of the logit gap and its levels flag") {
  int rc = -1;
  const std::map<std::string, std::string> tiny{{"symbols", "6"}, {"train", "30"}, {"eval", "10"}, {"d-model", "16"}, {"heads", "2"},
                                                {"layers", "1"}, {"steps", "4"}, {"eval-every", "2"}, {"max-tokens", "128"},
                                                {"feature-seqs", "30"}};
  const nlohmann::json j = run_lab("smoothing", tiny, &rc);
  REQUIRE(j.at("claims").size() == claim_specs_of("smoothing").size());
  CHECK(rc == expected_code(j));
  REQUIRE(j.at("dose_response").size() == 1);
  const auto& d = j.at("dose_response")[0];
  CHECK(d.at("levels") == nlohmann::json({0.0, 0.05, 0.1, 0.2}));
  CHECK(d.at("trend") == "slope");
  CHECK(d.at("mean").size() == 4);
  for (const auto& c : j.at("claims"))
    if (c.at("id") == "logit_gap_trend") CHECK(c.at("values") == d.at("trends"));
  auto bad = tiny;
  bad["eps-levels"] = "0,0.1,0.2";
  CHECK_THROWS_WITH_AS(run_lab("smoothing", bad, &rc), doctest::Contains("4 or more levels"), std::invalid_argument);
  bad["eps-levels"] = "0,0.05,0.2,0.3";
  CHECK_THROWS_WITH_AS(run_lab("smoothing", bad, &rc), doctest::Contains("must be one of --eps-levels"), std::invalid_argument);
  bad["eps-levels"] = "0.01,0.05,0.1,0.2";
  CHECK_THROWS_WITH_AS(run_lab("smoothing", bad, &rc), doctest::Contains("must start at 0"), std::invalid_argument);
}

TEST_CASE("labs norm and depth: a depth list that does not increase is an error naming the flag") {
  int rc = 0;
  CHECK_THROWS_WITH_AS(run_lab("depth", {{"depths", "4,2"}}, &rc), doctest::Contains("--depths must increase"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run_lab("depth", {{"depths", "1,2,4"}}, &rc), doctest::Contains("4 or more depths"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(run_lab("norm", {{"depths", "2,x"}}, &rc), doctest::Contains("--depths"), std::invalid_argument);
}

TEST_CASE("common helpers: spread_per_column, means, band_series, parse_increasing_ints") {
  const std::vector<Spread> s = spread_per_column({{1, 10}, {3, 30}});
  REQUIRE(s.size() == 2);
  CHECK(s[0].mean == 2);
  CHECK(s[1].min == 10);
  CHECK(s[1].max == 30);
  CHECK(means(s) == std::vector<double>{2, 20});
  CHECK_THROWS_AS(spread_per_column({{1, 2}, {3}}), std::invalid_argument);
  const ChartSeries b = band_series("b", {1, 2}, s, "#000000");
  CHECK(b.y == std::vector<double>{2, 20});
  CHECK(b.lo == std::vector<double>{1, 10});
  CHECK(b.hi == std::vector<double>{3, 30});
  CHECK(parse_increasing_ints("1,2,16", "x") == std::vector<int64_t>{1, 2, 16});
  CHECK_THROWS_WITH_AS(parse_increasing_ints("2", "lab x: --d"), doctest::Contains("lab x: --d needs at least two"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_increasing_ints("2,0", "lab x: --d"), doctest::Contains("positive integers"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(parse_increasing_ints("2,2", "lab x: --d"), doctest::Contains("must increase"), std::invalid_argument);
}

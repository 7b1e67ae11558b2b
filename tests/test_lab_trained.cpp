// The pieces behind the labs on a trained translator (lab/attribution.cpp, lab/exposure.cpp) and
// `gradflow attention --grad`: gradient-times-input against a finite-difference estimate, the
// teacher-forced forward from given embeddings against the model's own, blank-out against a
// direct computation, attention rollout's rows, the model cache, and the SVG panel.
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
#include "lab/attribution_maps.h"
#include "lab/labs.h"
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

namespace {

// A float64 tiny translator in eval mode (vocabularies of 7 and 9: ids 4.. are words).
std::unique_ptr<nn::Seq2SeqTransformer> tiny_model(uint64_t seed = 5) {
  auto m = std::make_unique<nn::Seq2SeqTransformer>(tiny_options(2), seed);
  m->to(DType::Float64);
  m->eval();
  return m;
}

const std::vector<int64_t> kSrc = {4, 6, 5, 4, 6};  // (S = 5)
const std::vector<int64_t> kOut = {7, 5, 8, 3};      // (T = 4), ends with <eos>

}  // namespace

TEST_CASE("gradient x input matches a central difference of log p when one source embedding is scaled") {
  auto model = tiny_model();
  const lab::AttributionMaps m = lab::attribution_maps(*model, kSrc, kOut);
  const Tensor x = lab::source_embeddings(*model, kSrc);  // (S, D)
  const double h = 1e-5;
  double worst = 0, largest = 0;
  for (size_t s = 0; s < kSrc.size(); ++s) {
    Tensor up = x.clone(), down = x.clone();  // (S, D)
    for (int64_t d = 0; d < x.size(1); ++d) {
      up.flat_set(static_cast<int64_t>(s) * x.size(1) + d, x.flat_get(static_cast<int64_t>(s) * x.size(1) + d) * (1 + h));
      down.flat_set(static_cast<int64_t>(s) * x.size(1) + d, x.flat_get(static_cast<int64_t>(s) * x.size(1) + d) * (1 - h));
    }
    const auto lp_up = lab::output_log_probs(*model, up, kOut), lp_down = lab::output_log_probs(*model, down, kOut);
    for (size_t t = 0; t < kOut.size(); ++t) {
      // d/deps log p(y_t | x_s (1 + eps)) at eps = 0 is g_ts . x_s
      const double fd = (lp_up[t] - lp_down[t]) / (2 * h);
      worst = std::max(worst, std::abs(fd - m.grad_dot[t][s]));
      largest = std::max(largest, std::abs(fd));
    }
  }
  INFO("worst difference " << worst << ", largest |g.x| " << largest);
  CHECK(largest > 1e-3);  // the check compares something
  CHECK(worst < 1e-7 * std::max(1.0, largest));
}

TEST_CASE("the forward from given embeddings is the model's own: log p and cross-attention agree") {
  auto model = tiny_model();
  const lab::AttributionMaps m = lab::attribution_maps(*model, kSrc, kOut);
  const int64_t S = static_cast<int64_t>(kSrc.size()), T = static_cast<int64_t>(kOut.size());
  std::vector<int64_t> in{train::Vocab::kBos};
  in.insert(in.end(), kOut.begin(), kOut.end() - 1);
  nn::DecoderOutput d = model->forward_with_attention(Tensor::from_vector(kSrc, {1, S}), Tensor::from_vector(in, {1, T}));
  const Tensor logits = d.output.data().contiguous();  // (1, T, V)
  const int64_t V = logits.size(2);
  for (int64_t t = 0; t < T; ++t) {
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits.flat_get(t * V + v));
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits.flat_get(t * V + v) - mx);
    CHECK(m.log_probs[t] == doctest::Approx(logits.flat_get(t * V + kOut[t]) - mx - std::log(z)).epsilon(1e-12));
    CHECK(lab::output_log_probs(*model, lab::source_embeddings(*model, kSrc), kOut)[t] == doctest::Approx(m.log_probs[t]).epsilon(1e-12));
  }
  REQUIRE(m.cross.size() == d.cross_weights.size());
  const int64_t H = d.cross_weights[0].size(1);
  for (size_t l = 0; l < m.cross.size(); ++l)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t s = 0; s < S; ++s) CHECK(m.cross[l][h][t][s] == doctest::Approx(d.cross_weights[l].data().at({0, h, t, s})).epsilon(1e-12));
  // The recorders saw each self-attention: encoder (S, S) and decoder (T, T), rows summing to 1.
  REQUIRE(m.enc_self.size() == 2);
  REQUIRE(m.dec_self.size() == 2);
  CHECK(m.enc_self[1][0].size() == static_cast<size_t>(S));
  CHECK(m.dec_self[0][1].size() == static_cast<size_t>(T));
  double row = 0;
  for (double v : m.dec_self[0][1][2]) row += v;
  CHECK(row == doctest::Approx(1.0));
  CHECK(m.dec_self[0][1][0][1] == 0.0);  // causal: position 0 does not see position 1
  // The observers are removed afterwards.
  CHECK_FALSE(static_cast<bool>((*model->transformer->encoder->layers)[0].self_attn->weights_observer));
}

TEST_CASE("blank-out is the drop of log p when one source embedding is zeroed") {
  auto model = tiny_model();
  const lab::Map b = lab::blank_out(*model, kSrc, kOut);
  const Tensor x = lab::source_embeddings(*model, kSrc);
  const auto full = lab::output_log_probs(*model, x, kOut);
  Tensor z = x.clone();
  z.select(0, 2).fill_(0.0);
  const auto blanked = lab::output_log_probs(*model, z, kOut);
  double moved = 0;
  for (size_t t = 0; t < kOut.size(); ++t) {
    CHECK(b[t][2] == doctest::Approx(full[t] - blanked[t]).epsilon(1e-12));
    moved += std::abs(b[t][2]);
  }
  CHECK(moved > 1e-6);
}

TEST_CASE("leave-one-out blanks a token out with every other position kept") {
  auto model = tiny_model();
  const lab::Map loo = lab::leave_one_out(*model, kSrc, kOut);  // (T, S)
  const Tensor x = lab::source_embeddings(*model, kSrc);       // (S, D)
  const int64_t S = x.size(0), D = x.size(1);
  const lab::Map full = lab::output_distributions(*model, x.reshape({1, S, D}), kOut).at(0);  // (T, V)
  // Without its last token: the sentence one shorter (no token moves). Blanking the last token out
  // must give exactly that.
  const lab::Map shorter = lab::output_distributions(*model, x.narrow(0, 0, S - 1).contiguous().reshape({1, S - 1, D}), kOut).at(0);
  // Without its first token, every later token moved up one position: not what blanking it out does.
  const lab::Map shifted = lab::output_distributions(*model, x.narrow(0, 1, S - 1).contiguous().reshape({1, S - 1, D}), kOut).at(0);
  double moved = 0, differs = 0;
  for (size_t t = 0; t < kOut.size(); ++t) {
    CHECK(loo[t][S - 1] == doctest::Approx(lab::total_variation(full[t], shorter[t])).epsilon(1e-9));
    differs += std::abs(loo[t][0] - lab::total_variation(full[t], shifted[t]));
    for (double v : loo[t]) {
      moved += v;
      CHECK((v >= 0 && v <= 1));
    }
  }
  CHECK(moved > 1e-6);   // a token's absence moves the output
  CHECK(differs > 1e-6);  // and deleting (shifting) is another measure
}

TEST_CASE("kendall_tau: tau-b by hand, with and without ties") {
  // (1,2,3) against (1,3,2): pairs (0,1) and (0,2) concordant, (1,2) discordant: (2 - 1) / 3.
  CHECK(lab::kendall_tau({1, 2, 3}, {1, 3, 2}) == doctest::Approx(1.0 / 3.0).epsilon(1e-15));
  // a ties its first two: 2 concordant of 3 pairs, 2 untied in a, 3 in b: 2 / sqrt(2 x 3).
  CHECK(lab::kendall_tau({1, 1, 2}, {1, 2, 3}) == doctest::Approx(2.0 / std::sqrt(6.0)).epsilon(1e-15));
  CHECK(lab::kendall_tau({3, 2, 1}, {1, 2, 3}) == doctest::Approx(-1.0));
  CHECK(std::isnan(lab::kendall_tau({1, 1, 1}, {1, 2, 3})));  // a constant side ranks nothing
}

TEST_CASE("attention rollout: a hand-worked case, and rows that sum to 1 on a model's maps") {
  // One encoder layer that swaps two tokens, one decoder position that attends to source 0 only.
  const lab::Map swap = {{0, 1}, {1, 0}};
  const lab::Rollout r = lab::attention_rollout({swap}, {{{1}}}, {{{1, 0}}});
  // Encoder: 0.5 swap + 0.5 I = all 0.5; the decoder takes half from the source: [0.25, 0.25].
  CHECK(r.encoder[0][0] == doctest::Approx(0.5));
  CHECK(r.source_share[0] == doctest::Approx(0.5));
  CHECK(r.source[0][0] == doctest::Approx(0.5));
  CHECK(r.source[0][1] == doctest::Approx(0.5));
  // Two encoder layers of identity attention keep the source token itself: rollout = cross-attention.
  const lab::Map id = {{1, 0}, {0, 1}};
  const lab::Rollout r2 = lab::attention_rollout({id, id}, {{{1}}, {{1}}}, {{{0.2, 0.8}}, {{0.2, 0.8}}});
  CHECK(r2.source[0][1] == doctest::Approx(0.8));
  CHECK(r2.source_share[0] == doctest::Approx(0.75));  // 0.5 + 0.25 from the two cross-attention steps

  auto model = tiny_model();
  const lab::AttributionMaps m = lab::attribution_maps(*model, kSrc, kOut);
  std::vector<lab::Map> enc, dec, cross;
  for (const auto& l : m.enc_self) enc.push_back(lab::head_mean(l));
  for (const auto& l : m.dec_self) dec.push_back(lab::head_mean(l));
  for (const auto& l : m.cross) cross.push_back(lab::head_mean(l));
  const lab::Rollout rm = lab::attention_rollout(enc, dec, cross);
  REQUIRE(rm.source.size() == kOut.size());
  for (size_t t = 0; t < rm.source.size(); ++t) {
    double sum = 0, lowest = 1;
    for (double v : rm.source[t]) sum += v, lowest = std::min(lowest, v);
    CHECK(lowest >= 0);
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(rm.source_share[t] > 0);
    CHECK(rm.source_share[t] < 1);
  }
  CHECK(error_of([&] { lab::attention_rollout(enc, dec, {cross[0]}); }).find("decoder") != std::string::npos);
}

TEST_CASE("attribution_maps rejects an output without <eos>") {
  auto model = tiny_model();
  GF_CHECK_CONTAINS(error_of([&] { lab::attribution_maps(*model, kSrc, {7, 5}); }), "<eos>");
}

TEST_CASE("a model trained for a lab is cached and loaded back with the same weights and test pairs") {
  const test::TempDir cache_tmp("gradflow_test_lab_trained_cache");
  const fs::path cache = cache_tmp.path;
  const lab::Lab& attribution = lab::find_lab("attribution");
  std::map<std::string, std::string> settings{{"out", (cache / "out").string()}, {"seeds", "1"}, {"seed", "1"}};
  for (const auto& o : attribution.options) settings[o.name] = o.default_value.empty() && o.kind == lab::Option::Switch ? "0" : o.default_value;
  settings["cache"] = cache.string();
  settings["corpus"] = "300";
  settings["d-model"] = "16";
  settings["heads"] = "2";
  settings["layers"] = "1";
  settings["train-steps"] = "3";
  settings["warmup"] = "2";
  std::FILE* sink = std::tmpfile();
  lab::Report r(attribution, settings, sink);
  lab::TrainedModel a = lab::trained_model(r, 0);
  CHECK(a.steps == 3);
  CHECK(a.train_seconds > 0);
  REQUIRE(fs::exists(cache / lab::cache_key(r, 0) / "config.json"));
  lab::TrainedModel b = lab::trained_model(r, 0);  // from the cache
  CHECK(b.train_seconds == 0);
  CHECK(b.losses == a.losses);
  REQUIRE(b.test.size() == a.test.size());
  CHECK(b.test[0].src == a.test[0].src);
  CHECK(b.test[0].tgt == a.test[0].tgt);
  const auto wa = a.model->state_dict(), wb = b.model->state_dict();
  for (const auto& [name, t] : wa) CHECK(max_abs_diff(t, wb.at(name)) == 0.0);
  CHECK(lab::cache_key(r, 0) != lab::cache_key(r, 1));  // each seed its own model
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

}  // namespace

TEST_CASE("the attribution lab runs end to end on a tiny model: one number per sentence and pair of maps") {
  const test::TempDir out_tmp("gradflow_test_lab_trained_attribution_lab");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("attribution", out, {"--ig-steps", "4", "--permutations", "2"});
  const auto& seed = j.at("data").at("seeds").at("1");
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
  const auto& seed = j.at("data").at("seeds").at("1");
  for (const char* pair : {"att-gxi", "att-loo", "att-ig"})
    for (const auto& rho : seed.at("per_sentence_spearman").at(pair)) CHECK(rho.get<double>() == 0.0);
  for (const char* cf : {"per_sentence_permuted_tv", "per_sentence_uniform_tv"})
    for (const auto& tv : seed.at(cf)) CHECK(tv.get<double>() < 1e-6);
}

TEST_CASE("the exposure lab runs end to end on tiny models: every level, every sentence counted once per position and forced step") {
  const test::TempDir out_tmp("gradflow_test_lab_trained_exposure_lab");
  const fs::path out = out_tmp.path;
  const nlohmann::json j = run_tiny_lab("exposure", out, {"--min-support", "2", "--valid-every", "2", "--ss-rates", "0,10,25,50"});
  const auto& data = j.at("data");
  // Teacher forcing, then scheduled sampling at k = 100 / rate: 10, 4, 2.
  for (const nlohmann::json* level : {&data.at("teacher_forcing"), &data.at("scheduled_sampling").at("k10"), &data.at("scheduled_sampling").at("k4"),
                                      &data.at("scheduled_sampling").at("k2")}) {
    const auto& seed = level->at("1");
    CHECK(seed.at("positions").at("total").at(0).get<int64_t>() == 10);
    CHECK(seed.at("forced").at("sentences").get<int64_t>() == 10);
    CHECK(seed.at("forced").at("steps").at(0).get<int64_t>() == 10);  // the forced run always has a token after k
    const int64_t errors = seed.at("forced").at("errors_forced").at(0).get<int64_t>();
    CHECK(errors <= seed.at("forced").at("reference_steps").at(0).get<int64_t>());
    CHECK(seed.at("model").at("valid_steps").size() == 2);  // measured at steps 2 and 4
  }
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
  std::map<std::string, int> splits;
  for (const auto& c : p.at("placebo").at("claims")) splits[c.at("id").get<std::string>()] = c.at("splits").get<int>();
  CHECK(splits == std::map<std::string, int>{{"gap_grows", 0}, {"derails", 0}, {"ss_gap_trend", 100}, {"ss_derailment_trend", 100}});
}

TEST_CASE("the exposure lab refuses --ss-rates that are fewer than 4, not increasing, or do not start at teacher forcing") {
  const lab::Lab l = lab::exposure_lab();
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

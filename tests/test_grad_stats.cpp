// Gradient statistics (train/loop/grad_stats.h): per-head attention entropy on weights whose entropy is
// known, the parameter groups of a translator, and `train --grad-stats` end to end: the lines it
// writes, that recording leaves training unchanged, and that a resumed run appends.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "train/run/checkpoint.h"
#include "train/loop/grad_stats.h"
#include "train/loop/trainer.h"
#include "train/eval/translator.h"

#include "tiny_run.h"

using namespace gf;
using namespace gf::train;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("gradflow_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// A tiny model on a small part of the built-in corpus: a step takes milliseconds.
RunConfig tiny_config(int64_t steps) {
  RunConfig c = gf::test::tiny_run(800);
  c.layers = 2;
  c.layer.dropout = 0.1;
  c.lr = 2e-3;
  c.warmup = 10;
  c.max_tokens = 512;
  c.steps = steps;
  c.log_every = 1000000;
  return c;
}

TrainOptions options(const fs::path& out, int64_t grad_stats, bool resume = false) {
  TrainOptions o = gf::test::quiet_options(out.string());
  o.grad_stats = grad_stats;
  o.resume = resume;
  return o;
}

std::vector<StatsJson> read_lines(const fs::path& file) {
  std::vector<StatsJson> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) out.push_back(StatsJson::parse(line));
  return out;
}

}  // namespace

TEST_CASE("head_entropy: uniform rows give log(visible keys), one-hot rows 0; PAD queries and blocked rows do not count") {
  // B 1, H 2, L 3, S 4. Key 3 is PAD. Head 0 spreads evenly over the 3 visible keys, head 1 puts
  // everything on key 0. Query row 2 is PAD (its weights are garbage and must be ignored).
  Tensor w = Tensor::zeros({1, 2, 3, 4});  // (B, H, L, S)
  for (int64_t l = 0; l < 3; ++l) {
    for (int64_t s = 0; s < 3; ++s) w.flat_set((0 * 3 + l) * 4 + s, 1.0 / 3);
    w.flat_set((1 * 3 + l) * 4 + 0, 1.0);
  }
  w.flat_set((0 * 3 + 2) * 4 + 0, 0.9), w.flat_set((0 * 3 + 2) * 4 + 1, 0.05), w.flat_set((0 * 3 + 2) * 4 + 2, 0.05);
  Tensor key_pad = Tensor::of({0, 0, 0, 1}, {1, 4}, DType::Bool);    // (B, S)
  Tensor query_pad = Tensor::of({0, 0, 1}, {1, 3}, DType::Bool);     // (B, L)
  HeadEntropy h = head_entropy(w, query_pad, key_pad, false);
  REQUIRE(h.heads.size() == 2);
  CHECK(h.rows == 2);
  CHECK(h.heads[0] == doctest::Approx(std::log(3.0)).epsilon(1e-6));
  CHECK(h.heads[1] == doctest::Approx(0.0));
  CHECK(h.uniform == doctest::Approx(std::log(3.0)));

  // Causal: row l sees l+1 keys; a row of zeros (every key blocked) does not count.
  Tensor c = Tensor::zeros({1, 1, 3, 3}, DType::Float64);  // (B, H, L, S)
  c.flat_set(0, 1.0);                                        // row 0: one visible key
  c.flat_set(3, 0.5), c.flat_set(4, 0.5);                    // row 1: even over 2
  HeadEntropy hc = head_entropy(c, Tensor(), Tensor(), true);  // row 2 is all zeros
  CHECK(hc.rows == 2);
  CHECK(hc.heads[0] == doctest::Approx(0.5 * std::log(2.0)));
  CHECK(hc.uniform == doctest::Approx(0.5 * (std::log(1.0) + std::log(2.0))));

  CHECK_THROWS_AS(head_entropy(Tensor::zeros({2, 3, 4}), Tensor(), Tensor(), false), std::invalid_argument);
  CHECK_THROWS_AS(head_entropy(w, Tensor::zeros({1, 3}), key_pad, false), std::invalid_argument);  // not bool
}

TEST_CASE("parameter groups: every element of every parameter in exactly one group, in_proj split into Q, K, V") {
  nn::Seq2SeqOptions o;
  o.src_vocab = 11, o.tgt_vocab = 13, o.num_layers = 2;
  o.layer.d_model = 16, o.layer.nhead = 2, o.layer.dim_feedforward = 32, o.layer.dropout = 0;
  nn::Seq2SeqTransformer model(o);
  const auto named = model.named_parameters();
  const std::vector<GradGroup> groups = grad_groups(named);
  std::set<std::string> names;
  int64_t covered = 0;
  for (const auto& g : groups) {
    names.insert(g.name);
    for (const auto& p : g.pieces) covered += p.end - p.begin;
  }
  CHECK(covered == model.num_parameters());
  for (const char* want : {"emb.src", "emb.tgt", "enc0.self.q", "enc0.self.k", "enc0.self.v", "enc0.self.out", "enc0.ffn", "enc0.norm",
                           "enc1.ffn", "enc.final_norm", "dec1.self.q", "dec1.cross.q", "dec1.cross.k", "dec1.cross.v", "dec1.cross.out",
                           "dec0.norm", "dec.final_norm", "out"})
    CHECK_MESSAGE(names.count(want) == 1, want);
  CHECK(names.size() == 2 + 2 * 6 + 1 + 2 * 10 + 1 + 1);
  // Q holds the first D rows of in_proj_weight and the first D entries of in_proj_bias.
  for (const auto& g : groups)
    if (g.name == "dec0.cross.k") {
      REQUIRE(g.pieces.size() == 2);
      CHECK(g.pieces[0].begin == 16 * 16);
      CHECK(g.pieces[0].end == 2 * 16 * 16);
      CHECK(g.pieces[1].begin == 16);
      CHECK(g.pieces[1].end == 32);
    }
  CHECK(group_of("transformer.decoder.layers.1.linear2.weight") == "dec1.ffn");
  CHECK(group_of("transformer.decoder.layers.0.multihead_attn.k_proj.weight") == "dec0.cross.k");  // grouped-query
  CHECK(group_of("transformer.layers.2.self_attn.v_proj.bias") == "layer2.self.v");                // decoder-only
  CHECK(group_of("transformer.norm.weight") == "final_norm");
  CHECK(group_of("emb.weight") == "emb");
  CHECK(group_of("some.other.module.weight") == "some.other.module");
}

TEST_CASE("train --grad-stats: lines at step 1 and every N, the expected groups, finite values, entropies in [0, log S]; training unchanged") {
  fs::path plain = fresh_dir("gs_plain"), with = fresh_dir("gs_with");
  TrainResult a = train_translator(tiny_config(6), options(plain, 0));
  TrainResult b = train_translator(tiny_config(6), options(with, 2));
  REQUIRE(a.step_losses.size() == 6);
  REQUIRE(b.step_losses.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(a.step_losses[i].second == b.step_losses[i].second);  // recording is read-only
  CHECK_FALSE(fs::exists(plain / GradStatsRecorder::kJsonl));

  const std::vector<StatsJson> lines = read_lines(with / GradStatsRecorder::kJsonl);
  REQUIRE(lines.size() == 4);
  const int64_t steps[] = {1, 2, 4, 6};
  for (size_t i = 0; i < lines.size(); ++i) {
    const StatsJson& j = lines[i];
    INFO("line " << i);
    CHECK(j["step"].get<int64_t>() == steps[i]);
    CHECK(j["loss"].get<double>() == b.step_losses[static_cast<size_t>(steps[i] - 1)].second);
    CHECK(j["record_seconds"].get<double>() >= 0);
    CHECK(j["record_seconds"].get<double>() < 10);
    REQUIRE(j["groups"].size() == 37);
    for (const auto& g : j["groups"]) {
      INFO(g["name"].get<std::string>());
      for (const char* stat : {"grad_norm", "param_norm", "update_ratio"}) {
        REQUIRE(g[stat].is_number());
        CHECK(std::isfinite(g[stat].get<double>()));
        CHECK(g[stat].get<double>() >= 0);
      }
      CHECK(g["param_norm"].get<double>() > 0);
      CHECK(g["update_ratio"].get<double>() > 0);  // Adam moved every group
      CHECK(g["update_ratio"].get<double>() < 1);
    }
    REQUIRE(j["attention"].size() == 6);  // enc0, enc1 self; dec0, dec1 self and cross
    for (const auto& a : j["attention"]) {
      INFO(a["name"].get<std::string>());
      REQUIRE(a["entropy"].size() == 2);
      CHECK(a["rows"].get<int64_t>() > 0);
      const double uniform = a["uniform"].get<double>();
      CHECK(uniform > 0);
      CHECK(uniform <= std::log(100.0));  // no sentence of the corpus is near 100 tokens
      for (const auto& e : a["entropy"]) {
        CHECK(e.get<double>() >= 0);
        CHECK(e.get<double>() <= uniform * (1 + 1e-5));
      }
    }
  }
  // The global gradient norm is the groups' combined (before clipping: the config clips at 1).
  double sq = 0;
  for (const auto& g : lines[0]["groups"]) sq += g["grad_norm"].get<double>() * g["grad_norm"].get<double>();
  CHECK(lines[0]["grad_norm"].get<double>() == doctest::Approx(std::sqrt(sq)).epsilon(1e-4));
  const std::string svg = read_text_file((with / GradStatsRecorder::kSvg).string());
  CHECK(svg.find("gradient statistics: 4 recorded steps (1 to 6)") != std::string::npos);
  fs::remove_all(plain);
  fs::remove_all(with);
}

TEST_CASE("train --grad-stats survives --resume: lines past the checkpoint are dropped, new ones appended") {
  fs::path dir = fresh_dir("gs_resume");
  train_translator(tiny_config(4), options(dir, 2));
  {
    // As a run killed after step 6's line, before its checkpoint; the lines without an integer step are dropped too.
    std::ofstream extra(dir / GradStatsRecorder::kJsonl, std::ios::app);
    extra << "{\"step\":6,\"loss\":1.0,\"groups\":[],\"attention\":[]}\n{\"step\":\"6\"}\n{\"step\":1e300}\n[6]\n{\"step\":8,\"lo";
  }
  train_translator(tiny_config(8), options(dir, 2, /*resume=*/true));
  const std::vector<StatsJson> lines = read_lines(dir / GradStatsRecorder::kJsonl);
  std::vector<int64_t> steps;
  for (const auto& j : lines) steps.push_back(j["step"].get<int64_t>());
  CHECK(steps == std::vector<int64_t>{1, 2, 4, 6, 8});
  CHECK(lines[3]["groups"].size() == 37);  // step 6 recorded again, not the stale line
  const std::string svg = read_text_file((dir / GradStatsRecorder::kSvg).string());
  CHECK(svg.find("5 recorded steps (1 to 8)") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("train --grad-stats on the decoder-only model with grouped-query attention: its groups and causal entropies") {
  fs::path dir = fresh_dir("gs_decoder_only");
  RunConfig c = tiny_config(3);
  c.arch = "decoder-only";
  c.layer.nhead = 4;
  c.layer.kv_heads = 2;
  train_translator(c, options(dir, 2));
  const std::vector<StatsJson> lines = read_lines(dir / GradStatsRecorder::kJsonl);
  REQUIRE(lines.size() == 2);  // steps 1 and 2
  std::set<std::string> names;
  for (const auto& g : lines[1]["groups"]) {
    names.insert(g["name"].get<std::string>());
    CHECK(std::isfinite(g["grad_norm"].get<double>()));
  }
  for (const char* want : {"emb", "layer0.self.q", "layer0.self.k", "layer0.self.v", "layer0.self.out", "layer0.ffn", "layer0.norm",
                           "layer1.self.k", "final_norm", "out"})
    CHECK_MESSAGE(names.count(want) == 1, want);
  CHECK(names.size() == 1 + 2 * 6 + 1 + 1);
  REQUIRE(lines[1]["attention"].size() == 2);
  for (const auto& a : lines[1]["attention"]) {
    REQUIRE(a["entropy"].size() == 4);  // query heads, though keys and values have 2
    // Causal: row t sees t + 1 keys, so the mean uniform entropy is below log of the longest row.
    CHECK(a["uniform"].get<double>() > 0);
    for (const auto& e : a["entropy"]) {
      CHECK(e.get<double>() >= 0);
      CHECK(e.get<double>() <= a["uniform"].get<double>() * (1 + 1e-5));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("grad_stats_svg: a long record is drawn with at most kMaxColumns columns, the last step included") {
  std::vector<StatsJson> records;
  for (int64_t i = 1; i <= 400; ++i)
    records.push_back({{"step", i * 10},
                       {"loss", 1.0},
                       {"groups", {{{"name", "g"}, {"grad_norm", 1.0}, {"param_norm", 2.0}, {"update_ratio", 1e-3}}}},
                       {"attention", StatsJson::array()}});
  const std::string svg = grad_stats_svg(records);
  CHECK(svg.find("400 recorded steps (10 to 4000), one in 3 drawn") != std::string::npos);
  size_t cells = 0;
  for (size_t p = svg.find(">g / "); p != std::string::npos; p = svg.find(">g / ", p + 1)) ++cells;
  CHECK(cells == 3 * 134);  // three statistics x lines 1, 4, ..., 400
  CHECK(svg.find(">g / 4000:") != std::string::npos);
  CHECK_THROWS_AS(grad_stats_svg({}), std::invalid_argument);
}

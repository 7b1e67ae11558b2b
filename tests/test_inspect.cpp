// train/inspect/: gradient-times-input against a finite-difference estimate, the teacher-forced
// forward from given embeddings against the model's own, blank-out against a direct computation,
// leave-one-out against the shortened sentence, attention rollout's rows (a hand-worked case and a
// model's maps), and the decoder-only model's maps against central differences.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "nn/decoder_only.h"
#include "nn/masks.h"
#include "nn_test_util.h"
#include "train/data/vocab.h"
#include "train/inspect/attribution.h"
#include "train/inspect/decoder_only.h"

using namespace gf;
using namespace gf::testing;
namespace inspect = gf::train::inspect;

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
  const inspect::AttributionMaps m = inspect::attribution_maps(*model, kSrc, kOut);
  const Tensor x = inspect::source_embeddings(*model, kSrc);  // (S, D)
  const double h = 1e-5;
  double worst = 0, largest = 0;
  for (size_t s = 0; s < kSrc.size(); ++s) {
    Tensor up = x.clone(), down = x.clone();  // (S, D)
    for (int64_t d = 0; d < x.size(1); ++d) {
      up.flat_set(static_cast<int64_t>(s) * x.size(1) + d, x.flat_get(static_cast<int64_t>(s) * x.size(1) + d) * (1 + h));
      down.flat_set(static_cast<int64_t>(s) * x.size(1) + d, x.flat_get(static_cast<int64_t>(s) * x.size(1) + d) * (1 - h));
    }
    const auto lp_up = inspect::output_log_probs(*model, up, kOut), lp_down = inspect::output_log_probs(*model, down, kOut);
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
  const inspect::AttributionMaps m = inspect::attribution_maps(*model, kSrc, kOut);
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
    CHECK(inspect::output_log_probs(*model, inspect::source_embeddings(*model, kSrc), kOut)[t] == doctest::Approx(m.log_probs[t]).epsilon(1e-12));
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
  const inspect::Map b = inspect::blank_out(*model, kSrc, kOut);
  const Tensor x = inspect::source_embeddings(*model, kSrc);
  const auto full = inspect::output_log_probs(*model, x, kOut);
  Tensor z = x.clone();
  z.select(0, 2).fill_(0.0);
  const auto blanked = inspect::output_log_probs(*model, z, kOut);
  double moved = 0;
  for (size_t t = 0; t < kOut.size(); ++t) {
    CHECK(b[t][2] == doctest::Approx(full[t] - blanked[t]).epsilon(1e-12));
    moved += std::abs(b[t][2]);
  }
  CHECK(moved > 1e-6);
}

TEST_CASE("leave-one-out blanks a token out with every other position kept") {
  auto model = tiny_model();
  const inspect::Map loo = inspect::leave_one_out(*model, kSrc, kOut);  // (T, S)
  const Tensor x = inspect::source_embeddings(*model, kSrc);       // (S, D)
  const int64_t S = x.size(0), D = x.size(1);
  const inspect::Map full = inspect::output_distributions(*model, x.reshape({1, S, D}), kOut).at(0);  // (T, V)
  // Without its last token: the sentence one shorter (no token moves). Blanking the last token out
  // must give exactly that.
  const inspect::Map shorter = inspect::output_distributions(*model, x.narrow(0, 0, S - 1).contiguous().reshape({1, S - 1, D}), kOut).at(0);
  // Without its first token, every later token moved up one position: not what blanking it out does.
  const inspect::Map shifted = inspect::output_distributions(*model, x.narrow(0, 1, S - 1).contiguous().reshape({1, S - 1, D}), kOut).at(0);
  double moved = 0, differs = 0;
  for (size_t t = 0; t < kOut.size(); ++t) {
    CHECK(loo[t][S - 1] == doctest::Approx(inspect::total_variation(full[t], shorter[t])).epsilon(1e-9));
    differs += std::abs(loo[t][0] - inspect::total_variation(full[t], shifted[t]));
    for (double v : loo[t]) {
      moved += v;
      CHECK((v >= 0 && v <= 1));
    }
  }
  CHECK(moved > 1e-6);   // a token's absence moves the output
  CHECK(differs > 1e-6);  // and deleting (shifting) is another measure
}

TEST_CASE("attention rollout: a hand-worked case, and rows that sum to 1 on a model's maps") {
  // One encoder layer that swaps two tokens, one decoder position that attends to source 0 only.
  const inspect::Map swap = {{0, 1}, {1, 0}};
  const inspect::Rollout r = inspect::attention_rollout({swap}, {{{1}}}, {{{1, 0}}});
  // Encoder: 0.5 swap + 0.5 I = all 0.5; the decoder takes half from the source: [0.25, 0.25].
  CHECK(r.encoder[0][0] == doctest::Approx(0.5));
  CHECK(r.source_share[0] == doctest::Approx(0.5));
  CHECK(r.source[0][0] == doctest::Approx(0.5));
  CHECK(r.source[0][1] == doctest::Approx(0.5));
  // Two encoder layers of identity attention keep the source token itself: rollout = cross-attention.
  const inspect::Map id = {{1, 0}, {0, 1}};
  const inspect::Rollout r2 = inspect::attention_rollout({id, id}, {{{1}}, {{1}}}, {{{0.2, 0.8}}, {{0.2, 0.8}}});
  CHECK(r2.source[0][1] == doctest::Approx(0.8));
  CHECK(r2.source_share[0] == doctest::Approx(0.75));  // 0.5 + 0.25 from the two cross-attention steps

  auto model = tiny_model();
  const inspect::AttributionMaps m = inspect::attribution_maps(*model, kSrc, kOut);
  std::vector<inspect::Map> enc, dec, cross;
  for (const auto& l : m.enc_self) enc.push_back(inspect::head_mean(l));
  for (const auto& l : m.dec_self) dec.push_back(inspect::head_mean(l));
  for (const auto& l : m.cross) cross.push_back(inspect::head_mean(l));
  const inspect::Rollout rm = inspect::attention_rollout(enc, dec, cross);
  REQUIRE(rm.source.size() == kOut.size());
  for (size_t t = 0; t < rm.source.size(); ++t) {
    double sum = 0, lowest = 1;
    for (double v : rm.source[t]) sum += v, lowest = std::min(lowest, v);
    CHECK(lowest >= 0);
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(rm.source_share[t] > 0);
    CHECK(rm.source_share[t] < 1);
  }
  CHECK(error_of([&] { inspect::attention_rollout(enc, dec, {cross[0]}); }).find("decoder") != std::string::npos);
}

TEST_CASE("attribution_maps rejects an output without <eos>") {
  auto model = tiny_model();
  GF_CHECK_CONTAINS(error_of([&] { inspect::attribution_maps(*model, kSrc, {7, 5}); }), "<eos>");
}

TEST_CASE("stack_rollout: one layer is 0.5 A + 0.5 I; rows of the product sum to 1") {
  const inspect::Map a = {{1, 0, 0}, {0.25, 0.75, 0}, {0.2, 0.3, 0.5}};
  const inspect::Map r1 = inspect::stack_rollout({a});
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) CHECK(r1[i][j] == doctest::Approx(0.5 * a[i][j] + (i == j ? 0.5 : 0.0)));
  const inspect::Map r2 = inspect::stack_rollout({a, a});
  for (const auto& row : r2) CHECK(row[0] + row[1] + row[2] == doctest::Approx(1.0));
  // B = 0.5 A + 0.5 I = [[1, 0, 0], [0.125, 0.875, 0], [0.1, 0.15, 0.75]]; (B B)[2][0] = 0.1 + 0.15 * 0.125 + 0.75 * 0.1.
  CHECK(r2[2][0] == doctest::Approx(0.19375).epsilon(1e-12));
  CHECK_THROWS_WITH_AS(inspect::stack_rollout({a, {{1}}}), doctest::Contains("layer 1 has 1 rows, layer 0 has 3"), std::invalid_argument);
}

// g_tj = (d log p(out[t]) / d x_j) . x_j is the derivative of log p(out[t]) when x_j is scaled by
// (1 + eps) at eps = 0: checked against central differences of the model's own log p, in float64.
TEST_CASE("decoder_only_maps: gradient x input matches central differences; later positions get exactly 0; rollout rows sum to 1") {
  nn::DecoderOnlyOptions o;
  o.vocab = 13;
  o.layer.d_model = 8, o.layer.nhead = 4, o.layer.kv_heads = 2, o.layer.dim_feedforward = 16, o.layer.dropout = 0;
  o.num_layers = 2;
  o.max_len = 32;
  nn::DecoderOnlyTransformer model(o, 5);
  model.to(DType::Float64);
  model.eval();
  const std::vector<int64_t> prompt = {5, 6, 7, 4}, out = {8, 9, 3};  // 4 = <sep>'s stand-in, 3 = <eos>
  const inspect::StackMaps m = inspect::decoder_only_maps(model, prompt, out);
  const int64_t P = 4, T = 3, L = P + T - 1, D = 8;
  REQUIRE(m.self.size() == 2);
  REQUIRE(m.self[0].size() == 4);  // query heads, grouped or not
  REQUIRE(m.grad_dot.size() == static_cast<size_t>(T));
  REQUIRE(m.grad_dot[0].size() == static_cast<size_t>(L));

  // log p(out[t]) with the token embeddings x (L, D) given, as the model computes it.
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), out.begin(), out.end() - 1);
  NoGradGuard ng;
  const Tensor x = (model.emb->forward(Tensor::from_vector(seq, {1, L})) * std::sqrt(8.0)).data();  // (1, L, D)
  auto log_p = [&](const Tensor& xs, int64_t t) {
    const Tensor logits = model.out->forward(model.transformer->forward(model.pos->forward(Variable(xs)), Tensor(), nn::make_causal_mask(L))).data();
    const double* row = logits.contiguous().data<double>() + (P - 1 + t) * o.vocab;  // (1, L, V)
    double mx = row[0], z = 0;
    for (int64_t v = 1; v < o.vocab; ++v) mx = std::max(mx, row[v]);
    for (int64_t v = 0; v < o.vocab; ++v) z += std::exp(row[v] - mx);
    return row[out[t]] - mx - std::log(z);
  };
  const double eps = 1e-5;
  for (int64_t t = 0; t < T; ++t) {
    CHECK(log_p(x, t) == doctest::Approx(m.log_probs[t]).epsilon(1e-12));
    for (int64_t j = 0; j < L; ++j) {
      CAPTURE(t);
      CAPTURE(j);
      if (j > P - 1 + t) {
        CHECK(m.grad_dot[t][j] == 0.0);  // the causal mask: a later token cannot move this prediction
        continue;
      }
      Tensor up = x.clone(), down = x.clone();
      for (int64_t k = 0; k < D; ++k) {
        const double v = x.contiguous().data<double>()[j * D + k];
        up.select(0, 0).select(0, j).select(0, k).fill_(v * (1 + eps));
        down.select(0, 0).select(0, j).select(0, k).fill_(v * (1 - eps));
      }
      const double fd = (log_p(up, t) - log_p(down, t)) / (2 * eps);
      CHECK(m.grad_dot[t][j] == doctest::Approx(fd).epsilon(1e-6).scale(1e-3));
    }
    double s = 0;
    for (double v : m.rollout[t]) s += v;
    CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    for (int64_t j = P + t; j < L; ++j) CHECK(m.rollout[t][j] == 0.0);  // nothing rolls out of the future
  }
}


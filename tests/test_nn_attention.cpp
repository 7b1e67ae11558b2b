// MultiheadAttention: hand-computed weights, padding and causal masks, bool vs float masks, fully
// masked rows, cross-attention shapes, the weights in autograd, float64 gradchecks, errors.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "gradcheck_util.h"
#include "nn/masks.h"
#include "nn/multihead_attention.h"
#include "nn_test_util.h"

using namespace gf;
using namespace gf::testing;
using nn::MultiheadAttention;

namespace {

// An attention with head_dim 1 and identity projections, so that the score of query q against
// key k in head h is exactly q_h * k_h (scale 1 / sqrt(1) = 1) and the output is sum_s w_s k_s.
std::shared_ptr<MultiheadAttention> make_identity(int64_t d) {
  auto mha = std::make_shared<MultiheadAttention>(d, d);  // d heads of 1 feature
  Tensor w = mha->in_proj_weight.data();                   // (3d, d)
  w.zero_();
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t i = 0; i < d; ++i) w.flat_set((part * d + i) * d + i, 1.0);
  Tensor(mha->in_proj_bias.data()).zero_();
  Tensor ow = mha->out_proj->weight.data();  // (d, d)
  ow.zero_();
  for (int64_t i = 0; i < d; ++i) ow.flat_set(i * d + i, 1.0);
  Tensor(mha->out_proj->bias.data()).zero_();
  return mha;
}

}  // namespace

namespace {

// softmax of a short row, in double.
std::vector<double> softmax_ref(const std::vector<double>& x) {
  double m = -INFINITY, z = 0;
  for (double v : x) m = std::max(m, v);
  std::vector<double> out;
  for (double v : x) out.push_back(std::exp(v - m));
  for (double v : out) z += v;
  for (double& v : out) v /= z;
  return out;
}

// A float (0 / -inf) mask from a bool one.
Tensor to_float_mask(const Tensor& b, DType dt = DType::Float32) {
  Tensor f = Tensor::zeros(b.shape(), dt);
  for (int64_t i = 0; i < b.numel(); ++i)
    if (b.flat_get(i) != 0.0) f.flat_set(i, -INFINITY);
  return f;
}

double row_sum(const Tensor& w, int64_t b, int64_t h, int64_t l) {
  double s = 0;
  for (int64_t j = 0; j < w.size(3); ++j) s += w.at({b, h, l, j});
  return s;
}

std::shared_ptr<MultiheadAttention> random_attention(int64_t d, int64_t h, uint64_t seed, DType dt = DType::Float32) {
  Generator gen(seed);
  auto mha = std::make_shared<MultiheadAttention>(d, h, 0.0, true, gen);
  // Non-zero biases, so that a test would notice one being dropped.
  Tensor b = mha->in_proj_bias.data();
  kernels::uniform_(b, -0.3, 0.3, gen);
  Tensor ob = mha->out_proj->bias.data();
  kernels::uniform_(ob, -0.3, 0.3, gen);
  mha->to(dt);
  return mha;
}

}  // namespace

TEST_CASE("scores [2, 1, 0.5] give weights [0.629, 0.231, 0.140]; padding the third gives [0.731, 0.269, 0]") {
  auto mha = make_identity(1);
  Variable query(Tensor::of({1.0}, {1, 1, 1}));            // (1, 1, 1)
  Variable keys(Tensor::of({2.0, 1.0, 0.5}, {1, 3, 1}));   // (1, 3, 1): scores 1 * k
  nn::AttentionResult r = mha->forward(query, keys, keys, Tensor(), Tensor(), true);
  REQUIRE(shape_str(r.weights.shape()) == "(1, 1, 1, 3)");
  CHECK(r.weights.data().at({0, 0, 0, 0}) == doctest::Approx(0.629).epsilon(1e-3));
  CHECK(r.weights.data().at({0, 0, 0, 1}) == doctest::Approx(0.231).epsilon(2e-3));
  CHECK(r.weights.data().at({0, 0, 0, 2}) == doctest::Approx(0.140).epsilon(2e-3));
  std::vector<double> w = softmax_ref({2.0, 1.0, 0.5});
  for (int64_t j = 0; j < 3; ++j) CHECK(r.weights.data().at({0, 0, 0, j}) == doctest::Approx(w[j]).epsilon(1e-6));
  // The output mixes the values (= the keys here) with those weights.
  CHECK(r.output.data().item() == doctest::Approx(w[0] * 2.0 + w[1] * 1.0 + w[2] * 0.5).epsilon(1e-6));

  // The third position as padding.
  Tensor kpm = Tensor::of({0, 0, 1}, {1, 3}, DType::Bool);  // (1, 3)
  nn::AttentionResult p = mha->forward(query, keys, keys, kpm, Tensor(), true);
  CHECK(p.weights.data().at({0, 0, 0, 0}) == doctest::Approx(0.731).epsilon(1e-3));
  CHECK(p.weights.data().at({0, 0, 0, 1}) == doctest::Approx(0.269).epsilon(2e-3));
  CHECK(p.weights.data().at({0, 0, 0, 2}) == 0.0);  // exactly
  std::vector<double> wp = softmax_ref({2.0, 1.0});
  CHECK(p.weights.data().at({0, 0, 0, 0}) == doctest::Approx(wp[0]).epsilon(1e-6));
  CHECK(p.output.data().item() == doctest::Approx(wp[0] * 2.0 + wp[1] * 1.0).epsilon(1e-6));

  // The same as an attn_mask (L, S), as a float key_padding_mask and as a float attn_mask.
  for (const auto& [k, a] : {std::pair{Tensor(), Tensor::of({0, 0, 1}, {1, 3}, DType::Bool)}, std::pair{to_float_mask(kpm), Tensor()},
                             std::pair{Tensor(), to_float_mask(Tensor::of({0, 0, 1}, {1, 3}, DType::Bool))}}) {
    nn::AttentionResult q = mha->forward(query, keys, keys, k, a, true);
    CHECK(max_abs_diff(q.weights.data(), p.weights.data()) == 0.0);
    CHECK(max_abs_diff(q.output.data(), p.output.data()) == 0.0);
  }
}

TEST_CASE("two heads of one feature each see their own scores") {
  auto mha = make_identity(2);
  Variable query(Tensor::of({1.0, 1.0}, {1, 1, 2}));                       // (1, 1, 2)
  Variable keys(Tensor::of({2.0, 0.5, 1.0, 2.0, 0.5, 1.0}, {1, 3, 2}));    // (1, 3, 2): head 0 [2, 1, .5], head 1 [.5, 2, 1]
  nn::AttentionResult r = mha->forward(query, keys, keys, Tensor(), Tensor(), true);
  REQUIRE(shape_str(r.weights.shape()) == "(1, 2, 1, 3)");
  std::vector<double> w0 = softmax_ref({2.0, 1.0, 0.5}), w1 = softmax_ref({0.5, 2.0, 1.0});
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(r.weights.data().at({0, 0, 0, j}) == doctest::Approx(w0[j]).epsilon(1e-6));
    CHECK(r.weights.data().at({0, 1, 0, j}) == doctest::Approx(w1[j]).epsilon(1e-6));
  }
  CHECK(r.output.data().at({0, 0, 0}) == doctest::Approx(w0[0] * 2.0 + w0[1] * 1.0 + w0[2] * 0.5).epsilon(1e-6));
  CHECK(r.output.data().at({0, 0, 1}) == doctest::Approx(w1[0] * 0.5 + w1[1] * 2.0 + w1[2] * 1.0).epsilon(1e-6));
  // A (B*H, L, S) mask can block a position in one head only.
  Tensor per_head = Tensor::of({0, 0, 0, 0, 1, 0}, {2, 1, 3}, DType::Bool);  // head 1 loses key 1
  nn::AttentionResult m = mha->forward(query, keys, keys, Tensor(), per_head, true);
  std::vector<double> w1m = softmax_ref({0.5, 1.0});
  for (int64_t j = 0; j < 3; ++j) CHECK(m.weights.data().at({0, 0, 0, j}) == doctest::Approx(w0[j]).epsilon(1e-6));
  CHECK(m.weights.data().at({0, 1, 0, 0}) == doctest::Approx(w1m[0]).epsilon(1e-6));
  CHECK(m.weights.data().at({0, 1, 0, 1}) == 0.0);
  CHECK(m.weights.data().at({0, 1, 0, 2}) == doctest::Approx(w1m[1]).epsilon(1e-6));
}

TEST_CASE("the masking example through masked_fill + softmax") {
  Variable scores(Tensor::of({2.0, 1.0, 0.5}, {1, 3}));
  Tensor w = softmax(scores).data();
  CHECK(w.at({0, 0}) == doctest::Approx(0.629).epsilon(1e-3));
  CHECK(w.at({0, 1}) == doctest::Approx(0.231).epsilon(2e-3));
  CHECK(w.at({0, 2}) == doctest::Approx(0.140).epsilon(2e-3));
  Tensor m = softmax(masked_fill(scores, Tensor::of({0, 0, 1}, {1, 3}, DType::Bool), -INFINITY)).data();
  CHECK(m.at({0, 0}) == doctest::Approx(0.731).epsilon(1e-3));
  CHECK(m.at({0, 1}) == doctest::Approx(0.269).epsilon(2e-3));
  CHECK(m.at({0, 2}) == 0.0);
}

TEST_CASE("a float mask is added, never read as a boolean") {
  auto mha = make_identity(1);
  Variable query(Tensor::of({1.0}, {1, 1, 1}));
  Variable keys(Tensor::of({2.0, 1.0, 0.5}, {1, 3, 1}));
  // 1.0 as a bool would block key 1; as a float it raises its score from 1 to 2.
  Tensor fm = Tensor::of({0.0, 1.0, 0.0}, {1, 3});  // (L, S)
  std::vector<double> want = softmax_ref({2.0, 2.0, 0.5});
  nn::AttentionResult a = mha->forward(query, keys, keys, Tensor(), fm, true);
  nn::AttentionResult k = mha->forward(query, keys, keys, fm, Tensor(), true);  // as key_padding_mask (B, S)
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(a.weights.data().at({0, 0, 0, j}) == doctest::Approx(want[j]).epsilon(1e-6));
    CHECK(k.weights.data().at({0, 0, 0, j}) == doctest::Approx(want[j]).epsilon(1e-6));
  }
  // A float64 mask on a float32 module is converted, and a bool and a float mask combine.
  Tensor fm64 = Tensor::of({-0.5, 0.0, 0.0}, {1, 3}, DType::Float64);
  nn::AttentionResult c = mha->forward(query, keys, keys, Tensor::of({0, 1, 0}, {1, 3}, DType::Bool), fm64, true);
  std::vector<double> wc = softmax_ref({1.5, 0.5});
  CHECK(c.weights.data().at({0, 0, 0, 0}) == doctest::Approx(wc[0]).epsilon(1e-6));
  CHECK(c.weights.data().at({0, 0, 0, 1}) == 0.0);
  CHECK(c.weights.data().at({0, 0, 0, 2}) == doctest::Approx(wc[1]).epsilon(1e-6));
}

TEST_CASE("bool and 0/-inf float masks give the same outputs (2-D, 3-D attn_mask, key padding)") {
  const int64_t B = 2, H = 2, L = 4, D = 8;
  auto mha = random_attention(D, H, 21);
  Variable x(randn({B, L, D}, 22, 1.0, DType::Float32));  // (2, 4, 8)
  Tensor causal = nn::make_causal_mask(L);                  // (4, 4)
  Tensor kpm = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, L}, DType::Bool);
  Tensor per_head = Tensor::zeros({B * H, L, L}, DType::Bool);  // (4, 4, 4)
  for (int64_t i = 0; i < per_head.numel(); ++i) per_head.flat_set(i, (i * 7) % 5 == 0 && i % 4 != 0 ? 1.0 : 0.0);
  struct Case {
    Tensor kpm, attn;
  };
  for (const Case& c : {Case{kpm, Tensor()}, Case{Tensor(), causal}, Case{kpm, causal}, Case{Tensor(), per_head}, Case{kpm, per_head}}) {
    nn::AttentionResult rb = mha->forward(x, x, x, c.kpm, c.attn, true);
    Tensor fk = c.kpm.defined() ? to_float_mask(c.kpm) : Tensor(), fa = c.attn.defined() ? to_float_mask(c.attn) : Tensor();
    for (const auto& [k, a] : {std::pair{fk, fa}, std::pair{c.kpm, fa}, std::pair{fk, c.attn}}) {
      nn::AttentionResult rf = mha->forward(x, x, x, k, a, true);
      CHECK(max_abs_diff(rb.output.data(), rf.output.data()) < 1e-6);
      CHECK(max_abs_diff(rb.weights.data(), rf.weights.data()) < 1e-7);
    }
    // The mask changed something (so that the comparison means something).
    CHECK(max_abs_diff(rb.output.data(), mha->forward(x, x, x).output.data()) > 1e-3);
  }
}

TEST_CASE("causal self-attention: make_causal_mask(4); weights above the diagonal are exactly 0") {
  const int64_t B = 2, H = 2, L = 4, D = 8;
  auto mha = random_attention(D, H, 31);
  Tensor x = randn({B, L, D}, 32, 1.0, DType::Float32);  // (2, 4, 8)
  Tensor causal = nn::make_causal_mask(L);
  nn::AttentionResult r = mha->forward(Variable(x), Variable(x), Variable(x), Tensor(), causal, true);
  // Note: three distinct Variables over one tensor take the general path; the same Variable the fused one.
  Variable xv(x);
  nn::AttentionResult fused = mha->forward(xv, xv, xv, Tensor(), causal, true);
  CHECK(max_abs_diff(r.output.data(), fused.output.data()) < 1e-6);
  REQUIRE(shape_str(r.weights.shape()) == "(2, 2, 4, 4)");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      CHECK(r.weights.data().at({b, h, 0, 0}) == 1.0);  // the first position sees only itself
      for (int64_t i = 0; i < L; ++i) {
        CHECK(row_sum(r.weights.data(), b, h, i) == doctest::Approx(1.0).epsilon(1e-6));
        for (int64_t j = 0; j < L; ++j) {
          if (j > i) CHECK(r.weights.data().at({b, h, i, j}) == 0.0);
          else CHECK(r.weights.data().at({b, h, i, j}) > 0.0);
        }
      }
    }
  // Changing the last position changes only the last output row. Without weights asked for, both
  // runs take the fused attention op (docs/attention.md), which rounds differently from the path
  // above that keeps the weights: they are compared with each other, exactly.
  Tensor y1 = mha->forward(xv, xv, xv, Tensor(), causal).output.data();
  CHECK(max_abs_diff(y1, fused.output.data()) < 1e-6);
  Tensor x2 = x.clone();
  for (int64_t d = 0; d < D; ++d) x2.flat_set((0 * L + 3) * D + d, 5.0);
  Variable xv2(x2);
  Tensor y2 = mha->forward(xv2, xv2, xv2, Tensor(), causal).output.data();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t d = 0; d < D; ++d) CHECK(y2.at({0, i, d}) == y1.at({0, i, d}));
  CHECK(std::abs(y2.at({0, 3, 0}) - y1.at({0, 3, 0})) > 1e-4);
}

TEST_CASE("cross-attention (3 target, 4 source): weights (B, H, 3, 4), rows sum to 1, padded sources get 0") {
  const int64_t B = 2, H = 2, D = 8;
  auto mha = random_attention(D, H, 41);
  Variable tgt(randn({B, 3, D}, 42, 1.0, DType::Float32));     // (2, 3, 8)
  Variable memory(randn({B, 4, D}, 43, 1.0, DType::Float32));  // (2, 4, 8)
  nn::AttentionResult r = mha->forward(tgt, memory, memory, Tensor(), Tensor(), true);
  CHECK(shape_str(r.weights.shape()) == "(2, 2, 3, 4)");
  CHECK(shape_str(r.output.shape()) == "(2, 3, 8)");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < 3; ++l) CHECK(row_sum(r.weights.data(), b, h, l) == doctest::Approx(1.0).epsilon(1e-6));
  Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, 4}, DType::Bool);  // the second source has 2 real tokens
  nn::AttentionResult p = mha->forward(tgt, memory, memory, src_pad, Tensor(), true);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t l = 0; l < 3; ++l) {
      CHECK(p.weights.data().at({1, h, l, 2}) == 0.0);
      CHECK(p.weights.data().at({1, h, l, 3}) == 0.0);
      CHECK(p.weights.data().at({0, h, l, 3}) > 0.0);
      CHECK(row_sum(p.weights.data(), 1, h, l) == doctest::Approx(1.0).epsilon(1e-6));
    }
  // The unpadded sentence is unaffected; the padded one equals attending over its 2 real keys.
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t d = 0; d < D; ++d) CHECK(p.output.data().at({0, l, d}) == r.output.data().at({0, l, d}));
  Variable tgt1(tgt.data().narrow(0, 1, 1).contiguous()), mem1(memory.data().narrow(0, 1, 1).narrow(1, 0, 2).contiguous());
  Tensor alone = mha->forward(tgt1, mem1, mem1).output.data();  // (1, 3, 8)
  CHECK(max_abs_diff(alone, p.output.data().narrow(0, 1, 1)) < 1e-6);
}

TEST_CASE("a fully masked row gets zero weights, the output bias, and finite gradients") {
  const int64_t B = 2, H = 2, L = 3, S = 4, D = 8;
  auto mha = random_attention(D, H, 51);
  Variable q(randn({B, L, D}, 52, 1.0, DType::Float32), true);  // (2, 3, 8)
  Variable kv(randn({B, S, D}, 53, 1.0, DType::Float32), true);  // (2, 4, 8)
  Tensor kpm = Tensor::of({0, 0, 1, 0, 1, 1, 1, 1}, {B, S}, DType::Bool);  // sentence 1: every key blocked
  Tensor attn = Tensor::zeros({L, S}, DType::Bool);                        // query 2: every key blocked
  for (int64_t j = 0; j < S; ++j) attn.flat_set(2 * S + j, 1.0);
  for (bool as_float : {false, true}) {
    CAPTURE(as_float);
    mha->zero_grad();
    q.zero_grad();
    kv.zero_grad();
    AnomalyGuard anomaly;  // any NaN in the forward, or NaN/Inf in a gradient, throws
    nn::AttentionResult r = as_float ? mha->forward(q, kv, kv, to_float_mask(kpm), to_float_mask(attn), true)
                                     : mha->forward(q, kv, kv, kpm, attn, true);
    const Tensor& w = r.weights.data();  // (2, 2, 3, 4)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = 0; s < S; ++s) CHECK(w.at({1, h, l, s}) == 0.0);
      for (int64_t s = 0; s < S; ++s) CHECK(w.at({0, h, 2, s}) == 0.0);
      CHECK(row_sum(w, 0, h, 0) == doctest::Approx(1.0).epsilon(1e-6));
    }
    // No value is mixed in: those rows are exactly out_proj.bias.
    for (int64_t d = 0; d < D; ++d) {
      CHECK(r.output.data().at({1, 0, d}) == doctest::Approx(mha->out_proj->bias.data().at({d})).epsilon(1e-6));
      CHECK(r.output.data().at({0, 2, d}) == doctest::Approx(mha->out_proj->bias.data().at({d})).epsilon(1e-6));
    }
    CHECK(all_finite(r.output.data()));
    Variable loss = sum(r.output * Variable(randn({B, L, D}, 54, 1.0, DType::Float32))) +
                    sum(r.weights * Variable(randn({B, H, L, S}, 55, 1.0, DType::Float32)));
    CHECK_NOTHROW(loss.backward());
    REQUIRE(q.grad().defined());
    CHECK(all_finite(q.grad()));
    CHECK(all_finite(kv.grad()));
    for (auto& [n, p] : mha->named_parameters()) {
      INFO(n);
      REQUIRE(p.grad().defined());
      CHECK(all_finite(p.grad()));
    }
    // The blocked query rows get no gradient through the attention (only through nothing: zero).
    for (int64_t d = 0; d < D; ++d) {
      CHECK(q.grad().at({1, 0, d}) == 0.0);
      CHECK(q.grad().at({0, 2, d}) == 0.0);
    }
    // The blocked keys of sentence 1 get none either.
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < D; ++d) CHECK(kv.grad().at({1, s, d}) == 0.0);
  }
}

TEST_CASE("the returned weights are part of the graph: retain_grad gives dL/dweights of shape (B, H, L, S)") {
  const int64_t B = 2, H = 2, L = 3, S = 4, D = 8;
  auto mha = random_attention(D, H, 61);
  Variable q(randn({B, L, D}, 62, 1.0, DType::Float32), true);
  Variable kv(randn({B, S, D}, 63, 1.0, DType::Float32), true);
  nn::AttentionResult r = mha->forward(q, kv, kv, Tensor(), Tensor(), true);
  REQUIRE(r.weights.defined());
  CHECK(r.weights.requires_grad());
  CHECK_FALSE(r.weights.is_leaf());
  r.weights.retain_grad();
  Tensor g = randn({B, L, D}, 64, 1.0, DType::Float32);
  sum(r.output * Variable(g)).backward();  // the output only
  REQUIRE(r.weights.grad().defined());
  CHECK(shape_str(r.weights.grad().shape()) == "(2, 2, 3, 4)");
  // dL/dweights[b, h] = dL/dmixed[b, h] v[b, h]^T with dL/dmixed = (g W_out) split into heads.
  NoGradGuard ng;
  Variable d_merged = matmul(Variable(g), mha->out_proj->weight);                          // (B, L, D)
  Variable d_mixed = permute(reshape(d_merged, {B, L, H, D / H}), {0, 2, 1, 3});           // (B, H, L, d_k)
  Variable v = mha->project_kv(kv).second;                                                  // (B, H, S, d_k)
  Tensor want = matmul(d_mixed, transpose(v, -2, -1)).data();                               // (B, H, L, S)
  CHECK(max_abs_diff(r.weights.grad(), want) < 1e-5);
  CHECK(max_abs_diff(want, Tensor::zeros(want.shape())) > 1e-2);
  // need_weights = false: no weights.
  CHECK_FALSE(mha->forward(q, kv, kv).weights.defined());
}

TEST_CASE("attention dropout: active in training only; eval equals the dropout-free module") {
  Generator g1(71), g2(71);
  MultiheadAttention drop(8, 2, 0.5, true, g1), plain(8, 2, 0.0, true, g2);
  Variable x(randn({2, 5, 8}, 72, 1.0, DType::Float32));
  Tensor y_plain = plain.forward(x, x, x).output.data();
  Tensor y_train = drop.forward(x, x, x).output.data();
  CHECK(max_abs_diff(y_plain, y_train) > 1e-3);
  drop.eval();
  CHECK(max_abs_diff(y_plain, drop.forward(x, x, x).output.data()) == 0.0);
}

TEST_CASE("gradcheck: MultiheadAttention (self, cross, three inputs) with masks, w.r.t. inputs and parameters") {
  const int64_t B = 2, H = 2, L = 3, S = 4, D = 4;
  auto mha = random_attention(D, H, 81, DType::Float64);
  Tensor causal = nn::make_causal_mask(L);                                    // (3, 3)
  Tensor kpm_self = Tensor::of({0, 0, 0, 0, 0, 1}, {B, L}, DType::Bool);      // (2, 3)
  Tensor kpm_src = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);  // (2, 4)
  Tensor float_attn = Tensor::of({0.0, -INFINITY, 0.7, 0.2, -0.4, -INFINITY, 0.0, 0.0, 0.0, 1.5, 0.0, -1.0}, {L, S},
                                 DType::Float64);  // (3, 4): finite values and -inf
  const Variable& w_in = mha->in_proj_weight;
  const Variable& b_in = mha->in_proj_bias;
  const Variable& w_out = mha->out_proj->weight;

  SUBCASE("self-attention, causal + padding, output and weights") {
    auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[0], in[0], kpm_self, causal).output; };
    auto weights = [&](const std::vector<Variable>& in) {
      return mha->forward(in[0], in[0], in[0], kpm_self, causal, true).weights;
    };
    std::vector<Variable> inputs{leaf(randn({B, L, D}, 82)), w_in, b_in, w_out};
    GF_CHECK_GRADS(out, inputs);
    GF_CHECK_GRADS(weights, inputs);
  }
  SUBCASE("self-attention with float masks (attn and key padding)") {
    Tensor fa = to_float_mask(causal, DType::Float64);
    fa.flat_set(3, 0.25);  // (1, 0): a finite bias below the diagonal
    Tensor fk = Tensor::of({0.0, -0.5, 0.0, 0.3, 0.0, -INFINITY}, {B, L}, DType::Float64);
    auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[0], in[0], fk, fa).output; };
    GF_CHECK_GRADS(out, (std::vector<Variable>{leaf(randn({B, L, D}, 83)), w_in}));
  }
  SUBCASE("cross-attention with source padding and a float attn_mask") {
    auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[1], in[1], kpm_src, float_attn).output; };
    auto weights = [&](const std::vector<Variable>& in) {
      return mha->forward(in[0], in[1], in[1], kpm_src, float_attn, true).weights;
    };
    std::vector<Variable> inputs{leaf(randn({B, L, D}, 84)), leaf(randn({B, S, D}, 85)), w_in, b_in};
    GF_CHECK_GRADS(out, inputs);
    GF_CHECK_GRADS(weights, inputs);
  }
  SUBCASE("distinct query, key and value; a per-head (B*H, L, S) mask; non-contiguous inputs") {
    Tensor per_head = Tensor::zeros({B * H, L, S}, DType::Bool);
    per_head.flat_set(1, 1.0);
    per_head.flat_set(S * L + 2 * S + 3, 1.0);
    auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[1], in[2], Tensor(), per_head).output; };
    std::vector<Variable> inputs{leaf(randn({B, D, L}, 86).transpose(1, 2)), leaf(randn({B, S, D}, 87)),
                                 leaf(randn({S, B, D}, 88).transpose(0, 1)), w_out, mha->out_proj->bias};
    GF_CHECK_GRADS(out, inputs);
  }
  SUBCASE("a fully masked row") {
    Tensor all_blocked = Tensor::of({0, 0, 0, 0, 1, 1, 1, 1}, {B, S}, DType::Bool);
    auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[1], in[1], all_blocked, Tensor()).output; };
    GF_CHECK_GRADS(out, (std::vector<Variable>{leaf(randn({B, L, D}, 89)), leaf(randn({B, S, D}, 90)), w_in}));
  }
}

TEST_CASE("MultiheadAttention without bias: two parameters, and the projections are plain products") {
  Generator gen(95);
  MultiheadAttention mha(4, 2, 0.0, false, gen);
  auto named = mha.named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "in_proj_weight");
  CHECK(named[1].first == "out_proj.weight");
  CHECK_FALSE(mha.in_proj_bias.defined());
  // A zero input gives a zero output (no bias anywhere).
  Variable zero(Tensor::zeros({1, 3, 4}));
  CHECK(max_abs_diff(mha.forward(zero, zero, zero).output.data(), Tensor::zeros({1, 3, 4})) == 0.0);
  mha.to(DType::Float64);
  auto fn = [&](const std::vector<Variable>& in) { return mha.forward(in[0], in[1], in[1]).output; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({1, 2, 4}, 96)), leaf(randn({1, 3, 4}, 97)), mha.in_proj_weight}));
}

TEST_CASE("MultiheadAttention errors name the shapes") {
  auto mha = random_attention(8, 2, 91);
  Variable q(Tensor::zeros({2, 3, 8})), k(Tensor::zeros({2, 4, 8}));
  GF_CHECK_CONTAINS(error_of([] { MultiheadAttention(6, 4); }), "embed_dim 6 is not divisible by num_heads 4");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(Variable(Tensor::zeros({2, 3, 5})), k, k); }),
                    "query must be (B, len, 8), got (2, 3, 5)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, Variable(Tensor::zeros({2, 4, 6})), k); }), "key must be (B, len, 8), got (2, 4, 6)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, Variable(Tensor::zeros({4, 8}))); }), "value must be (B, len, 8), got (4, 8)");
  std::string msg = error_of([&] { mha->forward(q, k, Variable(Tensor::zeros({2, 5, 8}))); });
  GF_CHECK_CONTAINS(msg, "(2, 4, 8)");
  GF_CHECK_CONTAINS(msg, "(2, 5, 8)");
  msg = error_of([&] { mha->forward(q, Variable(Tensor::zeros({3, 4, 8})), Variable(Tensor::zeros({3, 4, 8}))); });
  GF_CHECK_CONTAINS(msg, "query (2, 3, 8)");
  GF_CHECK_CONTAINS(msg, "key (3, 4, 8)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, k, Tensor::zeros({2, 3}, DType::Bool)); }),
                    "key_padding_mask must be (2, 4), got (2, 3)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, k, Tensor(), nn::make_causal_mask(3)); }),
                    "attn_mask must be (3, 4) or (4, 3, 4), got (3, 3)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, k, Tensor(), Tensor::zeros({2, 3, 4}, DType::Bool)); }),
                    "attn_mask must be (3, 4) or (4, 3, 4), got (2, 3, 4)");
  // An integer 0/1 mask is ambiguous (block, or add 1?): refused rather than added as a bias.
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, k, Tensor::zeros({2, 4}, DType::Int64)); }),
                    "key_padding_mask must be bool or floating, got int64 (2, 4)");
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, k, k, Tensor(), Tensor::zeros({3, 4}, DType::Int64)); }),
                    "attn_mask must be bool or floating, got int64 (3, 4)");
}

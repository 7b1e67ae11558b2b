// The fused, blocked attention op (autograd/ops/attention.h): float64 gradchecks (self, cross,
// causal, key padding, fully blocked rows, grouped query, dropout), equality with the unfused ops
// (forward and gradients, dropout included, same seed), tiles that do not divide the lengths,
// results independent of the thread count, and MultiheadAttention fused against unfused.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "gradcheck_util.h"
#include "nn/masks.h"
#include "nn/multihead_attention.h"
#include "nn_test_util.h"
#include "rounding.h"
#include "tensor/parallel.h"

using namespace gf;
using namespace gf::testing;

namespace {

struct Case {
  int64_t B = 2, L = 5, S = 5, H = 2, KV = 2, dk = 3;
  Tensor kpm, attn;  // bool (B, S), (L, S) or undefined
  double p = 0.0;
  int64_t bq = 2, bk = 3;  // tiles that divide neither length
};

// (B, len, heads*d_k) -> (B, heads, len, d_k)
Variable heads_of(const Variable& x, int64_t heads) {
  return permute(reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads}), {0, 2, 1, 3});
}

// The unfused computation from ops, as MultiheadAttention::attend writes it.
Variable reference(const Variable& q, const Variable& k, const Variable& v, const Case& c, Generator& gen) {
  const int64_t G = c.H / c.KV;
  Variable qh = reshape(contiguous(heads_of(q, c.H)), {c.B, c.KV, G * c.L, c.dk});  // (B, KV, G*L, d_k)
  Variable kh = heads_of(k, c.KV), vh = heads_of(v, c.KV);                          // (B, KV, S, d_k)
  Variable s = reshape(matmul(qh * (1.0 / std::sqrt(double(c.dk))), transpose(kh, -2, -1)), {c.B, c.H, c.L, c.S});
  if (c.kpm.defined() || c.attn.defined()) {
    Tensor m = Tensor::zeros({c.B, 1, c.L, c.S}, DType::Bool);  // (B, 1, L, S)
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t l = 0; l < c.L; ++l)
        for (int64_t j = 0; j < c.S; ++j) {
          bool blocked = (c.kpm.defined() && c.kpm.at({b, j}) != 0) || (c.attn.defined() && c.attn.at({l, j}) != 0);
          m.flat_set((b * c.L + l) * c.S + j, blocked ? 1.0 : 0.0);
        }
    s = masked_fill(s, m, -INFINITY);
  }
  Variable w = softmax(s);                                // (B, H, L, S)
  if (c.p > 0) w = dropout(w, c.p, true, gen);
  Variable o = matmul(reshape(w, {c.B, c.KV, G * c.L, c.S}), vh);  // (B, KV, G*L, d_k)
  return reshape(permute(reshape(o, {c.B, c.H, c.L, c.dk}), {0, 2, 1, 3}), {c.B, c.L, c.H * c.dk});  // (B, L, H*d_k)
}

FusedAttentionOptions options_of(const Case& c, Generator& gen);

Variable fused(const Variable& q, const Variable& k, const Variable& v, const Case& c, Generator& gen) {
  return fused_attention(q, k, v, options_of(c, gen));
}

// q, k, v as narrow() views of one packed leaf (B, L, (H + 2 KV) d_k) when L == S, as the
// self-attention projection gives them; separate leaves otherwise.
std::vector<Variable> inputs_for(const Case& c, uint64_t seed, DType dt = DType::Float64) {
  if (c.L == c.S) return {leaf(randn({c.B, c.L, (c.H + 2 * c.KV) * c.dk}, seed, 1.0, dt))};
  return {leaf(randn({c.B, c.L, c.H * c.dk}, seed, 1.0, dt)), leaf(randn({c.B, c.S, c.KV * c.dk}, seed + 1, 1.0, dt)),
          leaf(randn({c.B, c.S, c.KV * c.dk}, seed + 2, 1.0, dt))};
}

FusedAttentionOptions options_of(const Case& c, Generator& gen) {
  FusedAttentionOptions o;
  o.heads = c.H, o.kv_heads = c.KV, o.scale = 1.0 / std::sqrt(double(c.dk));
  o.key_padding_mask = c.kpm, o.attn_mask = c.attn;
  o.dropout_p = c.p, o.gen = &gen;
  o.block_q = c.bq, o.block_k = c.bk;
  return o;
}

template <class F>
Variable apply(F&& f, const std::vector<Variable>& in, const Case& c, Generator& gen) {
  if (in.size() == 1) {
    const int64_t q = c.H * c.dk, kv = c.KV * c.dk;
    return f(narrow(in[0], -1, 0, q), narrow(in[0], -1, q, kv), narrow(in[0], -1, q + kv, kv), c, gen);
  }
  return f(in[0], in[1], in[2], c, gen);
}

// Gradcheck of the fused op, then fused against reference: output and every input's gradient.
void check_case(const Case& c, uint64_t seed) {
  std::vector<Variable> in = inputs_for(c, seed);
  auto fn = [&](const std::vector<Variable>& x) {
    Generator gen(77);  // the same dropout draws on every call
    return apply(fused, x, c, gen);
  };
  GF_CHECK_GRADS(fn, in);
  Tensor up = randn({c.B, c.L, c.H * c.dk}, seed + 9);  // (B, L, H*d_k): the upstream gradient
  std::vector<Tensor> outs, grads[2];
  for (int which = 0; which < 2; ++which) {
    std::vector<Variable> x;
    for (const Variable& v : in) x.push_back(leaf(v.data().clone()));
    Generator gen(77);
    Variable y = which == 0 ? apply(fused, x, c, gen) : apply(reference, x, c, gen);
    CHECK(gen.offset() == (c.p > 0 ? uint64_t(c.B * c.H * c.L * c.S) : 0u));
    sum(y * Variable(up)).backward();
    outs.push_back(y.data());
    for (const Variable& v : x) grads[which].push_back(v.grad());
  }
  CHECK(all_finite(outs[0]));
  CHECK(max_abs_diff(outs[0], outs[1]) < 1e-12);
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK(all_finite(grads[0][i]));
    CHECK(max_abs_diff(grads[0][i], grads[1][i]) < 1e-12);
  }
  if (in.size() == 1) {  // the packed op: the same numbers as on narrow() views, gradient in one tensor
    Variable x = leaf(in[0].data().clone());
    Generator gen(77);
    Variable y = fused_self_attention(x, options_of(c, gen));
    sum(y * Variable(up)).backward();
    CHECK(max_abs_diff(y.data(), outs[0]) == 0.0);
    CHECK(max_abs_diff(x.grad(), grads[0][0]) == 0.0);
    auto packed = [&](const std::vector<Variable>& x) {
      Generator g(77);
      return fused_self_attention(x[0], options_of(c, g));
    };
    GF_CHECK_GRADS(packed, in);
  }
}

Tensor bool_mask(const Shape& shape, const std::vector<int>& bits) {
  Tensor m = Tensor::zeros(shape, DType::Bool);
  for (size_t i = 0; i < bits.size(); ++i) m.flat_set(static_cast<int64_t>(i), bits[i]);
  return m;
}

}  // namespace

TEST_CASE("fused attention: self-attention, q k v read in place from one packed projection") { check_case(Case{}, 1); }

TEST_CASE("fused attention: cross-attention, L != S") {
  Case c;
  c.L = 4, c.S = 7;
  check_case(c, 2);
}

TEST_CASE("fused attention: causal mask; tiles of 2 x 3 over lengths of 7") {
  Case c;
  c.L = c.S = 7;
  c.attn = nn::make_causal_mask(7);
  check_case(c, 3);
}

TEST_CASE("fused attention: key padding, a whole key tile padded") {
  Case c;
  c.L = 4, c.S = 7;
  c.kpm = bool_mask({2, 7}, {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1});
  check_case(c, 4);
}

TEST_CASE("fused attention: fully blocked rows give output 0 and zero gradients, never NaN") {
  Case c;
  c.L = 3, c.S = 4;
  c.kpm = bool_mask({2, 4}, {0, 0, 0, 0, 1, 1, 1, 1});  // batch 1: every key padded
  c.attn = bool_mask({3, 4}, {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1});  // query 1: every key blocked
  check_case(c, 5);
  std::vector<Variable> in = inputs_for(c, 5);
  Generator gen(1);
  Variable y = apply(fused, in, c, gen);  // (2, 3, 6)
  sum(y * y).backward();
  for (int64_t j = 0; j < 6; ++j) {
    CHECK(y.data().at({1, 0, j}) == 0.0);
    CHECK(y.data().at({0, 1, j}) == 0.0);
    CHECK(in[0].grad().at({0, 1, j}) == 0.0);  // dQ of the blocked query row
  }
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t j = 0; j < 3; ++j) CHECK(in[1].grad().at({1, s, j}) == 0.0);  // dK of batch 1
}

TEST_CASE("fused attention: grouped-query (4 query heads on 2 and on 1 key/value heads)") {
  for (int64_t kv : {2, 1}) {
    Case c;
    c.H = 4, c.KV = kv, c.L = c.S = 5;
    c.attn = nn::make_causal_mask(5);
    check_case(c, 6 + kv);
    c.L = 3;
    c.attn = nn::make_causal_mask(5).narrow(0, 0, 3);  // (3, 5)
    check_case(c, 8 + kv);
  }
}

TEST_CASE("fused attention: dropout draws keep_mask's decisions, in forward and backward") {
  Case c;
  c.p = 0.3, c.L = c.S = 6;
  c.attn = nn::make_causal_mask(6);
  check_case(c, 11);
  c.L = 4, c.S = 7, c.H = 4, c.KV = 2, c.attn = Tensor();
  c.kpm = bool_mask({2, 7}, {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0});
  check_case(c, 12);
}

TEST_CASE("fused attention: float32 agrees with float64, default tiles over several blocks") {
  Case c;
  c.B = 2, c.L = 150, c.S = 140, c.H = 4, c.KV = 2, c.dk = 16, c.bq = 0, c.bk = 0, c.p = 0.1;
  c.attn = Tensor::zeros({150, 140}, DType::Bool);
  for (int64_t l = 0; l < 150; ++l)
    for (int64_t s = 0; s < 140; ++s) c.attn.flat_set(l * 140 + s, s > l + 3 ? 1.0 : 0.0);
  std::vector<Variable> in64 = inputs_for(c, 13), in32;
  for (const Variable& v : in64) in32.push_back(leaf(v.data().to(DType::Float32)));
  Generator g1(5), g2(5);
  Variable y64 = apply(fused, in64, c, g1), y32 = apply(fused, in32, c, g2);
  Generator g3(5);
  Variable r32 = apply(reference, in32, c, g3);
  CHECK(max_abs_diff(y64.data().to(DType::Float32), y32.data()) < 1e-5);
  CHECK(max_abs_diff(r32.data(), y32.data()) < 1e-5);
}

TEST_CASE("fused attention: results do not depend on the thread count") {
  Case c;
  c.B = 3, c.L = 130, c.S = 130, c.H = 4, c.KV = 2, c.dk = 16, c.bq = 0, c.bk = 0, c.p = 0.1;
  c.kpm = Tensor::zeros({3, 130}, DType::Bool);
  for (int64_t s = 100; s < 130; ++s) c.kpm.flat_set(130 + s, 1.0);
  std::vector<Tensor> runs[2];
  for (int t = 0; t < 2; ++t) {
    set_num_threads(t == 0 ? 1 : 2);
    std::vector<Variable> in = inputs_for(c, 14, DType::Float32);
    Generator gen(3);
    Variable y = apply(fused, in, c, gen);
    sum(y * y).backward();
    runs[t] = {y.data(), in[0].grad()};
  }
  set_num_threads(0);
  CHECK(max_abs_diff(runs[0][0], runs[1][0]) == 0.0);
  CHECK(max_abs_diff(runs[0][1], runs[1][1]) == 0.0);
}

// The one-tile path (default blocks, queries and keys at most 64: attention.cpp's kOneTile) on every
// case above: float64 gradchecks, and the unfused ops' numbers to 1e-12.
TEST_CASE("fused attention: the one-tile path passes the tiled path's cases") {
  auto one_tile = [](Case c) {
    c.bq = c.bk = 0;
    return c;
  };
  check_case(one_tile(Case{}), 21);
  Case c;
  c.L = 4, c.S = 7;
  c.kpm = bool_mask({2, 7}, {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1});
  check_case(one_tile(c), 22);
  c.L = 3, c.S = 4;  // fully blocked rows
  c.kpm = bool_mask({2, 4}, {0, 0, 0, 0, 1, 1, 1, 1});
  c.attn = bool_mask({3, 4}, {0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1});
  check_case(one_tile(c), 23);
  for (int64_t kv : {2, 1}) {  // grouped query, causal, dropout
    Case g;
    g.H = 4, g.KV = kv, g.L = g.S = 6, g.p = 0.3;
    g.attn = nn::make_causal_mask(6);
    check_case(one_tile(g), 24 + kv);
  }
  Case wide;  // the largest one tile: 64 queries and keys, d_k 20 (not a multiple of 16), one key padded
  wide.B = 1, wide.H = wide.KV = 1, wide.L = wide.S = 64, wide.dk = 20, wide.p = 0.1;
  wide.kpm = Tensor::zeros({1, 64}, DType::Bool);
  wide.kpm.flat_set(63, 1.0);
  check_case(one_tile(wide), 27);
}

TEST_CASE("fused attention: the one-tile path against the tiled path in float32, the same for any thread count") {
  Case c;
  c.B = 5, c.L = 17, c.S = 33, c.H = 4, c.KV = 2, c.dk = 64, c.p = 0.1;
  c.kpm = Tensor::zeros({5, 33}, DType::Bool);
  for (int64_t s = 20; s < 33; ++s) c.kpm.flat_set(2 * 33 + s, 1.0);
  std::vector<Variable> in = inputs_for(c, 31, DType::Float32);
  Tensor up = randn({c.B, c.L, c.H * c.dk}, 32, 1.0, DType::Float32);
  auto run = [&](int64_t bq, int64_t bk, int threads) {
    set_num_threads(threads);
    Case t = c;
    t.bq = bq, t.bk = bk;
    std::vector<Variable> x;
    for (const Variable& v : in) x.push_back(leaf(v.data().clone()));
    Generator gen(9);
    Variable y = apply(fused, x, t, gen);
    sum(y * Variable(up)).backward();
    set_num_threads(0);
    std::vector<Tensor> r{y.data()};
    for (const Variable& v : x) r.push_back(v.grad());
    return r;
  };
  const auto one = run(0, 0, 2), one1 = run(0, 0, 1), tiled = run(32, 64, 2);
  for (size_t i = 0; i < one.size(); ++i) {
    CHECK(max_abs_diff(one[i], one1[i]) == 0.0);
    CHECK(max_abs_diff(one[i], tiled[i]) < 1e-5 * (1.0 + max_abs(tiled[i])));
  }
}

TEST_CASE("fused attention: bad shapes and masks are errors naming the op") {
  Case c;
  std::vector<Variable> in = inputs_for(c, 15);
  Generator gen(1);
  c.kpm = Tensor::zeros({2, 4}, DType::Bool);
  GF_CHECK_CONTAINS(error_of([&] { apply(fused, in, c, gen); }), "attention: key_padding_mask must be (2, 5)");
  c.kpm = Tensor();
  c.KV = 4;
  GF_CHECK_CONTAINS(error_of([&] { fused(narrow(in[0], -1, 0, 6), narrow(in[0], -1, 6, 6), narrow(in[0], -1, 6, 6), c, gen); }),
                    "attention:");
}

namespace {

// The module fused and unfused on one input, the same seed: output and gradients of x and of the
// parameters.
void compare_module(int64_t kv, double p, const Tensor& kpm, const Tensor& attn) {
  const int64_t B = 2, L = 6, D = 8, H = 4;
  Generator init(21);
  auto mha = std::make_shared<nn::MultiheadAttention>(D, H, p, true, init, kv);
  mha->to(DType::Float64);
  Tensor x0 = randn({B, L, D}, 22);
  std::vector<Tensor> res[2];
  for (int which = 0; which < 2; ++which) {
    mha->fused = which == 0;
    mha->zero_grad();
    Variable x = leaf(x0.clone());
    default_generator().seed(99);
    Variable y = mha->forward(x, x, x, kpm, attn).output;  // (B, L, D)
    sum(y * y).backward();
    res[which] = {y.data(), x.grad()};
    for (const auto& [name, prm] : mha->named_parameters()) res[which].push_back(prm.grad());
  }
  for (size_t i = 0; i < res[0].size(); ++i) {
    CHECK(all_finite(res[0][i]));
    CHECK(max_abs_diff(res[0][i], res[1][i]) < 1e-12);
  }
}

}  // namespace

TEST_CASE("MultiheadAttention: fused and unfused agree, dropout included (same seed)") {
  Tensor kpm = bool_mask({2, 6}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1});
  for (int64_t kv : {0, 2})
    for (double p : {0.0, 0.25}) {
      compare_module(kv, p, Tensor(), Tensor());
      compare_module(kv, p, kpm, nn::make_causal_mask(6));
    }
}

TEST_CASE("MultiheadAttention: weights_peek keeps the fused op; it sees the weights need_weights returns") {
  Generator init(31);
  auto mha = std::make_shared<nn::MultiheadAttention>(8, 2, 0.2, true, init);
  mha->to(DType::Float64);
  Variable x(randn({2, 5, 8}, 32));
  Tensor causal = nn::make_causal_mask(5);
  default_generator().seed(4);
  Tensor plain = mha->forward(x, x, x, Tensor(), causal).output.data();
  Tensor seen;
  mha->weights_peek = [&](const Tensor& w) { seen = w; };
  default_generator().seed(4);
  Tensor peeked = mha->forward(x, x, x, Tensor(), causal).output.data();
  CHECK(max_abs_diff(plain, peeked) == 0.0);  // same op, same dropout draws
  REQUIRE(seen.defined());
  mha->weights_peek = nullptr;
  Tensor w = mha->forward(x, x, x, Tensor(), causal, true).weights.data();  // (2, 2, 5, 5)
  CHECK(max_abs_diff(seen, w) < 1e-15);
}

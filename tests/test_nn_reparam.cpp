// MultiheadAttention's experiment hooks for the entropy and attribution labs: σReparam on the
// query and key weights (Zhai et al. 2023) and weights_transform (counterfactual attention).
// σReparam: the function at initialisation, the effective spectral norm = γ, when the power
// iteration advances, the new parameters and buffers, float64 gradchecks, grouped-query heads.
// weights_transform: identity, uniform, the shape check.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "gradcheck_util.h"
#include "lab/common.h"
#include "nn/linear.h"
#include "nn/masks.h"
#include "nn/multihead_attention.h"
#include "nn_test_util.h"

using namespace gf;
using namespace gf::testing;
using nn::MultiheadAttention;

namespace {

std::shared_ptr<MultiheadAttention> make(int64_t d, int64_t h, uint64_t seed, int64_t kv = 0, DType dt = DType::Float64) {
  Generator gen(seed);
  auto mha = std::make_shared<MultiheadAttention>(d, h, 0.0, true, gen, kv);
  mha->to(dt);
  return mha;
}

// The largest singular value of w (rows, cols), by many power-iteration steps in double.
double top_singular(const Tensor& w) { return lab::spectral_norm(w, 2000); }

}  // namespace

TEST_CASE("σReparam starts from the function it replaces: γ = σ(W) at initialisation, self- and cross-attention") {
  auto plain = make(16, 4, 3), reparam = make(16, 4, 3);
  reparam->use_sigma_reparam();
  plain->eval(), reparam->eval();
  Variable x(randn({2, 5, 16}, 4)), m(randn({2, 7, 16}, 5));
  CHECK(max_abs_diff(plain->forward(x, x, x).output.data(), reparam->forward(x, x, x).output.data()) < 1e-9);
  CHECK(max_abs_diff(plain->forward(x, m, m).output.data(), reparam->forward(x, m, m).output.data()) < 1e-9);
  // γ is W's spectral norm.
  CHECK(reparam->parameter("q_gamma").data().flat_get(0) == doctest::Approx(top_singular(plain->projection_weight(0).data())).epsilon(1e-6));
  CHECK(reparam->parameter("k_gamma").data().flat_get(0) == doctest::Approx(top_singular(plain->projection_weight(1).data())).epsilon(1e-6));
}

TEST_CASE("σReparam: the effective weight's spectral norm is γ whatever W's, once the power iteration has followed W") {
  auto mha = make(16, 2, 7);
  mha->use_sigma_reparam();
  Tensor w = mha->in_proj_weight.data();  // (48, 16): grow W_q and W_k tenfold, as a run at a high rate would
  for (int64_t i = 0; i < 32 * 16; ++i) w.flat_set(i, 10 * w.flat_get(i));
  Variable x(randn({1, 3, 16}, 8));
  for (int i = 0; i < 200; ++i) mha->forward(x, x, x);  // training mode, graph recorded: one step each
  NoGradGuard ng;
  const double gq = mha->parameter("q_gamma").data().flat_get(0), gk = mha->parameter("k_gamma").data().flat_get(0);
  CHECK(top_singular(mha->projection_weight(0).data()) == doctest::Approx(gq).epsilon(1e-6));
  CHECK(top_singular(mha->projection_weight(1).data()) == doctest::Approx(gk).epsilon(1e-6));
  CHECK(top_singular(Tensor(w).narrow(0, 0, 16)) > 5 * gq);
}

TEST_CASE("σReparam's power iteration advances only on training forwards that record a graph") {
  auto mha = make(8, 2, 9);
  mha->use_sigma_reparam();
  Tensor w = mha->in_proj_weight.data();
  for (int64_t i = 0; i < 8 * 8; ++i) w.flat_set(i, w.flat_get(i) + 0.5 * std::sin(static_cast<double>(i)));  // W_q moves
  const Tensor u0 = mha->state_dict().at("q_sigma_u").clone();
  Variable x(randn({1, 3, 8}, 10));
  {
    NoGradGuard ng;
    mha->forward(x, x, x);  // a probe
  }
  CHECK(max_abs_diff(mha->state_dict().at("q_sigma_u"), u0) == 0.0);
  mha->eval();
  mha->forward(x, x, x);
  CHECK(max_abs_diff(mha->state_dict().at("q_sigma_u"), u0) == 0.0);
  mha->train();
  mha->forward(x, x, x);
  CHECK(max_abs_diff(mha->state_dict().at("q_sigma_u"), u0) > 1e-6);
}

TEST_CASE("σReparam adds q_gamma, k_gamma and their power-iteration vectors, once") {
  auto mha = make(8, 2, 11);
  const size_t before = mha->parameters().size();
  mha->use_sigma_reparam();
  CHECK(mha->sigma_reparam());
  CHECK(mha->parameters().size() == before + 2);
  const auto sd = mha->state_dict();
  for (const char* key : {"q_gamma", "k_gamma", "q_sigma_u", "k_sigma_u"}) CHECK(sd.count(key) == 1);
  CHECK(sd.at("q_gamma").numel() == 1);
  CHECK(sd.at("k_sigma_u").numel() == 8);
  GF_CHECK_CONTAINS(error_of([&] { mha->use_sigma_reparam(); }), "already on");
  GF_CHECK_CONTAINS(error_of([&] { mha->projection_weight(3); }), "not 0 (query), 1 (key) or 2 (value)");
}

TEST_CASE("gradcheck: attention with σReparam, w.r.t. the input, the projection weights and γ") {
  auto mha = make(4, 2, 13);
  mha->use_sigma_reparam();
  mha->eval();  // u held fixed, so that the function is the same at every finite-difference point
  const Tensor causal = nn::make_causal_mask(3);
  auto out = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[0], in[0], Tensor(), causal).output; };
  auto cross = [&](const std::vector<Variable>& in) { return mha->forward(in[0], in[1], in[1]).output; };
  GF_CHECK_GRADS(out, (std::vector<Variable>{leaf(randn({2, 3, 4}, 14)), mha->in_proj_weight, mha->parameter("q_gamma"), mha->parameter("k_gamma")}));
  GF_CHECK_GRADS(cross, (std::vector<Variable>{leaf(randn({2, 3, 4}, 15)), leaf(randn({2, 5, 4}, 16)), mha->in_proj_weight}));
}

TEST_CASE("σReparam with grouped-query heads: the same function at initialisation, and gradients reach k_proj") {
  auto plain = make(8, 4, 17, 2), reparam = make(8, 4, 17, 2);
  reparam->use_sigma_reparam();
  Variable x(randn({2, 4, 8}, 18));
  CHECK(max_abs_diff(plain->forward(x, x, x).output.data(), reparam->forward(x, x, x).output.data()) < 1e-9);
  reparam->eval();
  auto out = [&](const std::vector<Variable>& in) { return reparam->forward(in[0], in[0], in[0]).output; };
  GF_CHECK_GRADS(out, (std::vector<Variable>{leaf(randn({1, 3, 8}, 19)), reparam->k_proj->weight, reparam->parameter("k_gamma")}));
}

TEST_CASE("weights_transform: the identity changes nothing, uniform weights average the values, a wrong shape is an error") {
  auto mha = make(8, 2, 21);
  Variable q(randn({2, 3, 8}, 22)), m(randn({2, 5, 8}, 23));
  const Tensor plain = mha->forward(q, m, m).output.data();
  mha->weights_transform = [](const Variable& w) { return w; };
  CHECK(max_abs_diff(plain, mha->forward(q, m, m).output.data()) < 1e-12);
  // Uniform weights: every query's output is out_proj of the mean of the values.
  mha->weights_transform = [](const Variable& w) { return Variable(Tensor::full(w.shape(), 1.0 / static_cast<double>(w.size(3)), w.dtype())); };
  const nn::AttentionResult u = mha->forward(q, m, m, Tensor(), Tensor(), true);
  CHECK(max_abs_diff(u.weights.data(), Tensor::full({2, 2, 3, 5}, 0.2, DType::Float64)) < 1e-15);
  const Tensor v = mha->project_kv(m).second.data();  // (2, 2, 5, 4)
  Tensor merged = Tensor::zeros({2, 3, 8}, DType::Float64);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = 0; j < 4; ++j) {
        double s = 0;
        for (int64_t k = 0; k < 5; ++k) s += v.select(0, b).select(0, h).select(0, k).flat_get(j) / 5;
        for (int64_t l = 0; l < 3; ++l) merged.flat_set((b * 3 + l) * 8 + h * 4 + j, s);
      }
  CHECK(max_abs_diff(u.output.data(), mha->out_proj->forward(Variable(merged)).data()) < 1e-12);
  mha->weights_transform = [](const Variable& w) { return Variable(Tensor::zeros({1}, w.dtype())); };
  GF_CHECK_CONTAINS(error_of([&] { mha->forward(q, m, m); }), "weights_transform returned");
}

TEST_CASE("σReparam on every projection (all): value and output weights too, the same function at initialisation") {
  auto plain = make(8, 2, 31), reparam = make(8, 2, 31);
  reparam->use_sigma_reparam(true);
  const auto sd = reparam->state_dict();
  for (const char* key : {"q_gamma", "k_gamma", "v_gamma", "v_sigma_u", "out_proj.sigma_gamma", "out_proj.sigma_u"}) CHECK(sd.count(key) == 1);
  CHECK(reparam->out_proj->sigma_reparam());
  Variable x(randn({2, 4, 8}, 32));
  CHECK(max_abs_diff(plain->forward(x, x, x).output.data(), reparam->forward(x, x, x).output.data()) < 1e-9);
  reparam->eval();
  auto out = [&](const std::vector<Variable>& in) { return reparam->forward(in[0], in[0], in[0]).output; };
  GF_CHECK_GRADS(out, (std::vector<Variable>{leaf(randn({1, 3, 8}, 33)), reparam->in_proj_weight, reparam->parameter("v_gamma"),
                                             reparam->out_proj->weight, reparam->out_proj->parameter("sigma_gamma")}));
}

TEST_CASE("Linear with σReparam: the same function at first, spectral norm γ after W grows, gradients to W and γ") {
  Generator g1(41), g2(41);
  nn::Linear plain(6, 5, true, g1), reparam(6, 5, true, g2);
  plain.to(DType::Float64), reparam.to(DType::Float64);
  reparam.use_sigma_reparam();
  Variable x(randn({3, 6}, 42));
  CHECK(max_abs_diff(plain.forward(x).data(), reparam.forward(x).data()) < 1e-12);
  Tensor w = reparam.weight.data();
  for (int64_t i = 0; i < w.numel(); ++i) w.flat_set(i, 7 * w.flat_get(i) + 0.1 * std::cos(static_cast<double>(i)));
  for (int i = 0; i < 100; ++i) reparam.forward(x);
  {
    NoGradGuard ng;
    CHECK(top_singular(reparam.effective_weight().data()) == doctest::Approx(reparam.parameter("sigma_gamma").data().flat_get(0)).epsilon(1e-6));
  }
  reparam.eval();
  auto f = [&](const std::vector<Variable>& in) { return reparam.forward(in[0]); };
  GF_CHECK_GRADS(f, (std::vector<Variable>{leaf(randn({2, 6}, 43)), reparam.weight, reparam.bias, reparam.parameter("sigma_gamma")}));
  GF_CHECK_CONTAINS(error_of([&] { reparam.use_sigma_reparam(); }), "already on");
}

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>
#include <tuple>

#include "autograd/ops/arith.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/layer_norm.h"
#include "gradcheck_util.h"
#include "tensor/kernels/layer_norm.h"
#include "tensor/kernels/random.h"
#include "tensor/parallel.h"

using namespace gf;
using namespace gf::testing;

TEST_CASE("layer_norm forward values") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    // mean 2.5, biased variance 1.25, rstd = 1 / sqrt(1.25 + 1e-5)
    Tensor x = Tensor::of({1, 2, 3, 4, 10, 10, 10, 10}, {2, 4}, dt);
    const double rstd = 1.0 / std::sqrt(1.25 + 1e-5);
    kernels::LayerNormResult r = kernels::layer_norm(x, Tensor(), Tensor(), 1e-5);
    CHECK(r.out.at({0, 0}) == doctest::Approx(-1.5 * rstd).epsilon(1e-6));
    CHECK(r.out.at({0, 1}) == doctest::Approx(-0.5 * rstd).epsilon(1e-6));
    CHECK(r.out.at({0, 3}) == doctest::Approx(1.5 * rstd).epsilon(1e-6));
    CHECK(r.mean.shape() == Shape{2});
    CHECK(r.mean.at({0}) == doctest::Approx(2.5));
    CHECK(r.rstd.at({0}) == doctest::Approx(rstd).epsilon(1e-6));
    // A constant row normalises to 0 (rstd = 1/sqrt(eps)), not NaN.
    CHECK(r.out.at({1, 2}) == 0.0);
    CHECK(r.rstd.at({1}) == doctest::Approx(1.0 / std::sqrt(1e-5)).epsilon(1e-5));

    // Affine: y * weight + bias.
    Variable y = layer_norm(Variable(x), Variable(Tensor::of({1, 2, 1, 1}, {4}, dt)), Variable(Tensor::of({0, 0, 1, 0}, {4}, dt)));
    CHECK(y.data().at({0, 1}) == doctest::Approx(-1.0 * rstd).epsilon(1e-6));
    CHECK(y.data().at({0, 2}) == doctest::Approx(0.5 * rstd + 1).epsilon(1e-6));
    CHECK(y.data().at({1, 2}) == doctest::Approx(1.0));
  }
}

TEST_CASE("layer_norm is accurate for rows with a large mean (float32)") {
  // Values 10000 + noise of spread 0.01: a float32 mean is off by up to 5e-4 (half an ulp of
  // 10000), i.e. 5% of the spread, so x - mean must be formed in double.
  Tensor x32 = randn({8, 64}, 1, 0.01, DType::Float32);
  for (int64_t i = 0; i < x32.numel(); ++i) x32.flat_set(i, x32.flat_get(i) + 10000.0);
  Tensor y32 = kernels::layer_norm(x32, Tensor(), Tensor(), 1e-5).out;
  Tensor y64 = kernels::layer_norm(x32.to(DType::Float64), Tensor(), Tensor(), 1e-5).out;  // same inputs, exactly
  double worst = 0;
  for (int64_t i = 0; i < y64.numel(); ++i) worst = std::max(worst, std::abs(y64.flat_get(i) - y32.flat_get(i)));
  CHECK(worst < 1e-5);
  // The backward too: gradient of sum(y * g) for a fixed g.
  Tensor g = randn({8, 64}, 2, 1.0, DType::Float64);
  auto r64 = kernels::layer_norm(x32.to(DType::Float64), Tensor(), Tensor(), 1e-5);
  auto r32 = kernels::layer_norm(x32, Tensor(), Tensor(), 1e-5);
  Tensor gx64 = kernels::layer_norm_backward(g, x32.to(DType::Float64), r64.mean, r64.rstd, Tensor(), true, false, false).x;
  Tensor gx32 = kernels::layer_norm_backward(g.to(DType::Float32), x32, r32.mean, r32.rstd, Tensor(), true, false, false).x;
  worst = 0;
  double scale = 0;
  for (int64_t i = 0; i < gx64.numel(); ++i) {
    worst = std::max(worst, std::abs(gx64.flat_get(i) - gx32.flat_get(i)));
    scale = std::max(scale, std::abs(gx64.flat_get(i)));
  }
  CHECK(worst < 1e-5 * scale);
}

TEST_CASE("gradcheck: layer_norm with and without affine parameters") {
  auto ln = [](const std::vector<Variable>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); };
  auto ln_plain = [](const std::vector<Variable>& in) { return layer_norm(in[0], Variable(), Variable(), 1e-5); };
  auto ln_w = [](const std::vector<Variable>& in) { return layer_norm(in[0], in[1], Variable(), 1e-3); };
  auto ln_b = [](const std::vector<Variable>& in) { return layer_norm(in[0], Variable(), in[1], 1e-5); };
  GF_CHECK_GRADS(ln, (std::vector<Variable>{leaf(randn({3, 5}, 10)), leaf(randn({5}, 11)), leaf(randn({5}, 12))}));
  GF_CHECK_GRADS(ln, (std::vector<Variable>{leaf(randn({2, 3, 4}, 13, 3.0)), leaf(randn({4}, 14)), leaf(randn({4}, 15))}));
  GF_CHECK_GRADS(ln_plain, (std::vector<Variable>{leaf(randn({4, 6}, 16))}));
  GF_CHECK_GRADS(ln_w, (std::vector<Variable>{leaf(randn({4, 6}, 17)), leaf(randn({6}, 18))}));
  GF_CHECK_GRADS(ln_b, (std::vector<Variable>{leaf(randn({4, 6}, 19)), leaf(randn({6}, 20))}));
  // Non-contiguous input; parameters only (input constant).
  GF_CHECK_GRADS(ln, (std::vector<Variable>{leaf(randn({5, 3}, 21).transpose(0, 1)), leaf(randn({5}, 22)), leaf(randn({5}, 23))}));
  GF_CHECK_GRADS(ln, (std::vector<Variable>{Variable(randn({3, 5}, 24)), leaf(randn({5}, 25)), leaf(randn({5}, 26))}));
  // Followed by more ops, so the upstream gradient is not uniform.
  auto chain = [](const std::vector<Variable>& in) { return layer_norm(in[0] * in[0], in[1], Variable()) * in[0]; };
  GF_CHECK_GRADS(chain, (std::vector<Variable>{leaf(randn({2, 5}, 27)), leaf(randn({5}, 28))}));
}

TEST_CASE("layer_norm backward: weight and bias gradients are the same for any thread count") {
  // Enough rows for several blocks of the parallel reduction.
  Tensor x = randn({2000, 48}, 30, 1.0, DType::Float32), g = randn({2000, 48}, 31, 1.0, DType::Float32);
  Tensor w = randn({48}, 32, 1.0, DType::Float32);
  kernels::LayerNormResult r = kernels::layer_norm(x, w, Tensor(), 1e-5);
  set_num_threads(1);
  kernels::LayerNormGrads one = kernels::layer_norm_backward(g, x, r.mean, r.rstd, w, true, true, true);
  set_num_threads(2);
  kernels::LayerNormGrads two = kernels::layer_norm_backward(g, x, r.mean, r.rstd, w, true, true, true);
  set_num_threads(0);
  CHECK(one.weight.to_vector<float>() == two.weight.to_vector<float>());
  CHECK(one.bias.to_vector<float>() == two.bias.to_vector<float>());
  CHECK(one.x.to_vector<float>() == two.x.to_vector<float>());
  // And they match a float64 computation: grad_bias = column sums of g.
  Tensor gd = g.to(DType::Float64);
  for (int64_t j = 0; j < 48; j += 7) {
    double s = 0;
    for (int64_t i = 0; i < 2000; ++i) s += gd.at({i, j});
    CHECK(one.bias.at({j}) == doctest::Approx(s).epsilon(1e-5));
  }
  // Only the requested gradients are computed.
  kernels::LayerNormGrads only_x = kernels::layer_norm_backward(g, x, r.mean, r.rstd, w, true, false, false);
  CHECK(only_x.x.defined());
  CHECK_FALSE(only_x.weight.defined());
  CHECK_FALSE(only_x.bias.defined());
}

TEST_CASE("layer_norm errors name the shapes") {
  Variable x(Tensor::zeros({2, 5, 8}));
  CHECK_THROWS_WITH(layer_norm(x, Variable(Tensor::ones({7}))),
                    "layer_norm: weight (7,) does not match the last dim of input (2, 5, 8)");
  CHECK_THROWS_WITH(layer_norm(x, Variable(), Variable(Tensor::ones({8, 1}))),
                    "layer_norm: bias (8, 1) does not match the last dim of input (2, 5, 8)");
  CHECK_THROWS_WITH(layer_norm(Variable(Tensor::zeros({3, 0}))), doctest::Contains("has an empty last dim"));
}

TEST_CASE("layer_norm keeps its output, not its input, unless the weight has a zero") {
  // x = a * 2 is an intermediate: once forward is done only what layer_norm keeps holds it.
  auto run = [](const Tensor& w_init, bool with_bias) {
    Variable a(randn({6, 9}, 61), true), w(w_init, true), b = with_bias ? Variable(randn({9}, 62), true) : Variable();
    Variable x = a * 2.0;  // (6, 9)
    const std::weak_ptr<Storage> input = x.data().storage();
    Variable y = layer_norm(x, w, b, 1e-5);
    x = Variable();
    const bool input_kept = !input.expired();
    y.backward(randn({6, 9}, 63));
    return std::make_tuple(input_kept, a.grad().to_vector<double>(), w.grad().to_vector<double>());
  };
  Tensor w = randn({9}, 64);
  Tensor w_zero = w.clone();
  w_zero.flat_set(4, 0.0);
  for (bool with_bias : {true, false}) {
    auto [kept_y, ga, gw] = run(w, with_bias);
    CHECK_FALSE(kept_y);  // invertible weight: the input is freed after forward
    auto [kept_x, ga0, gw0] = run(w_zero, with_bias);
    CHECK(kept_x);  // a zero weight: (y - bias) / weight cannot give the input back, so it is kept
  }
  // Both forms give the input path's gradients: the kernel from the output against the one from the input.
  Tensor x = randn({5, 7}, 65, 3.0), g = randn({5, 7}, 66), wt = randn({7}, 67), bt = randn({7}, 68);
  kernels::LayerNormResult r = kernels::layer_norm(x, wt, bt, 1e-5);
  kernels::LayerNormGrads from_x = kernels::layer_norm_backward(g, x, r.mean, r.rstd, wt, true, true, true);
  kernels::LayerNormGrads from_y = kernels::layer_norm_backward_from_output(g, r.out, r.rstd, wt, bt, true, true, true);
  auto worst = [](const Tensor& p, const Tensor& q) {
    double d = 0;
    for (int64_t i = 0; i < p.numel(); ++i) d = std::max(d, std::abs(p.flat_get(i) - q.flat_get(i)));
    return d;
  };
  CHECK(worst(from_x.x, from_y.x) < 1e-12);
  CHECK(worst(from_x.weight, from_y.weight) < 1e-12);
  CHECK(worst(from_x.bias, from_y.bias) < 1e-12);
  // gradcheck through both forms (the zero-weight one falls back to the input).
  auto ln = [](const std::vector<Variable>& in) { return layer_norm(in[0] * 1.0, in[1], in[2], 1e-5); };
  GF_CHECK_GRADS(ln, (std::vector<Variable>{leaf(randn({4, 6}, 69)), leaf(randn({6}, 70)), leaf(randn({6}, 71))}));
  Tensor wz = randn({6}, 72);
  wz.flat_set(2, 0.0);
  GF_CHECK_GRADS(ln, (std::vector<Variable>{leaf(randn({4, 6}, 73)), leaf(wz), leaf(randn({6}, 74))}));
}

TEST_CASE("add_layer_norm: the kernel gives the bits of add, dropout_forward and layer_norm in turn, and the same draws") {
  for (DType dt : {DType::Float32, DType::Float64})
    for (double p : {0.0, 0.1, 1.0})
      for (bool affine : {true, false}) {
        INFO("dtype " << dtype_name(dt) << " p " << p << " affine " << affine);
        Tensor x = randn({37, 3, 48}, 70, 1.0, dt), y = randn({37, 3, 48}, 71, 2.0, dt);  // rows split unevenly
        Tensor w = affine ? randn({48}, 72, 1.0, dt) : Tensor(), b = affine ? randn({48}, 73, 1.0, dt) : Tensor();
        const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
        Generator g1(5), g2(5);
        Tensor k1, k2;
        kernels::LayerNormResult fused = kernels::add_layer_norm(x, y, p, scale, g1, k1, w, b, 1e-5);
        kernels::LayerNormResult plain = kernels::add_layer_norm_reference(x, y, p, scale, g2, k2, w, b, 1e-5);
        CHECK(g1.offset() == g2.offset());
        CHECK(fused.out.to_vector<double>() == plain.out.to_vector<double>());
        CHECK(fused.mean.to_vector<double>() == plain.mean.to_vector<double>());
        CHECK(fused.rstd.to_vector<double>() == plain.rstd.to_vector<double>());
        REQUIRE(k1.defined() == k2.defined());
        if (k1.defined()) CHECK(k1.to_vector<double>() == k2.to_vector<double>());
        // The backward: dx as layer_norm_backward_from_output gives, dy as apply_mask(dx) gives, one pass.
        Tensor g = randn({37, 3, 48}, 74, 1.0, dt);
        kernels::AddLayerNormGrads gr = kernels::add_layer_norm_backward(g, fused.out, fused.rstd, w, b, k1, scale, true, true, affine, affine);
        kernels::LayerNormGrads ln = kernels::layer_norm_backward_from_output(g, plain.out, plain.rstd, w, b, true, affine, affine);
        CHECK(gr.x.to_vector<double>() == ln.x.to_vector<double>());
        const Tensor dy = k1.defined() ? kernels::apply_mask(ln.x, k1, scale) : ln.x;
        CHECK(gr.y.to_vector<double>() == dy.to_vector<double>());
        if (affine) {
          CHECK(gr.weight.to_vector<double>() == ln.weight.to_vector<double>());
          CHECK(gr.bias.to_vector<double>() == ln.bias.to_vector<double>());
        }
      }
}

TEST_CASE("add_layer_norm: the op's values and gradients are those of layer_norm(x + dropout(y)), the same for any thread count") {
  for (double p : {0.0, 0.3}) {
    Tensor xt = randn({5, 7, 16}, 80, 1.0, DType::Float32), yt = randn({5, 7, 16}, 81, 1.0, DType::Float32);
    Tensor wt = randn({16}, 82, 1.0, DType::Float32), bt = randn({16}, 83, 1.0, DType::Float32), up = randn({5, 7, 16}, 84, 1.0, DType::Float32);
    auto run = [&](bool fused, int threads) {
      set_num_threads(threads);
      Variable x(xt.clone(), true), y(yt.clone(), true), w(wt.clone(), true), b(bt.clone(), true);
      Generator g(11);
      Variable out = fused ? add_layer_norm(x, y, p, true, g, w, b, 1e-5) : layer_norm(x + dropout(y, p, true, g), w, b, 1e-5);
      out.backward(up);
      set_num_threads(0);
      return std::vector<std::vector<double>>{out.data().to_vector<double>(), x.grad().to_vector<double>(), y.grad().to_vector<double>(),
                                              w.grad().to_vector<double>(), b.grad().to_vector<double>(), {double(g.offset())}};
    };
    const auto plain = run(false, 2);
    CHECK(run(true, 2) == plain);
    CHECK(run(true, 1) == plain);
  }
  // Not training: no draws, the plain sum.
  Generator g(3);
  Variable x(randn({4, 8}, 85)), y(randn({4, 8}, 86));
  CHECK(add_layer_norm(x, y, 0.5, false, g).data().to_vector<double>() == layer_norm(x + y).data().to_vector<double>());
  CHECK(g.offset() == 0);
  CHECK_THROWS_WITH(add_layer_norm(x, Variable(randn({4, 7}, 87)), 0.1, true, g),
                    "add_layer_norm: residual (4, 8) and sub-layer output (4, 7) differ in shape");
}

TEST_CASE("gradcheck: add_layer_norm against its unfused composition, with and without dropout") {
  for (double p : {0.0, 0.4}) {
    // The generator is reseeded per call, so every evaluation drops the same elements.
    auto fused = [p](const std::vector<Variable>& in) {
      static Generator g;
      g.seed(3);
      return add_layer_norm(in[0], in[1] * in[1], p, true, g, in[2], in[3], 1e-5) * in[0];
    };
    auto plain = [p](const std::vector<Variable>& in) {
      static Generator g;
      g.seed(3);
      return layer_norm(in[0] + dropout(in[1] * in[1], p, true, g), in[2], in[3], 1e-5) * in[0];
    };
    const std::vector<Variable> in{leaf(randn({3, 6}, 90)), leaf(randn({3, 6}, 91)), leaf(randn({6}, 92)), leaf(randn({6}, 93))};
    GF_CHECK_GRADS(fused, in);
    GF_CHECK_GRADS(plain, in);
    // The two compositions agree to float64 rounding in value and gradient.
    std::vector<Variable> a, b;
    for (const auto& v : in) a.push_back(leaf(v.data().clone())), b.push_back(leaf(v.data().clone()));
    Variable fa = fused(a), fb = plain(b);
    Tensor up = randn({3, 6}, 94);
    fa.backward(up);
    fb.backward(up);
    for (size_t i = 0; i < in.size(); ++i) {
      const auto ga = a[i].grad().to_vector<double>(), gb = b[i].grad().to_vector<double>();
      for (size_t j = 0; j < ga.size(); ++j) CHECK(ga[j] == doctest::Approx(gb[j]).epsilon(1e-12));
    }
  }
}

TEST_CASE("add_layer_norm with a zero weight element runs the three ops (its output cannot be undone)") {
  Tensor w = randn({6}, 95);
  w.flat_set(2, 0.0);
  Variable x(randn({3, 6}, 96), true), y(randn({3, 6}, 97), true), wv(w, true);
  Generator g(4);
  Variable out = add_layer_norm(x, y, 0.2, true, g, wv);
  CHECK(std::string(out.grad_fn()->name()) == "layer_norm");
  Generator g2(4);
  Variable x2(x.data().clone(), true), y2(y.data().clone(), true), w2(w.clone(), true);
  CHECK(out.data().to_vector<double>() == layer_norm(x2 + dropout(y2, 0.2, true, g2), w2).data().to_vector<double>());
}

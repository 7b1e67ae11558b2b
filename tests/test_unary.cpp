#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/unary.h"
#include "gradcheck_util.h"
#include "tensor/kernels/unary.h"

using namespace gf;
using namespace gf::testing;

namespace {
// A float64 (r, c) leaf that is the transpose of a (c, r) tensor: non-contiguous.
Variable transposed_leaf(int64_t r, int64_t c, uint64_t seed, double lo = 0, double scale = 1) {
  Tensor t = randn({c, r}, seed, scale);
  if (lo > 0)
    for (int64_t i = 0; i < t.numel(); ++i) t.flat_set(i, lo + std::abs(t.flat_get(i)));
  Variable v = leaf(t.transpose(0, 1));
  REQUIRE_FALSE(v.data().is_contiguous());
  return v;
}
}  // namespace

TEST_CASE("unary forward values") {
  Variable x(Tensor::of({-1, 0, 1, 2}, {4}, DType::Float64));
  Variable p(Tensor::of({1, 4, 9, M_E}, {4}, DType::Float64));
  CHECK(exp(x).data().at({2}) == doctest::Approx(M_E));
  CHECK(exp(x).data().at({0}) == doctest::Approx(1 / M_E));
  CHECK(log(p).data().at({3}) == doctest::Approx(1.0));
  CHECK(log(p).data().at({0}) == 0);
  CHECK(sqrt(p).data().at({2}) == 3);
  CHECK(pow(x, 2).data().at({0}) == 1);
  CHECK(pow(x, 3).data().at({3}) == doctest::Approx(8));
  CHECK(pow(p, 0.5).data().at({1}) == doctest::Approx(2));
  CHECK(pow(p, -1).data().at({1}) == doctest::Approx(0.25));
  CHECK(tanh(x).data().at({2}) == doctest::Approx(0.7615941559557649));
  CHECK(tanh(x).data().at({1}) == 0);
  CHECK(relu(x).data().at({0}) == 0);
  CHECK(relu(x).data().at({3}) == 2);
  CHECK(gelu(x).data().at({2}) == doctest::Approx(0.8413447460685429));    // 1 * Phi(1)
  CHECK(gelu(x).data().at({0}) == doctest::Approx(-0.15865525393145707));  // -1 * Phi(-1)
  CHECK(gelu(x).data().at({1}) == 0);
  CHECK(sigmoid(x).data().at({1}) == 0.5);
  CHECK(sigmoid(x).data().at({3}) == doctest::Approx(0.8807970779778823));
}

TEST_CASE("sigmoid saturates without overflow; relu passes NaN") {
  Tensor t = Tensor::of({-1000, 1000, NAN}, {3}, DType::Float32);
  Tensor s = kernels::sigmoid(t);
  CHECK(s.at({0}) == 0);
  CHECK(s.at({1}) == 1);
  CHECK(std::isnan(kernels::relu(t).at({2})));
}

TEST_CASE("unary backward values by hand") {
  Variable x = leaf(Tensor::of({-2, 0, 0.5, 3}, {4}, DType::Float64));
  SUBCASE("relu: 1 where x > 0") {
    Variable y = relu(x);
    y.backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 1});
  }
  SUBCASE("gelu'(0) = 1/2, tanh'(0) = 1, sigmoid'(0) = 1/4") {
    gelu(x).backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().at({1}) == doctest::Approx(0.5));
    x.zero_grad();
    tanh(x).backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().at({1}) == doctest::Approx(1.0));
    x.zero_grad();
    sigmoid(x).backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().at({1}) == doctest::Approx(0.25));
  }
  SUBCASE("pow: 3 x^2, and x^0 has gradient 0 even at x = 0") {
    pow(x, 3).backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().at({3}) == doctest::Approx(27));
    x.zero_grad();
    pow(x, 0).backward(Tensor::ones({4}, DType::Float64));
    CHECK(x.grad().at({1}) == 0);
  }
}

TEST_CASE("gradcheck: exp, tanh, relu, gelu, sigmoid on transposed inputs") {
  Variable x = transposed_leaf(3, 4, 11);
  for (auto f : {+[](const Variable& v) { return exp(v); }, +[](const Variable& v) { return tanh(v); },
                 +[](const Variable& v) { return relu(v); }, +[](const Variable& v) { return gelu(v); },
                 +[](const Variable& v) { return sigmoid(v); }, +[](const Variable& v) { return pow(v, 2); },
                 +[](const Variable& v) { return pow(v, 3); }}) {
    GF_CHECK_GRADS([f](const std::vector<Variable>& in) { return f(in[0]); }, std::vector<Variable>{x});
  }
}

TEST_CASE("gradcheck: log, sqrt, fractional pow on positive transposed inputs") {
  Variable x = transposed_leaf(4, 3, 12, /*lo=*/0.5);
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return log(in[0]); }, std::vector<Variable>{x});
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return sqrt(in[0]); }, std::vector<Variable>{x});
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return pow(in[0], -1.5); }, std::vector<Variable>{x});
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return pow(in[0], 0.5); }, std::vector<Variable>{x});
}

TEST_CASE("gradcheck: a composition with broadcasting (gelu(x) * sigmoid(b) + tanh(exp(x)))") {
  Variable x = leaf(randn({2, 3}, 13));
  Variable b = leaf(randn({3}, 14));
  auto fn = [](const std::vector<Variable>& in) { return gelu(in[0]) * sigmoid(in[1]) + tanh(exp(in[0])); };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{x, b}));
}

TEST_CASE("float32 kernels match double references on a tensor large enough to run in parallel") {
  const int64_t n = 100003;
  Tensor x = randn({n}, 15, 2.0, DType::Float32);
  Tensor e = kernels::exp(x), g = kernels::gelu(x), t = kernels::tanh(x);
  REQUIRE(e.dtype() == DType::Float32);
  const float* px = x.data<float>();
  int bad = 0;
  for (int64_t i = 0; i < n; i += 1) {
    double v = px[i];
    bad += std::abs(e.data<float>()[i] - std::exp(v)) > 1e-5 * std::exp(v);
    bad += std::abs(g.data<float>()[i] - 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))) > 1e-5 * (1 + std::abs(v));
    bad += std::abs(t.data<float>()[i] - std::tanh(v)) > 1e-6;
  }
  CHECK(bad == 0);
}

TEST_CASE("no graph under NoGradGuard; integer input is an error naming the op") {
  Variable x = leaf(randn({2}, 16));
  {
    NoGradGuard ng;
    CHECK_FALSE(exp(x).requires_grad());
  }
  CHECK(exp(x).requires_grad());
  Variable i(Tensor::arange(3));
  CHECK_THROWS_WITH(exp(i), doctest::Contains("exp: expected a float32 or float64 tensor, got int64"));
  CHECK_THROWS_WITH(kernels::tanh_backward(Tensor::zeros({2}), Tensor::zeros({3})),
                    doctest::Contains("tanh_backward: gradient (2,) and saved tensor (3,) differ in shape"));
}

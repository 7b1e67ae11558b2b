#include <doctest/doctest.h>

#include <algorithm>
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

namespace {
// float32 values from lo to hi in n steps: enough elements that the kernels run in parallel.
Tensor grid_f32(double lo, double hi, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::Float32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(lo + (hi - lo) * i / (n - 1));
  return t;
}

// Largest |got - want| / max(|want|, floor) over the grid, want computed in double from x.
template <class F>
double worst_rel(const Tensor& x, const Tensor& got, F want, double floor = 1e-30) {
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double w = want(static_cast<double>(x.data<float>()[i]));
    worst = std::max(worst, std::abs(got.data<float>()[i] - w) / std::max(std::abs(w), floor));
  }
  return worst;
}

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }  // normal CDF, accurate in the tail
}  // namespace

TEST_CASE("float32 kernels (vectorised math) match double references over wide ranges") {
  const int64_t n = 200001;
  Tensor wide = grid_f32(-87, 88, n);  // exp stays a normal float
  CHECK(worst_rel(wide, kernels::exp(wide), [](double v) { return std::exp(v); }) < 2.5e-7);
  Tensor mid = grid_f32(-20, 20, n);
  CHECK(worst_rel(mid, kernels::tanh(mid), [](double v) { return std::tanh(v); }) < 2.5e-7);
  CHECK(worst_rel(mid, kernels::sigmoid(mid), [](double v) { return 1 / (1 + std::exp(-v)); }) < 5e-7);
  Tensor g = grid_f32(-5, 5, n);
  // 1.8e-6 where the compiler fuses multiply-adds (-O2 and up with FMA), 2.25e-6 where it does
  // not (-O1, as in the sanitizer builds, or a build without -march=native on x86-64).
  CHECK(worst_rel(g, kernels::gelu(g), [](double v) { return v * phi(v); }) < 2.5e-6);
  Tensor ones = Tensor::ones({n}, DType::Float32);
  auto dgelu = [](double v) { return phi(v) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI); };
  // gelu' crosses zero near x = -0.75, where only the absolute error can be small.
  CHECK(worst_rel(g, kernels::gelu_backward(ones, g), dgelu, 0.05) < 2e-6);
  Tensor dtail = grid_f32(-5, -1.5, 20001);
  CHECK(worst_rel(dtail, kernels::gelu_backward(Tensor::ones({20001}, DType::Float32), dtail), dgelu) < 2e-6);
  Tensor tail = grid_f32(-12.5, -5, 20001);
  CHECK(worst_rel(tail, kernels::gelu(tail), [](double v) { return v * phi(v); }) < 2e-5);
  CHECK(worst_rel(tail, kernels::gelu_backward(Tensor::ones({20001}, DType::Float32), tail), dgelu) < 1e-5);
}

TEST_CASE("float32 vectorised math at the edges: overflow, underflow, subnormals, inf, NaN") {
  Tensor x = Tensor::of({89, -89, -100, -110, INFINITY, -INFINITY, NAN, 0}, {8}, DType::Float32);
  Tensor e = kernels::exp(x);
  CHECK(e.at({0}) == INFINITY);
  CHECK(std::abs(e.at({1}) / std::exp(-89.0) - 1) < 1e-5);   // a subnormal result
  CHECK(std::abs(e.at({2}) / std::exp(-100.0) - 1) < 0.05);  // deep subnormal: few bits left
  CHECK(e.at({3}) == 0);
  CHECK(e.at({4}) == INFINITY);
  CHECK(e.at({5}) == 0);
  CHECK(std::isnan(e.at({6})));
  CHECK(e.at({7}) == 1);
  Tensor t = kernels::tanh(x);
  CHECK(t.at({4}) == 1);
  CHECK(t.at({5}) == -1);
  CHECK(std::isnan(t.at({6})));
  Tensor s = kernels::sigmoid(x);
  CHECK(s.at({4}) == 1);
  CHECK(s.at({5}) == 0);
  CHECK(std::isnan(s.at({6})));
  Tensor g = kernels::gelu(x);
  CHECK(g.at({0}) == 89);
  CHECK(g.at({1}) == 0);
  CHECK(g.at({4}) == INFINITY);
  CHECK(std::isnan(g.at({6})));
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

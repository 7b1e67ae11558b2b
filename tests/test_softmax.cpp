#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "autograd/ops/arith.h"
#include "autograd/ops/softmax.h"
#include "gradcheck_util.h"
#include "tensor/kernels/softmax.h"

using namespace gf;
using namespace gf::testing;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.flat_get(i))) return false;
  return true;
}
}  // namespace

TEST_CASE("softmax and log_softmax forward values") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor scores = Tensor::of({2.0, 1.0, 0.5}, {1, 3}, dt);
    Tensor p = kernels::softmax(scores);
    CHECK(p.dtype() == dt);
    CHECK(p.at({0, 0}) == doctest::Approx(0.628532).epsilon(1e-5));
    CHECK(p.at({0, 1}) == doctest::Approx(0.231224).epsilon(1e-5));
    CHECK(p.at({0, 2}) == doctest::Approx(0.140244).epsilon(1e-5));
    Tensor lp = kernels::log_softmax(scores);
    CHECK(lp.at({0, 0}) == doctest::Approx(-0.464359).epsilon(1e-5));
    CHECK(lp.at({0, 2}) == doctest::Approx(-1.964359).epsilon(1e-5));

    // The third position blocked by -inf: e / (e + 1) and 1 / (e + 1).
    Tensor masked = kernels::softmax(Tensor::of({2.0, 1.0, -kInf}, {3}, dt));
    CHECK(masked.at({0}) == doctest::Approx(0.731059).epsilon(1e-5));
    CHECK(masked.at({1}) == doctest::Approx(0.268941).epsilon(1e-5));
    CHECK(masked.at({2}) == 0.0);
    Tensor lmasked = kernels::log_softmax(Tensor::of({2.0, 1.0, -kInf}, {3}, dt));
    CHECK(lmasked.at({1}) == doctest::Approx(-1.313262).epsilon(1e-5));
    CHECK(lmasked.at({2}) == -kInf);

    // Stable for huge logits: no overflow.
    Tensor big = kernels::softmax(Tensor::of({1000, 1000, 990}, {3}, dt));
    CHECK(big.at({0}) == doctest::Approx(0.5 / (1 + 0.5 * std::exp(-10.0))).epsilon(1e-5));
    CHECK(kernels::log_softmax(Tensor::of({-1000, 0}, {2}, dt)).at({0}) == doctest::Approx(-1000));
  }
}

TEST_CASE("softmax works over the last dim of any layout") {
  Tensor x = randn({4, 3, 5}, 1);
  Tensor xt = x.transpose(0, 2);  // (5, 3, 4), non-contiguous
  Tensor p = kernels::softmax(xt);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      double sum = 0, denom = 0;
      for (int64_t k = 0; k < 4; ++k) denom += std::exp(xt.at({i, j, k}));
      for (int64_t k = 0; k < 4; ++k) {
        sum += p.at({i, j, k});
        CHECK(p.at({i, j, k}) == doctest::Approx(std::exp(xt.at({i, j, k})) / denom).epsilon(1e-12));
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-14));
    }
  // float32 and float64 agree; a large tensor exercises the parallel row loop.
  Tensor big = randn({600, 77}, 2, 3.0);
  Tensor p64 = kernels::softmax(big), p32 = kernels::softmax(big.to(DType::Float32));
  double worst = 0;
  for (int64_t i = 0; i < p64.numel(); ++i) worst = std::max(worst, std::abs(p64.flat_get(i) - p32.flat_get(i)));
  CHECK(worst < 1e-6);
}

TEST_CASE("a fully masked row gives zeros (softmax) or -inf (log_softmax) and a zero, finite gradient") {
  Tensor scores = Tensor::of({1.0, -kInf, 3.0, -kInf, -kInf, -kInf}, {2, 3});
  Variable x(scores.to(DType::Float64), true);
  Variable p = softmax(x);
  CHECK(p.data().at({1, 0}) == 0.0);
  CHECK(p.data().at({1, 2}) == 0.0);
  CHECK(p.data().at({0, 1}) == 0.0);
  CHECK(all_finite(p.data()));
  p.backward(Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64));
  CHECK(all_finite(x.grad()));
  for (int64_t j = 0; j < 3; ++j) CHECK(x.grad().at({1, j}) == 0.0);
  CHECK(x.grad().at({0, 1}) == 0.0);  // a masked position inside a live row

  Variable x2(scores.to(DType::Float64), true);
  Variable lp = log_softmax(x2);
  for (int64_t j = 0; j < 3; ++j) CHECK(lp.data().at({1, j}) == -kInf);
  lp.backward(Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64));
  CHECK(all_finite(x2.grad()));
  for (int64_t j = 0; j < 3; ++j) CHECK(x2.grad().at({1, j}) == 0.0);
  // Live row: g - softmax * sum(g), with softmax = (1/(1+e^2), 0, e^2/(1+e^2)), sum(g) = 6.
  const double p0 = 1.0 / (1.0 + std::exp(2.0));
  CHECK(x2.grad().at({0, 0}) == doctest::Approx(1 - 6 * p0));
  CHECK(x2.grad().at({0, 1}) == doctest::Approx(2));
  CHECK(x2.grad().at({0, 2}) == doctest::Approx(3 - 6 * (1 - p0)));
}

TEST_CASE("log_softmax_shift: x - shift is log_softmax's output to the bit; +inf for a fully masked row, NaN for a NaN") {
  Tensor x = randn({3, 70}, 17).to(DType::Float32);  // (3, 70): 16-lane blocks and a tail
  float* p = x.data<float>();
  p[70 + 5] = -INFINITY, p[70 + 69] = -INFINITY;  // masked entries in a live row
  Tensor lp = kernels::log_softmax(x);            // (3, 70)
  for (int64_t r = 0; r < 3; ++r) {
    const float shift = kernels::log_softmax_shift(p + r * 70, 70);
    double sum = 0;  // log sum exp in double, directly
    for (int64_t j = 0; j < 70; ++j) sum += std::exp(static_cast<double>(p[r * 70 + j]));
    CHECK(shift == doctest::Approx(std::log(sum)).epsilon(1e-6));
    for (int64_t j = 0; j < 70; ++j) CHECK(p[r * 70 + j] - shift == lp.data<float>()[r * 70 + j]);
  }
  std::vector<float> masked(20, -INFINITY);
  CHECK(kernels::log_softmax_shift(masked.data(), 20) == INFINITY);  // x - shift: -inf everywhere
  masked[3] = 1.0f, masked[7] = NAN;
  CHECK(std::isnan(kernels::log_softmax_shift(masked.data(), 20)));
}

TEST_CASE("NaN inputs propagate instead of being masked") {
  Tensor p = kernels::softmax(Tensor::of({1.0, std::nan(""), 0.0}, {3}));
  CHECK(std::isnan(p.at({0})));
}

TEST_CASE("gradcheck: softmax and log_softmax") {
  auto sm = [](const std::vector<Variable>& in) { return softmax(in[0]); };
  auto lsm = [](const std::vector<Variable>& in) { return log_softmax(in[0]); };
  GF_CHECK_GRADS(sm, (std::vector<Variable>{leaf(randn({3, 5}, 10))}));
  GF_CHECK_GRADS(lsm, (std::vector<Variable>{leaf(randn({3, 5}, 11))}));
  GF_CHECK_GRADS(sm, (std::vector<Variable>{leaf(randn({2, 3, 4}, 12, 2.0))}));
  GF_CHECK_GRADS(lsm, (std::vector<Variable>{leaf(randn({2, 3, 4}, 13, 2.0))}));
  // Non-contiguous input.
  Variable xt = leaf(randn({4, 3}, 14).transpose(0, 1));
  GF_CHECK_GRADS(sm, (std::vector<Variable>{xt}));
  GF_CHECK_GRADS(lsm, (std::vector<Variable>{leaf(randn({4, 3}, 15).transpose(0, 1))}));
  // Softmax with masked positions and a fully masked row (all derivatives there are 0).
  Tensor m = randn({3, 4}, 16);
  m.flat_set(1, -kInf), m.flat_set(6, -kInf);
  for (int64_t j = 8; j < 12; ++j) m.flat_set(j, -kInf);
  GF_CHECK_GRADS(sm, (std::vector<Variable>{leaf(m)}));
  // Composition: the output feeds further ops.
  auto chain = [](const std::vector<Variable>& in) { return softmax(in[0] * in[1]) * in[1]; };
  GF_CHECK_GRADS(chain, (std::vector<Variable>{leaf(randn({2, 3}, 17)), leaf(randn({3}, 18))}));
}

TEST_CASE("softmax errors") {
  CHECK_THROWS_WITH(kernels::softmax(Tensor::scalar(1.0)), doctest::Contains("softmax: input () has no last dim"));
  CHECK_THROWS_WITH(kernels::softmax(Tensor::zeros({2}, DType::Int64)), doctest::Contains("softmax: expected a float32 or float64"));
  CHECK_THROWS_WITH(kernels::softmax_backward(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})),
                    doctest::Contains("softmax_backward: output (2, 3) and gradient (3, 2) differ in shape"));
}

TEST_CASE("softmax_exact and log_softmax_at: the double-precision row against the kernels, and a large row without overflow") {
  const std::vector<double> row = {2.0, 1.0, 0.5, -3.0};
  const Tensor t = Tensor::of({2.0, 1.0, 0.5, -3.0}, {1, 4}, DType::Float64);
  const Tensor p = kernels::softmax(t), lp = kernels::log_softmax(t);
  const std::vector<double> q = kernels::softmax_exact(row.data(), 4);
  double sum = 0;
  for (int64_t j = 0; j < 4; ++j) {
    CHECK(q[j] == doctest::Approx(p.at({0, j})).epsilon(1e-15));
    CHECK(kernels::log_softmax_at(row.data(), 4, j) == doctest::Approx(lp.at({0, j})).epsilon(1e-15));
    sum += q[j];
  }
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-15));
  const std::vector<double> big = {1000.0, 999.0};  // exp(1000) overflows; the max is subtracted first
  CHECK(kernels::log_softmax_at(big.data(), 2, 1) == doctest::Approx(-1.0 - std::log1p(std::exp(-1.0))).epsilon(1e-15));
  CHECK(kernels::softmax_exact(big.data(), 2)[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-15));
}

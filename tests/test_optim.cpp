// Gradient norm and clipping over many parameters: blocked, parallel, and equal on any thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "optim/adam.h"
#include "tensor/kernels/random.h"
#include "tensor/parallel.h"

using namespace gf;

namespace {

// Parameters whose sizes cross the norm's 65,536-element blocks, with random gradients.
std::vector<Variable> params_with_grads(DType dtype) {
  Generator gen(7);
  std::vector<Variable> params;
  for (int64_t n : {int64_t{3}, int64_t{65536}, int64_t{65537}, int64_t{200001}, int64_t{1}}) {
    Variable p(Tensor::zeros({n}, dtype), /*requires_grad=*/true);
    p.impl()->grad = kernels::randn({n}, gen, dtype);  // (n)
    params.push_back(p);
  }
  params.push_back(Variable(Tensor::zeros({5}, dtype), true));  // no gradient: skipped
  return params;
}

double naive_norm(const std::vector<Variable>& params) {
  long double s = 0;
  for (const auto& p : params)
    if (p.grad().defined())
      for (int64_t i = 0; i < p.grad().numel(); ++i) s += static_cast<long double>(p.grad().flat_get(i)) * p.grad().flat_get(i);
  return static_cast<double>(std::sqrt(s));
}

}  // namespace

TEST_CASE("grad_norm equals the plain sum of squares, in float32 and float64") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    auto params = params_with_grads(dtype);
    CHECK(optim::grad_norm(params) == doctest::Approx(naive_norm(params)).epsilon(1e-12));
  }
}

TEST_CASE("grad_norm gives the same bits on 1 and 2 threads") {
  auto params = params_with_grads(DType::Float32);
  set_num_threads(1);
  const double one = optim::grad_norm(params);
  set_num_threads(2);
  const double two = optim::grad_norm(params);
  set_num_threads(0);
  CHECK(one == two);
}

TEST_CASE("clip_grad_norm scales every gradient to the limit, and leaves them when under it") {
  auto params = params_with_grads(DType::Float64);
  const double norm = naive_norm(params);
  const double before = params[3].grad().flat_get(200000);
  CHECK(optim::clip_grad_norm(params, 2 * norm) == doctest::Approx(norm));
  CHECK(params[3].grad().flat_get(200000) == before);
  CHECK(optim::clip_grad_norm(params, norm / 4) == doctest::Approx(norm));
  CHECK(naive_norm(params) == doctest::Approx(norm / 4).epsilon(1e-6));
  CHECK(params[3].grad().flat_get(200000) == doctest::Approx(before * (norm / 4) / (norm + 1e-6)));
}

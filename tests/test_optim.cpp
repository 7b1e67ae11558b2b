// Gradient norm and clipping over many parameters: blocked, parallel, and equal on any thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "tensor/kernels/binary.h"
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

namespace {

// A few parameters of mixed sizes (crossing Adam's buckets of 32,768), each with a gradient.
std::vector<std::pair<std::string, Variable>> named_params(DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<std::pair<std::string, Variable>> named;
  int i = 0;
  for (int64_t n : {int64_t{3}, int64_t{32768}, int64_t{32769}, int64_t{100003}, int64_t{1}}) {
    Variable p(kernels::randn({n}, gen, dtype), /*requires_grad=*/true);
    named.emplace_back("p" + std::to_string(i++), p);
  }
  return named;
}

void set_grads(const std::vector<std::pair<std::string, Variable>>& named, uint64_t seed, double size) {
  Generator gen(seed);
  for (const auto& [name, p] : named) p.impl()->grad = kernels::mul_scalar(kernels::randn(p.shape(), gen, p.dtype()), size);
}

}  // namespace

TEST_CASE("clipped_update: Adam reading the gradients times the clipping coefficient gives the bits of clip_grad_norm then step") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (double size : {0.001, 10.0}) {  // under the limit (no clipping) and over it
      auto fused = named_params(dtype, 3), plain = named_params(dtype, 3);
      std::vector<Variable> pf, pp;
      for (auto& [n, p] : fused) pf.push_back(p);
      for (auto& [n, p] : plain) pp.push_back(p);
      optim::Adam af(fused, {.lr = 1e-2, .weight_decay = 0.01}), ap(plain, {.lr = 1e-2, .weight_decay = 0.01});
      for (int step = 0; step < 3; ++step) {
        set_grads(fused, 10 + step, size);
        set_grads(plain, 10 + step, size);
        const optim::UpdateInfo u = optim::clipped_update(af, pf, 1.0, 1e-2);
        const double norm = optim::clip_grad_norm(pp, 1.0);  // the unfused reference: clip, then step
        ap.set_lr(1e-2);
        ap.step();
        CHECK(u.grad_norm == norm);
      }
      for (size_t i = 0; i < pf.size(); ++i) {
        const Tensor a = pf[i].data(), b = pp[i].data();
        for (int64_t j = 0; j < a.numel(); ++j) REQUIRE(a.flat_get(j) == b.flat_get(j));
        const auto sa = af.state_dict(), sb = ap.state_dict();
        for (const char* key : {"exp_avg.", "exp_avg_sq."}) {
          const Tensor ma = sa.at(key + fused[i].first), mb = sb.at(key + plain[i].first);
          for (int64_t j = 0; j < ma.numel(); ++j) REQUIRE(ma.flat_get(j) == mb.flat_get(j));
        }
      }
    }
  }
}

TEST_CASE("Adam's bucketed step gives the same bits on 1 and 2 threads") {
  auto one = named_params(DType::Float32, 5), two = named_params(DType::Float32, 5);
  optim::Adam a1(one, {.lr = 1e-3}), a2(two, {.lr = 1e-3});
  set_grads(one, 9, 1.0);
  set_grads(two, 9, 1.0);
  set_num_threads(1);
  a1.step_scaled(0.5);
  set_num_threads(2);
  a2.step_scaled(0.5);
  set_num_threads(0);
  for (size_t i = 0; i < one.size(); ++i)
    for (int64_t j = 0; j < one[i].second.numel(); ++j) REQUIRE(one[i].second.data().flat_get(j) == two[i].second.data().flat_get(j));
}

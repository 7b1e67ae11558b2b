#pragma once
// Helpers for tests: random float64 inputs and a gradcheck assertion that prints the worst element.
#include <doctest/doctest.h>

#include <random>

#include "autograd/gradcheck.h"

namespace gf::testing {

inline Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0, DType dtype = DType::Float64) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) t.flat_set(i, nd(rng) * scale);
  return t;
}

inline Variable leaf(const Tensor& t) { return Variable(t, true); }

#define GF_CHECK_GRADS(fn, inputs, ...)                            \
  do {                                                             \
    auto gc_result_ = ::gf::gradcheck(fn, inputs, ##__VA_ARGS__);  \
    INFO("gradcheck worst: " << gc_result_.report);                \
    CHECK(gc_result_.ok);                                          \
  } while (0)

}  // namespace gf::testing

#pragma once
// What two computations of the same value through different BLAS calls may differ by.
//
// OpenBLAS promises no summation order. Another layout of the same matrix (row- or column-major),
// another number of rows in the call (m*n*k decides between its small-matrix path and the packed
// one), another kernel (OPENBLAS_CORETYPE Haswell, SkylakeX, Cooperlake) or another thread count
// inside OpenBLAS may add a dot product's terms in another order; SkylakeX's and Cooperlake's
// small-matrix kernels do so for a column-major B. So results that reach a value through
// different BLAS calls are compared with a tolerance, and bit-identity is asserted only where
// gradflow's own code fixes the order (the same call twice, a resumed run, blocks fixed by shape
// with OpenBLAS on one thread, its own reductions).
//
// The bound: a dot product of length k summed in any order differs from the exact one by at most
// gamma_k * sum |a_i b_i|, gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability of Numerical
// Algorithms, 2nd ed., eq. 3.5), so two orders differ by at most 2 gamma_k * sum |a_i b_i|.
// u = 2^-24 in float32, 2^-53 in float64.
//
// Discrete results (a translation: an argmax per step, a beam's ranking) can still differ when two
// candidates are closer than that; with float32 that can happen on any machine. Tests that compare
// translations reached through different BLAS calls therefore decode a float64 copy of the model,
// where a different translation would need two scores equal to ~1e-14 relative.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tensor/tensor.h"

namespace gf::testing {

inline double unit_roundoff(DType dtype) { return dtype == DType::Float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

inline double gamma(int64_t k, DType dtype) {
  const double ku = static_cast<double>(k) * unit_roundoff(dtype);
  return ku / (1 - ku);
}

// Two summation orders of one dot product of length k whose terms' magnitudes add to `magnitude`.
inline double two_orders_tolerance(int64_t k, double magnitude, DType dtype) { return 2 * gamma(k, dtype) * magnitude; }

// A whole network's output: `products` matrix products in sequence (the longest chain from input
// to output), the longest reduction k, outputs of size about `scale`. Each product adds at most
// 2 gamma_k of its own magnitude; LayerNorm rescales what reaches the next product back to unit
// size, so the differences add up along the chain rather than multiply. `headroom` covers
// magnitudes above the outputs' (sum |a_i b_i| over |sum a_i b_i|, about sqrt(k) for random signs)
// and the normalisations' gain; the tests say what they pass.
inline double network_tolerance(int64_t products, int64_t k, double scale, DType dtype, double headroom) {
  return static_cast<double>(products) * two_orders_tolerance(k, scale, dtype) * headroom;
}

// max |t|: the scale of a network's outputs.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(t.flat_get(i)));
  return m;
}

}  // namespace gf::testing

#pragma once
// Softmax and log-softmax over the last dim, fused and numerically stable (the row max is
// subtracted before exp). A row whose entries are all -inf (every position masked) gives
// softmax 0 everywhere and log_softmax -inf everywhere, and a zero gradient in both: never NaN.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tensor/tensor.h"

namespace gf::kernels {

// exp for float32 written so that GCC vectorises the loops that call it: std::exp stays a scalar
// libm call without -ffast-math, and exp dominates softmax and cross-entropy over a vocabulary.
// Cody-Waite reduction x = n*ln2 + r with |r| <= ln2/2 (ln2 split in two so n*ln2_hi is exact),
// the Taylor series of e^r to degree 7 (truncation < 5e-9 relative, below float's 6e-8), then 2^n
// through the exponent bits. Results below ~1e-38 (x < -87) flush to 0 (no subnormals); x > 88.7
// gives inf; NaN stays NaN. Measured within 1 ulp of std::exp on [-87, 88] (test_softmax checks 2).
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;       // 355/512: few bits, so n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;    // ln2 - kLn2Hi
  constexpr float kRound = 12582912.0f;        // 1.5 * 2^23: adding it rounds to an integer
  // Written so that NaN fails both tests and is clamped too (to -87): converting NaN to int below
  // is undefined behaviour (UBSan's float-cast-overflow). The last line returns the NaN.
  const float xc = x > -87.0f ? (x < 88.0f ? x : 88.0f) : -87.0f;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // 2^n, n in [-126, 127]
  float y = p * scale;
  y = x < -87.0f ? 0.0f : y;
  y = x > 88.72f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}
// float64 is the precision reference (gradchecks): it keeps libm's exp.
inline double fast_exp(double x) { return std::exp(x); }

// Largest of p[0..n), -inf for an empty or all -inf row; NaN entries are passed over (callers'
// sums still turn NaN). In 16 lanes, for the same reason as lane_sum below.
template <class T>
T row_max(const T* p, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = p[j + l] > acc[l] ? p[j + l] : acc[l];
  T m = -std::numeric_limits<T>::infinity();
  for (; j < n; ++j) m = p[j] > m ? p[j] : m;
  for (int l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

// sum of term(j) for j in [0, n), accumulated in double in 16 interleaved partial sums. Without
// -ffast-math a single running sum cannot be vectorised (each add waits for the last); fixed
// lanes can, and the order is still fixed, so results are reproducible.
template <class F>
double lane_sum(int64_t n, F&& term) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(term(j + l));
  double s = 0;
  for (; j < n; ++j) s += static_cast<double>(term(j));
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// What log_softmax subtracts from each entry of the row p[0..n): max + log(sum of exp(p - max)),
// the sum in double (lane_sum); +inf for a row that is all -inf, NaN if the row holds a NaN.
// log_softmax(p)[j] is exactly p[j] - log_softmax_shift(p, n), so a caller that needs only a few
// entries (beam search: a row's best tokens) computes those and never writes the row.
template <class T>
T log_softmax_shift(const T* p, int64_t n) {
  const T mx = row_max(p, n);
  if (mx == -std::numeric_limits<T>::infinity()) return std::numeric_limits<T>::infinity();
  const double sum = lane_sum(n, [&](int64_t j) { return fast_exp(p[j] - mx); });
  return mx + static_cast<T>(std::log(sum));
}

Tensor softmax(const Tensor& x);      // (..., C) -> (..., C)
Tensor log_softmax(const Tensor& x);  // (..., C) -> (..., C)

// Gradients from the saved output y and the upstream gradient g (both (..., C)):
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
Tensor softmax_backward(const Tensor& y, const Tensor& g);
Tensor log_softmax_backward(const Tensor& y, const Tensor& g);

}  // namespace gf::kernels

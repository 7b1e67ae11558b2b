#pragma once
// Softmax and log-softmax over the last dim, fused and numerically stable (the row max is
// subtracted before exp). A row whose entries are all -inf (every position masked) gives
// softmax 0 everywhere and log_softmax -inf everywhere, and a zero gradient in both: never NaN.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensor/kernels/fast_math.h"  // fast::exp, the one float32 exp
#include "tensor/tensor.h"

namespace gf::kernels {

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
  const double sum = lane_sum(n, [&](int64_t j) { return fast::exp(p[j] - mx); });
  return mx + static_cast<T>(std::log(sum));
}

// The plain double-precision softmax of one row of n values, and one entry of its log: the row's
// largest value subtracted, the exponentials (std::exp) summed in order. For measurements read in
// double (log p of a token, a next-token distribution), not for training's kernels below.
std::vector<double> softmax_exact(const double* row, int64_t n);
// log softmax(row)[y]: row[y] - max - log(sum of exp(row - max)).
double log_softmax_at(const double* row, int64_t n, int64_t y);

Tensor softmax(const Tensor& x);      // (..., C) -> (..., C)
Tensor log_softmax(const Tensor& x);  // (..., C) -> (..., C)

// Gradients from the saved output y and the upstream gradient g (both (..., C)):
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
Tensor softmax_backward(const Tensor& y, const Tensor& g);
Tensor log_softmax_backward(const Tensor& y, const Tensor& g);

}  // namespace gf::kernels

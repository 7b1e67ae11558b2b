#include "tensor/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

template <class T, bool Log>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  parallel_for(rows, row_grain(4 * cols), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      if constexpr (Log) {
        const T shift = log_softmax_shift(xr, cols);
        if (shift == -kNegInf) {  // fully masked row: -inf everywhere (a NaN among -inf's too)
          std::fill(yr, yr + cols, kNegInf);
          continue;
        }
        for (int64_t j = 0; j < cols; ++j) yr[j] = xr[j] - shift;
      } else {
        const T mx = row_max(xr, cols);
        if (mx == kNegInf) {  // fully masked row: exp(-inf - -inf) would be NaN
          std::fill(yr, yr + cols, T(0));
          continue;
        }
        // A NaN entry leaves mx alone but turns the sum into NaN, so NaN still propagates.
        // Summed in double: a long row of small terms must not lose the tail.
        const double sum = lane_sum(cols, [&](int64_t j) { return yr[j] = fast::exp(xr[j] - mx); });
        const T inv = static_cast<T>(1.0 / sum);
        for (int64_t j = 0; j < cols; ++j) yr[j] *= inv;
      }
    }
  });
}

template <bool Log>
Tensor softmax_impl(const Tensor& x, const char* op) {
  check_defined(x, op);
  GF_CHECK(x.ndim() >= 1, "{}: input {} has no last dim", op, shape_str(x.shape()));
  Tensor xc = x.contiguous();                        // (..., C)
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // (..., C)
  const int64_t cols = x.shape().back();
  if (cols == 0 || out.numel() == 0) return out;
  dispatch_float(x.dtype(), op, [&]<class T>() { softmax_rows<T, Log>(xc.data<T>(), out.data<T>(), out.numel() / cols, cols); });
  return out;
}

void check_pair(const Tensor& y, const Tensor& g, const char* op) {
  check_same_dtype(y, g, op);
  GF_CHECK(y.shape() == g.shape(), "{}: output {} and gradient {} differ in shape", op, shape_str(y.shape()),
           shape_str(g.shape()));
}

}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl<false>(x, "softmax"); }
Tensor log_softmax(const Tensor& x) { return softmax_impl<true>(x, "log_softmax"); }

Tensor softmax_backward(const Tensor& y, const Tensor& g) {
  check_pair(y, g, "softmax_backward");
  Tensor yc = y.contiguous(), gc = g.contiguous();   // (..., C), (..., C)
  Tensor gx = Tensor::empty(y.shape(), y.dtype());  // (..., C)
  const int64_t cols = y.ndim() ? y.shape().back() : 1;
  if (cols == 0 || gx.numel() == 0) return gx;
  dispatch_float(y.dtype(), "softmax_backward", [&]<class T>() {
    const T *py = yc.data<T>(), *pg = gc.data<T>();
    T* px = gx.data<T>();
    parallel_for(gx.numel() / cols, row_grain(2 * cols), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T *yr = py + r * cols, *gr = pg + r * cols;
        T* xr = px + r * cols;
        const T d = static_cast<T>(lane_sum(cols, [&](int64_t j) { return gr[j] * yr[j]; }));
        // A masked row has y = 0, so its gradient is 0 with no special case.
        for (int64_t j = 0; j < cols; ++j) xr[j] = yr[j] * (gr[j] - d);
      }
    });
  });
  return gx;
}

Tensor log_softmax_backward(const Tensor& y, const Tensor& g) {
  check_pair(y, g, "log_softmax_backward");
  Tensor yc = y.contiguous(), gc = g.contiguous();   // (..., C), (..., C)
  Tensor gx = Tensor::empty(y.shape(), y.dtype());  // (..., C)
  const int64_t cols = y.ndim() ? y.shape().back() : 1;
  if (cols == 0 || gx.numel() == 0) return gx;
  dispatch_float(y.dtype(), "log_softmax_backward", [&]<class T>() {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    const T *py = yc.data<T>(), *pg = gc.data<T>();
    T* px = gx.data<T>();
    parallel_for(gx.numel() / cols, row_grain(4 * cols), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T *yr = py + r * cols, *gr = pg + r * cols;
        T* xr = px + r * cols;
        const double sum = lane_sum(cols, [&](int64_t j) { return gr[j]; });
        bool masked = true;
        for (int64_t j = 0; j < cols; ++j) masked &= yr[j] == kNegInf;
        // A fully masked row has no live input: its outputs are constant -inf, so gradient 0
        // (the formula would pass g straight through).
        if (masked) {
          for (int64_t j = 0; j < cols; ++j) xr[j] = T(0);
          continue;
        }
        const T s = static_cast<T>(sum);
        for (int64_t j = 0; j < cols; ++j) xr[j] = gr[j] - fast::exp(yr[j]) * s;
      }
    });
  });
  return gx;
}

std::vector<double> softmax_exact(const double* row, int64_t n) {
  const double m = *std::max_element(row, row + n);
  std::vector<double> p(static_cast<size_t>(n));
  double z = 0;
  for (int64_t v = 0; v < n; ++v) z += p[v] = std::exp(row[v] - m);
  for (double& x : p) x /= z;
  return p;
}

double log_softmax_at(const double* row, int64_t n, int64_t y) {
  const double m = *std::max_element(row, row + n);
  double z = 0;
  for (int64_t v = 0; v < n; ++v) z += std::exp(row[v] - m);
  return row[y] - m - std::log(z);
}

}  // namespace gf::kernels

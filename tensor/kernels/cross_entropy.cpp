#include "tensor/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels/bf16.h"
#include "tensor/kernels/row_blocks.h"
#include "tensor/kernels/softmax.h"  // fast::exp, row_max, lane_sum
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// Checks shapes, dtypes and target values; returns the number of rows that count.
int64_t check_inputs(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  check_defined(logits, "cross_entropy");
  check_defined(target, "cross_entropy");
  GF_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be float32 or float64, got {} {}",
           dtype_name(logits.dtype()), shape_str(logits.shape()));
  GF_CHECK(target.dtype() == DType::Int64, "cross_entropy: target must be int64 class indices, got {} {}",
           dtype_name(target.dtype()), shape_str(target.shape()));
  GF_CHECK(logits.ndim() == 2 && target.ndim() == 1 && target.shape()[0] == logits.shape()[0],
           "cross_entropy: logits {} and target {}: expected logits (N, C) and target (N,)", shape_str(logits.shape()),
           shape_str(target.shape()));
  GF_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label_smoothing {} is outside [0, 1]",
           label_smoothing);
  return count_targets(target, logits.shape()[1], ignore_index, "cross_entropy", "logits", logits.shape());
}

// The smoothed one-hot target's two values: off for every class, hit for the true one.
template <class T>
struct SmoothedTarget {
  T off, hit;
  SmoothedTarget(double label_smoothing, int64_t c)
      : off(static_cast<T>(label_smoothing / c)), hit(static_cast<T>(1.0 - label_smoothing) + off) {}
};

// A row's max and (with_sum) the sum of its entries in double, in one pass: each in 16 lanes in
// the order of row_max and lane_sum (softmax.h), so the same bits as those two passes.
template <class T>
void max_and_sum(const T* p, int64_t n, bool with_sum, T& max_out, double& sum_out) {
  constexpr int kLanes = 16;
  T mx[kLanes];
  double acc[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) mx[l] = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
  if (with_sum) {
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        mx[l] = p[j + l] > mx[l] ? p[j + l] : mx[l];
        acc[l] += static_cast<double>(p[j + l]);
      }
  } else {
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) mx[l] = p[j + l] > mx[l] ? p[j + l] : mx[l];
  }
  T m = -std::numeric_limits<T>::infinity();
  double s = 0;
  for (; j < n; ++j) {
    m = p[j] > m ? p[j] : m;
    s += static_cast<double>(p[j]);
  }
  for (int l = 0; l < kLanes; ++l) m = mx[l] > m ? mx[l] : m;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  max_out = m;
  sum_out = with_sum ? s : 0.0;
}

// Row i's softmax and loss, over the row x itself (one pointer: with two that may alias, GCC's
// vectorised loop is guarded by an overlap check that in place always fails): x becomes
// exp(x - max), and the row's sum of it is returned. lse and loss: (1 - ls) * (lse - x[t]) + ls *
// mean_c (lse - x[c]). The softmax is then e * (1 / sum): one exp per logit for the loss and its
// gradient.
template <class T>
double row_forward(T* x, int64_t c, int64_t t, double label_smoothing, double& lse, double& loss) {
  T mx;
  double sum_x;
  max_and_sum(x, c, label_smoothing > 0, mx, sum_x);
  const T xt = x[t];
  const double sum_exp = lane_sum(c, [&](int64_t j) { return x[j] = fast::exp(x[j] - mx); });
  lse = mx + std::log(sum_exp);
  const double nll = lse - xt;
  const double smooth = lse - sum_x / c;  // mean over classes of -log p
  loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth;
  return sum_exp;
}

// Row i's gradient, (softmax - smoothed one-hot) * s, from e = exp(x - max) and r = 1 / sum(e),
// in place. The true class takes hit by a select, so the loop vectorises.
template <class T>
void grad_span(T* e, int64_t n, int64_t t, T r, T s, SmoothedTarget<T> y) {
  for (int64_t j = 0; j < n; ++j) e[j] = (e[j] * r - (j == t ? y.hit : y.off)) * s;
}

// The gradient of a row of e (written over e), its column sums added into acc (if given, in
// double), and with bf16 (float only) the row then rounded to bfloat16 into the first half of its
// own bytes: in one pass, 256 entries at a time through a local buffer (each span is read whole
// before its bfloat16 values land on bytes of entries already read).
template <class T>
void row_backward(T* e, int64_t c, int64_t t, T r, T s, SmoothedTarget<T> y, double* acc, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) {
      constexpr int64_t kSpan = 256;
      alignas(64) float buf[kSpan];
      auto* out = reinterpret_cast<bfloat16*>(e);
      for (int64_t j0 = 0; j0 < c; j0 += kSpan) {
        const int64_t n = std::min(kSpan, c - j0);
        std::memcpy(buf, e + j0, sizeof(float) * n);
        grad_span(buf, n, t - j0, r, s, y);
        if (acc)
          for (int64_t j = 0; j < n; ++j) acc[j0 + j] += buf[j];
        to_bf16(buf, out + j0, n);
      }
      return;
    }
  }
  grad_span(e, c, t, r, s, y);
  if (acc)
    for (int64_t j = 0; j < c; ++j) acc[j] += e[j];
}

double sum_in_row_order(const std::vector<double>& row_loss) {
  double total = 0;
  for (double v : row_loss) total += v;
  return total;
}

}  // namespace

int64_t count_targets(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op, const char* against,
                      const Shape& against_shape) {
  Tensor tc = target.contiguous();  // (N,)
  const int64_t* t = tc.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < tc.numel(); ++i) {
    if (t[i] == ignore_index) continue;
    GF_CHECK_AS(std::out_of_range, t[i] >= 0 && t[i] < classes, "{}: target {} at row {} is out of range for {} classes ({} {}, ignore_index {})",
                op, t[i], i, classes, against, shape_str(against_shape), ignore_index);
    ++count;
  }
  return count;
}

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                 double label_smoothing) {
  CrossEntropyResult r;
  r.count = check_inputs(logits, target, ignore_index, label_smoothing);
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  GF_CHECK(c != 0 || r.count == 0, "cross_entropy: logits {} have no classes", shape_str(logits.shape()));
  Tensor xc = logits.contiguous(), tc = target.contiguous();  // (N, C), (N,)
  r.lse = Tensor::empty({n}, logits.dtype());                  // (N,)
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  dispatch_float(logits.dtype(), "cross_entropy", [&]<class T>() {
    const T* px = xc.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    T* plse = r.lse.data<T>();
    parallel_for(n, row_grain(3 * c), [&](int64_t lo, int64_t hi) {
      std::vector<T> e(static_cast<size_t>(c));  // (C,): a row's exp(x - max)
      for (int64_t i = lo; i < hi; ++i) {
        if (pt[i] == ignore_index) {  // padding: no loss and no gradient, so no work
          plse[i] = T(0);
          continue;
        }
        double lse = 0;
        std::copy(px + i * c, px + (i + 1) * c, e.begin());
        row_forward(e.data(), c, pt[i], label_smoothing, lse, row_loss[i]);
        plse[i] = static_cast<T>(lse);
      }
    });
  });
  // Summed serially in row order: the loss is bit-identical for any thread count.
  r.total = sum_in_row_order(row_loss);
  r.loss = Tensor::scalar(r.count > 0 ? r.total / r.count : 0.0, logits.dtype());  // ()
  return r;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& lse, const Tensor& target, int64_t ignore_index,
                              double label_smoothing, double scale, bool in_place) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  GF_CHECK(!in_place || logits.is_contiguous(), "cross_entropy_backward: in place needs contiguous logits, got {} with strides {}",
           shape_str(logits.shape()), shape_str(logits.strides()));
  GF_CHECK(lse.numel() == n, "cross_entropy_backward: lse {} does not match logits {}", shape_str(lse.shape()), shape_str(logits.shape()));
  Tensor xc = logits.contiguous(), tc = target.contiguous();  // (N, C), (N,)
  Tensor gx = in_place ? logits : Tensor::empty({n, c}, logits.dtype());             // (N, C)
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T* px = xc.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    T* pg = gx.data<T>();
    const T s = static_cast<T>(scale);
    const SmoothedTarget<T> y(label_smoothing, c);
    parallel_for(n, row_grain(3 * c), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T* gr = pg + i * c;
        if (pt[i] == ignore_index) {
          std::fill(gr, gr + c, T(0));
          continue;
        }
        // The forward's row again (exp(x - max) into gr, its sum), so the gradient is e / sum as
        // cross_entropy_and_backward makes it, bit for bit; lse is not needed.
        double lse = 0, loss = 0;
        if (gr != px + i * c) std::copy(px + i * c, px + (i + 1) * c, gr);
        const double sum_exp = row_forward(gr, c, pt[i], label_smoothing, lse, loss);
        row_backward(gr, c, pt[i], static_cast<T>(1.0 / sum_exp), s, y, nullptr, false);
      }
    });
  });
  return gx;
}

CrossEntropyResult cross_entropy_and_backward(Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                                              double scale, Tensor* column_sums, bool rows_to_bf16) {
  GF_CHECK(!rows_to_bf16 || logits.dtype() == DType::Float32, "cross_entropy_and_backward: rows_to_bf16 needs float32 logits, got {}",
           dtype_name(logits.dtype()));
  CrossEntropyResult r;
  r.count = check_inputs(logits, target, ignore_index, label_smoothing);
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  GF_CHECK(c != 0 || r.count == 0, "cross_entropy: logits {} have no classes", shape_str(logits.shape()));
  GF_CHECK(logits.is_contiguous(), "cross_entropy_and_backward: needs contiguous logits, got {} with strides {}", shape_str(logits.shape()),
           shape_str(logits.strides()));
  Tensor tc = target.contiguous();  // (N,)
  r.lse = Tensor::empty({n}, logits.dtype());  // (N,)
  std::vector<double> row_loss(static_cast<size_t>(n), 0.0);
  // Blocks as sum_columns cuts them, so the column sums are the same bits as sum(gradient, {0}).
  const RowBlocks blocks = row_blocks(n, c);
  std::vector<double> part(column_sums ? static_cast<size_t>(blocks.count * c) : 0, 0.0);  // (blocks, C)
  dispatch_float(logits.dtype(), "cross_entropy_and_backward", [&]<class T>() {
    T* px = logits.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    T* plse = r.lse.data<T>();
    const T s = static_cast<T>(scale);
    const SmoothedTarget<T> y(label_smoothing, c);
    parallel_for(blocks.count, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        double* acc = column_sums ? part.data() + blk * c : nullptr;  // (C,)
        for (int64_t i = blocks.begin(blk); i < blocks.end(blk); ++i) {
          T* xr = px + i * c;  // the logits, then their gradient
          if (pt[i] == ignore_index) {
            plse[i] = T(0);
            std::fill(xr, xr + c, T(0));
            continue;  // adds nothing to the column sums (and its zeros are bfloat16 zeros too)
          }
          // Three passes over the row, which stays in cache: max (and the sum for smoothing);
          // exp(x - max) over the logits and its sum; the gradient, its column sums and its
          // rounding to bfloat16.
          double lse = 0;
          const double sum_exp = row_forward(xr, c, pt[i], label_smoothing, lse, row_loss[i]);
          plse[i] = static_cast<T>(lse);
          row_backward(xr, c, pt[i], static_cast<T>(1.0 / sum_exp), s, y, acc, rows_to_bf16);
        }
      }
    });
    if (column_sums) add_partials_in_order(part, blocks.count, c, column_sums->data<T>());
  });
  r.total = sum_in_row_order(row_loss);
  r.loss = Tensor::scalar(r.count > 0 ? r.total / r.count : 0.0, logits.dtype());  // ()
  return r;
}

}  // namespace gf::kernels

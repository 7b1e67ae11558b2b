#include "tensor/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
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

// Row i's log-sum-exp and loss: (1 - ls) * (lse - x[t]) + ls * mean_c (lse - x[c]).
template <class T>
void row_forward(const T* xr, int64_t c, int64_t t, double label_smoothing, double& lse, double& loss) {
  const T mx = row_max(xr, c);
  const double sum_exp = lane_sum(c, [&](int64_t j) { return fast::exp(xr[j] - mx); });
  const double sum_x = label_smoothing > 0 ? lane_sum(c, [&](int64_t j) { return xr[j]; }) : 0.0;
  lse = mx + std::log(sum_exp);
  const double nll = lse - xr[t];
  const double smooth = lse - sum_x / c;  // mean over classes of -log p
  loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth;
}

// The smoothed one-hot target's two values: off for every class, hit for the true one.
template <class T>
struct SmoothedTarget {
  T off, hit;
  SmoothedTarget(double label_smoothing, int64_t c)
      : off(static_cast<T>(label_smoothing / c)), hit(static_cast<T>(1.0 - label_smoothing) + off) {}
};

// Row i's gradient, (softmax - smoothed one-hot) * s, into gr (which may be xr itself); l is the
// row's log-sum-exp, t its target.
template <class T>
void row_backward(const T* xr, T* gr, int64_t c, int64_t t, T l, T s, SmoothedTarget<T> y) {
  const T xt = xr[t];  // read first: in place, the loop overwrites it
  for (int64_t j = 0; j < c; ++j) gr[j] = (fast::exp(xr[j] - l) - y.off) * s;
  gr[t] = (fast::exp(xt - l) - y.hit) * s;
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
      for (int64_t i = lo; i < hi; ++i) {
        if (pt[i] == ignore_index) {  // padding: no loss and no gradient, so no work
          plse[i] = T(0);
          continue;
        }
        double lse = 0;
        row_forward(px + i * c, c, pt[i], label_smoothing, lse, row_loss[i]);
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
  Tensor xc = logits.contiguous(), lc = lse.contiguous(), tc = target.contiguous();  // (N, C), (N,), (N,)
  Tensor gx = in_place ? logits : Tensor::empty({n, c}, logits.dtype());             // (N, C)
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T *px = xc.data<T>(), *pl = lc.data<T>();
    const int64_t* pt = tc.data<int64_t>();
    T* pg = gx.data<T>();
    const T s = static_cast<T>(scale);
    const SmoothedTarget<T> y(label_smoothing, c);
    parallel_for(n, row_grain(2 * c), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T* gr = pg + i * c;
        if (pt[i] == ignore_index)
          std::fill(gr, gr + c, T(0));
        else
          row_backward(px + i * c, gr, c, pt[i], pl[i], s, y);
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
          double lse = 0;
          row_forward(xr, c, pt[i], label_smoothing, lse, row_loss[i]);
          plse[i] = static_cast<T>(lse);
          row_backward(xr, xr, c, pt[i], plse[i], s, y);
          if (acc)
            for (int64_t j = 0; j < c; ++j) acc[j] += xr[j];
          if constexpr (std::is_same_v<T, float>)
            if (rows_to_bf16) to_bf16_in_place(xr, c);
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

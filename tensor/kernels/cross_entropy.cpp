#include "tensor/kernels/cross_entropy.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels/softmax.h"  // fast_exp, row_max, lane_sum
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
        const T* xr = px + i * c;
        const T mx = row_max(xr, c);
        const double sum_exp = lane_sum(c, [&](int64_t j) { return fast_exp(xr[j] - mx); });
        const double sum_x = label_smoothing > 0 ? lane_sum(c, [&](int64_t j) { return xr[j]; }) : 0.0;
        const double lse = mx + std::log(sum_exp);
        plse[i] = static_cast<T>(lse);
        const double nll = lse - xr[pt[i]];
        const double smooth = lse - sum_x / c;  // mean over classes of -log p
        row_loss[i] = (1.0 - label_smoothing) * nll + label_smoothing * smooth;
      }
    });
  });
  // Summed serially in row order: the loss is bit-identical for any thread count.
  double total = 0;
  for (double v : row_loss) total += v;
  r.total = total;
  r.loss = Tensor::scalar(r.count > 0 ? total / r.count : 0.0, logits.dtype());  // ()
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
    const T off = static_cast<T>(label_smoothing / c);            // smoothed target mass per class
    const T hit = static_cast<T>(1.0 - label_smoothing) + off;   // ... plus the true class's share
    parallel_for(n, row_grain(2 * c), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* xr = px + i * c;
        T* gr = pg + i * c;
        if (pt[i] == ignore_index) {
          for (int64_t j = 0; j < c; ++j) gr[j] = T(0);
          continue;
        }
        const T l = pl[i], xt = xr[pt[i]];  // xt read first: in place, the loop overwrites it
        for (int64_t j = 0; j < c; ++j) gr[j] = (fast_exp(xr[j] - l) - off) * s;
        gr[pt[i]] = (fast_exp(xt - l) - hit) * s;
      }
    });
  });
  return gx;
}

}  // namespace gf::kernels

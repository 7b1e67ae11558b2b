#include "tensor/kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/kernels/row_blocks.h"
#include "tensor/kernels/softmax.h"  // lane_sum
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

void check_affine(const Tensor& p, const Tensor& x, const char* what) {
  if (!p.defined()) return;
  check_same_dtype(x, p, "layer_norm");
  GF_CHECK(p.shape() == Shape{x.shape().back()}, "layer_norm: {} {} does not match the last dim of input {}", what,
           shape_str(p.shape()), shape_str(x.shape()));
}

Shape row_shape(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(x, "layer_norm");
  GF_CHECK(x.ndim() >= 1, "layer_norm: input {} has no last dim", shape_str(x.shape()));
  check_affine(weight, x, "weight");
  check_affine(bias, x, "bias");
  GF_CHECK(eps >= 0, "layer_norm: eps {} is negative (input {})", eps, shape_str(x.shape()));
  const int64_t cols = x.shape().back();
  GF_CHECK(cols != 0, "layer_norm: input {} has an empty last dim", shape_str(x.shape()));
  const int64_t rows = x.numel() / cols;
  Tensor xc = x.contiguous();  // (..., D)
  LayerNormResult r{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(row_shape(x), DType::Float64),
                    Tensor::empty(row_shape(x), DType::Float64)};
  Tensor wc = weight.defined() ? weight.contiguous() : Tensor();  // (D,)
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();      // (D,)
  dispatch_float(x.dtype(), "layer_norm", [&]<class T>() {
    const T* px = xc.data<T>();
    const T* pw = wc.defined() ? wc.data<T>() : nullptr;
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* py = r.out.data<T>();
    double *pm = r.mean.data<double>(), *ps = r.rstd.data<double>();
    parallel_for(rows, row_grain(3 * cols), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* xr = px + i * cols;
        T* yr = py + i * cols;
        // Two passes in double (mean, then squared deviations): no cancellation for rows with a
        // large mean, which the one-pass E[x^2] - E[x]^2 would suffer.
        const double mean = lane_sum(cols, [&](int64_t j) { return xr[j]; }) / cols;
        const double sq = lane_sum(cols, [&](int64_t j) {
          const double d = xr[j] - mean;
          return d * d;
        });
        const double rstd = 1.0 / std::sqrt(sq / cols + eps);
        pm[i] = mean;
        ps[i] = rstd;
        // The normalised value in double, then the affine map in T.
        if (pw && pb) {
          for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - mean) * rstd) * pw[j] + pb[j];
        } else if (pw) {
          for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - mean) * rstd) * pw[j];
        } else if (pb) {
          for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - mean) * rstd) + pb[j];
        } else {
          for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>((xr[j] - mean) * rstd);
        }
      }
    });
  });
  return r;
}

namespace {

// Both backward forms: x is the input (with mean), or, with from_output, the output y (with bias).
LayerNormGrads backward_rows(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                             const Tensor& bias, bool from_output, bool need_x, bool need_weight, bool need_bias) {
  check_same_dtype(g, x, "layer_norm_backward");
  GF_CHECK(g.shape() == x.shape(), "layer_norm_backward: gradient {} and input {} differ in shape", shape_str(g.shape()),
           shape_str(x.shape()));
  const int64_t cols = x.shape().back();
  const int64_t rows = x.numel() / cols;
  Tensor xc = x.contiguous(), gc = g.contiguous();                      // (..., D), (..., D)
  Tensor mc = from_output ? Tensor() : mean.contiguous(), sc = rstd.contiguous();  // (...), (...)
  Tensor wc = weight.defined() ? weight.contiguous() : Tensor();                   // (D,)
  Tensor bc = from_output && bias.defined() ? bias.contiguous() : Tensor();        // (D,)
  LayerNormGrads out;
  if (need_x) out.x = Tensor::empty(x.shape(), x.dtype());              // (..., D)
  if (need_weight) out.weight = Tensor::empty({cols}, x.dtype());       // (D,)
  if (need_bias) out.bias = Tensor::empty({cols}, x.dtype());           // (D,)

  // Weight and bias gradients are summed by row blocks (row_blocks.h): the same for any thread count.
  const RowBlocks blocks = row_blocks(rows, 4 * cols);
  std::vector<double> part_w(need_weight ? blocks.count * cols : 0), part_b(need_bias ? blocks.count * cols : 0);  // (blocks, D)

  dispatch_float(x.dtype(), "layer_norm_backward", [&]<class T>() {
    const T *px = xc.data<T>(), *pg = gc.data<T>();
    const double *pm = from_output ? nullptr : mc.data<double>(), *ps = sc.data<double>();
    const T* pw = wc.defined() ? wc.data<T>() : nullptr;
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* pgx = need_x ? out.x.data<T>() : nullptr;
    parallel_for(blocks.count, 1, [&](int64_t b_lo, int64_t b_hi) {
      std::vector<T> xhat(cols), gy(cols);
      for (int64_t blk = b_lo; blk < b_hi; ++blk) {
        double* dw = need_weight ? part_w.data() + blk * cols : nullptr;
        double* db = need_bias ? part_b.data() + blk * cols : nullptr;
        if (dw) std::fill(dw, dw + cols, 0.0);
        if (db) std::fill(db, db + cols, 0.0);
        for (int64_t i = blocks.begin(blk); i < blocks.end(blk); ++i) {
          const T *xr = px + i * cols, *gr = pg + i * cols;
          const T s = static_cast<T>(ps[i]);
          // xhat = normalised input (x - mean in double, as in the forward; or undone from the
          // output); gy = gradient reaching xhat through the weight.
          if (!from_output) {
            const double m = pm[i];
            for (int64_t j = 0; j < cols; ++j) xhat[j] = static_cast<T>((xr[j] - m) * ps[i]);
          } else {
            for (int64_t j = 0; j < cols; ++j) xhat[j] = (xr[j] - (pb ? pb[j] : T(0))) / (pw ? pw[j] : T(1));
          }
          if (pw) {
            for (int64_t j = 0; j < cols; ++j) gy[j] = gr[j] * pw[j];
          } else {
            std::copy(gr, gr + cols, gy.begin());
          }
          const double sum_gy = lane_sum(cols, [&](int64_t j) { return gy[j]; });
          const double sum_gy_xhat = lane_sum(cols, [&](int64_t j) { return static_cast<double>(gy[j]) * xhat[j]; });
          if (pgx) {
            // dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))
            const T a = static_cast<T>(sum_gy / cols), c = static_cast<T>(sum_gy_xhat / cols);
            T* gxr = pgx + i * cols;
            for (int64_t j = 0; j < cols; ++j) gxr[j] = s * (gy[j] - a - xhat[j] * c);
          }
          if (dw)
            for (int64_t j = 0; j < cols; ++j) dw[j] += static_cast<double>(gr[j]) * xhat[j];
          if (db)
            for (int64_t j = 0; j < cols; ++j) db[j] += gr[j];
        }
      }
    });
    if (need_weight) add_partials_in_order(part_w, blocks.count, cols, out.weight.data<T>());
    if (need_bias) add_partials_in_order(part_b, blocks.count, cols, out.bias.data<T>());
  });
  return out;
}

}  // namespace

LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_x, bool need_weight, bool need_bias) {
  return backward_rows(g, x, mean, rstd, weight, Tensor(), false, need_x, need_weight, need_bias);
}

LayerNormGrads layer_norm_backward_from_output(const Tensor& g, const Tensor& y, const Tensor& rstd, const Tensor& weight,
                                               const Tensor& bias, bool need_x, bool need_weight, bool need_bias) {
  return backward_rows(g, y, Tensor(), rstd, weight, bias, true, need_x, need_weight, need_bias);
}

}  // namespace gf::kernels

#include "tensor/kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/kernels/bf16.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/random.h"
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

namespace {

void check_layer_norm_input(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const char* op) {
  check_defined(x, op);
  GF_CHECK(x.ndim() >= 1, "{}: input {} has no last dim", op, shape_str(x.shape()));
  check_affine(weight, x, "weight");
  check_affine(bias, x, "bias");
  GF_CHECK(eps >= 0, "{}: eps {} is negative (input {})", op, eps, shape_str(x.shape()));
  GF_CHECK(x.shape().back() != 0, "{}: input {} has an empty last dim", op, shape_str(x.shape()));
}

// One row: its mean and rstd (in double) and y = (x - mean) * rstd * weight + bias.
template <class T>
void norm_row(const T* xr, T* yr, int64_t cols, const T* pw, const T* pb, double eps, double& mean_out, double& rstd_out) {
  // Two passes in double (mean, then squared deviations): no cancellation for rows with a
  // large mean, which the one-pass E[x^2] - E[x]^2 would suffer.
  const double mean = lane_sum(cols, [&](int64_t j) { return xr[j]; }) / cols;
  const double sq = lane_sum(cols, [&](int64_t j) {
    const double d = xr[j] - mean;
    return d * d;
  });
  const double rstd = 1.0 / std::sqrt(sq / cols + eps);
  mean_out = mean;
  rstd_out = rstd;
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

// s = x + y * (scale or 0): the residual add after dropout, as add(x, dropout_forward(y)) computes
// it (dropout's y * (scale * keep), then the add). keep null: no dropout, s = x + y.
// keep[j] = dropout's decision for number first + j of gen's stream, as dropout_forward draws it.
// gen by value and keep __restrict: a byte store may alias anything, and through a reference the
// generator's seed was reloaded at every element, which kept the loop scalar.
void draw_keeps(uint8_t* __restrict keep, const Generator gen, uint64_t first, int64_t n, uint64_t threshold) {
  for (int64_t j = 0; j < n; ++j) keep[j] = keeps(gen.at(first + static_cast<uint64_t>(j)), threshold);
}

// Two loops, so that the product is rounded before the add, as there: in one expression the
// compiler would contract the two into a fused multiply-add, with one rounding fewer.
template <class T>
void residual_row(const T* xr, const T* yr, const uint8_t* keep, T scale, T* sr, int64_t cols) {
  if (!keep) {
    for (int64_t j = 0; j < cols; ++j) sr[j] = xr[j] + yr[j];
    return;
  }
  for (int64_t j = 0; j < cols; ++j) sr[j] = yr[j] * (scale * static_cast<T>(keep[j]));
  for (int64_t j = 0; j < cols; ++j) sr[j] = xr[j] + sr[j];
}

// The bfloat16 copy of the output, allocated when asked for (float32 only); null otherwise.
template <class T>
bfloat16* bf16_out(const Tensor& x, Tensor* out_bf16) {
  if (!out_bf16) return nullptr;
  GF_CHECK(x.dtype() == DType::Float32, "layer_norm: a bfloat16 copy of the output needs float32 input, got {}", dtype_name(x.dtype()));
  *out_bf16 = Tensor::empty(x.shape(), DType::BFloat16);  // (..., D)
  if constexpr (std::is_same_v<T, float>) return out_bf16->data<bfloat16>();
  return nullptr;
}

LayerNormResult empty_result(const Tensor& x) {
  return {Tensor::empty(x.shape(), x.dtype()), Tensor::empty(row_shape(x), DType::Float64), Tensor::empty(row_shape(x), DType::Float64)};
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor* out_bf16) {
  check_layer_norm_input(x, weight, bias, eps, "layer_norm");
  const int64_t cols = x.shape().back();
  const int64_t rows = x.numel() / cols;
  Tensor xc = x.contiguous();  // (..., D)
  LayerNormResult r = empty_result(x);
  Tensor wc = weight.defined() ? weight.contiguous() : Tensor();  // (D,)
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();      // (D,)
  dispatch_float(x.dtype(), "layer_norm", [&]<class T>() {
    const T* px = xc.data<T>();
    const T* pw = wc.defined() ? wc.data<T>() : nullptr;
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* py = r.out.data<T>();
    double *pm = r.mean.data<double>(), *ps = r.rstd.data<double>();
    bfloat16* pyb = bf16_out<T>(x, out_bf16);
    parallel_for(rows, row_grain(3 * cols), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        norm_row(px + i * cols, py + i * cols, cols, pw, pb, eps, pm[i], ps[i]);
        if constexpr (std::is_same_v<T, float>)
          if (pyb) to_bf16(py + i * cols, pyb + i * cols, cols);
      }
    });
  });
  return r;
}

LayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, double p, double scale, Generator& gen, Tensor& keep,
                               const Tensor& weight, const Tensor& bias, double eps, Tensor* out_bf16) {
  check_layer_norm_input(x, weight, bias, eps, "add_layer_norm");
  check_same_dtype(x, y, "add_layer_norm");
  GF_CHECK(x.shape() == y.shape(), "add_layer_norm: residual {} and sub-layer output {} differ in shape", shape_str(x.shape()),
           shape_str(y.shape()));
  GF_CHECK(p >= 0.0 && p <= 1.0, "add_layer_norm: drop probability {} is outside [0, 1] (input {})", p, shape_str(x.shape()));
  const int64_t cols = x.shape().back();
  const int64_t rows = x.numel() / cols;
  Tensor xc = x.contiguous(), yc = y.contiguous();  // (..., D), (..., D)
  LayerNormResult r = empty_result(x);
  Tensor wc = weight.defined() ? weight.contiguous() : Tensor();  // (D,)
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();      // (D,)
  const bool drop = p > 0.0;
  keep = drop ? Tensor::empty(x.shape(), DType::Bool) : Tensor();  // (..., D), true = kept
  // The numbers dropout_forward(y) would claim, at the same point of the stream.
  const uint64_t base = drop ? gen.reserve(static_cast<uint64_t>(x.numel())) : 0, threshold = keep_threshold(p);
  const Generator g = gen;  // at() reads only the seed
  dispatch_float(x.dtype(), "add_layer_norm", [&]<class T>() {
    const T *px = xc.data<T>(), *pyin = yc.data<T>();
    const T* pw = wc.defined() ? wc.data<T>() : nullptr;
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* py = r.out.data<T>();
    double *pm = r.mean.data<double>(), *ps = r.rstd.data<double>();
    uint8_t* pk = drop ? reinterpret_cast<uint8_t*>(keep.data<bool>()) : nullptr;
    bfloat16* pyb = bf16_out<T>(x, out_bf16);
    const T s = static_cast<T>(scale);
    parallel_for(rows, row_grain(4 * cols), [&](int64_t lo, int64_t hi) {
      std::vector<T> sum(cols);  // (D,): one row of x + dropout(y)
      for (int64_t i = lo; i < hi; ++i) {
        uint8_t* kr = pk ? pk + i * cols : nullptr;
        if (kr) draw_keeps(kr, g, base + static_cast<uint64_t>(i * cols), cols, threshold);
        residual_row(px + i * cols, pyin + i * cols, kr, s, sum.data(), cols);
        norm_row(sum.data(), py + i * cols, cols, pw, pb, eps, pm[i], ps[i]);
        if constexpr (std::is_same_v<T, float>)
          if (pyb) to_bf16(py + i * cols, pyb + i * cols, cols);
      }
    });
  });
  return r;
}

LayerNormResult add_layer_norm_reference(const Tensor& x, const Tensor& y, double p, double scale, Generator& gen, Tensor& keep,
                                         const Tensor& weight, const Tensor& bias, double eps) {
  keep = Tensor();
  const Tensor dropped = p > 0.0 ? dropout_forward(y, p, scale, gen, keep) : y;  // (..., D)
  return layer_norm(add(x, dropped), weight, bias, eps);
}

namespace {

// Both backward forms: x is the input (with mean), or, with from_output, the output y (with bias).
// With `dropped` (add_layer_norm's backward), dx * (drop_scale or 0) where keep, the gradient of
// the dropped sub-layer output, is written in the same pass as dx (need_x must then be set).
struct DroppedGrad {
  const Tensor* keep = nullptr;  // (..., D) bool
  double scale = 1.0;
  Tensor* out = nullptr;
};

LayerNormGrads backward_rows(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                             const Tensor& bias, bool from_output, bool need_x, bool need_weight, bool need_bias,
                             const DroppedGrad& dropped = {}) {
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
  Tensor kc = dropped.out ? dropped.keep->contiguous() : Tensor();     // (..., D) bool
  if (dropped.out) *dropped.out = Tensor::empty(x.shape(), x.dtype());  // (..., D)

  // Weight and bias gradients are summed by row blocks (row_blocks.h): the same for any thread count.
  const RowBlocks blocks = row_blocks(rows, 4 * cols);
  std::vector<double> part_w(need_weight ? blocks.count * cols : 0), part_b(need_bias ? blocks.count * cols : 0);  // (blocks, D)

  dispatch_float(x.dtype(), "layer_norm_backward", [&]<class T>() {
    const T *px = xc.data<T>(), *pg = gc.data<T>();
    const double *pm = from_output ? nullptr : mc.data<double>(), *ps = sc.data<double>();
    const T* pw = wc.defined() ? wc.data<T>() : nullptr;
    const T* pb = bc.defined() ? bc.data<T>() : nullptr;
    T* pgx = need_x ? out.x.data<T>() : nullptr;
    const uint8_t* pk = dropped.out ? reinterpret_cast<const uint8_t*>(kc.data<bool>()) : nullptr;
    T* pgd = dropped.out ? dropped.out->data<T>() : nullptr;
    const T ds = static_cast<T>(dropped.scale);
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
            if (pgd) {  // as apply_mask(dx, keep, scale): dx * (scale * keep)
              const uint8_t* kr = pk + i * cols;
              T* gdr = pgd + i * cols;
              for (int64_t j = 0; j < cols; ++j) gdr[j] = gxr[j] * (ds * static_cast<T>(kr[j]));
            }
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

AddLayerNormGrads add_layer_norm_backward(const Tensor& g, const Tensor& out, const Tensor& rstd, const Tensor& weight, const Tensor& bias,
                                          const Tensor& keep, double scale, bool need_x, bool need_y, bool need_weight, bool need_bias) {
  AddLayerNormGrads r;
  const bool dropped = need_y && keep.defined();
  if (dropped) {
    GF_CHECK(keep.dtype() == DType::Bool && keep.shape() == out.shape(), "add_layer_norm_backward: keep {} {} does not match output {}",
             dtype_name(keep.dtype()), shape_str(keep.shape()), shape_str(out.shape()));
  }
  static_cast<LayerNormGrads&>(r) = backward_rows(g, out, Tensor(), rstd, weight, bias, true, need_x || need_y, need_weight, need_bias,
                                                  dropped ? DroppedGrad{&keep, scale, &r.y} : DroppedGrad{});
  if (need_y && !dropped) r.y = r.x;  // no dropout: d(x + y)/dy is the identity, as add's backward gives g to both
  if (!need_x) r.x = Tensor();
  return r;
}

}  // namespace gf::kernels

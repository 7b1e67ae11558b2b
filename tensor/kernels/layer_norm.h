#pragma once
// Layer normalisation over the last dim, fused: y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps) (biased variance), as PyTorch's native layer norm. The forward
// returns the per-row mean and rstd so that backward needs nothing else but x. They are kept in
// float64: x - mean is formed in double, so rows with a large mean (|mean| >> std) keep their
// precision in float32 too (a float32 mean alone would be off by half an ulp of the mean).
#include "tensor/kernels/random.h"
#include "tensor/tensor.h"

namespace gf::kernels {

struct LayerNormResult {
  Tensor out;   // (..., D)
  Tensor mean;  // (...) one per row, float64 whatever x's dtype (see below)
  Tensor rstd;  // (...) float64
};

// weight and bias are (D,) or undefined (then 1 and 0). out_bf16, if given (float32 x only),
// receives the output rounded to bfloat16 (as to_bf16), written row by row with it.
LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor* out_bf16 = nullptr);

struct LayerNormGrads {
  Tensor x;       // (..., D), undefined unless asked for
  Tensor weight;  // (D,)
  Tensor bias;    // (D,)
};

// One pass over the rows gives all three gradients; weight and bias gradients are summed over
// rows in fixed blocks, so the result does not depend on the thread count.
LayerNormGrads layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_x, bool need_weight, bool need_bias);
// The same gradients from the output y instead of the input: the normalised input is recovered as
// (y - bias) / weight, so the input need not be kept (Apex's memory-efficient LayerNorm). Every
// weight element must be nonzero; weight and bias may be undefined (1 and 0).
LayerNormGrads layer_norm_backward_from_output(const Tensor& g, const Tensor& y, const Tensor& rstd, const Tensor& weight,
                                               const Tensor& bias, bool need_x, bool need_weight, bool need_bias);

// ---- the post-norm residual: layer_norm(x + dropout(y)) in one pass over the rows ----
// x is the residual, y the sub-layer's output. The dropout on y draws what dropout_forward(y, p,
// scale, gen, keep) draws, at the same point of gen's stream (keep: (..., D) bool, true = kept;
// undefined when p == 0, which draws nothing); the sum x + y * (scale or 0) is formed one row at a
// time and never stored. The same bits as add_layer_norm_reference, the three kernels in turn.
LayerNormResult add_layer_norm(const Tensor& x, const Tensor& y, double p, double scale, Generator& gen, Tensor& keep,
                               const Tensor& weight, const Tensor& bias, double eps, Tensor* out_bf16 = nullptr);
// The plain reference: layer_norm(add(x, dropout_forward(y))) (no dropout when p == 0).
LayerNormResult add_layer_norm_reference(const Tensor& x, const Tensor& y, double p, double scale, Generator& gen, Tensor& keep,
                                         const Tensor& weight, const Tensor& bias, double eps);

struct AddLayerNormGrads : LayerNormGrads {
  Tensor y;  // (..., D): the sub-layer output's gradient, dx * (scale or 0) where keep; dx itself without dropout
};
// add_layer_norm's backward from its output (as layer_norm_backward_from_output; every weight
// element nonzero): dx, and dy in the same pass as the same bits as apply_mask(dx, keep, scale).
AddLayerNormGrads add_layer_norm_backward(const Tensor& g, const Tensor& out, const Tensor& rstd, const Tensor& weight, const Tensor& bias,
                                          const Tensor& keep, double scale, bool need_x, bool need_y, bool need_weight, bool need_bias);

}  // namespace gf::kernels

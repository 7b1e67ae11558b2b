#pragma once
// Layer normalisation over the last dim, fused: y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps) (biased variance), as PyTorch's native layer norm. The forward
// returns the per-row mean and rstd so that backward needs nothing else but x. They are kept in
// float64: x - mean is formed in double, so rows with a large mean (|mean| >> std) keep their
// precision in float32 too (a float32 mean alone would be off by half an ulp of the mean).
#include "tensor/tensor.h"

namespace gf::kernels {

struct LayerNormResult {
  Tensor out;   // (..., D)
  Tensor mean;  // (...) one per row, float64 whatever x's dtype (see below)
  Tensor rstd;  // (...) float64
};

// weight and bias are (D,) or undefined (then 1 and 0).
LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

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

}  // namespace gf::kernels

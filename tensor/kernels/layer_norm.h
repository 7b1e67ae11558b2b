#pragma once
// Layer normalisation over the last dim, fused: y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps) (biased variance), as PyTorch's native layer norm. The forward
// returns the per-row mean and rstd so that backward needs nothing else but x.
#include "tensor/tensor.h"

namespace gf::kernels {

struct LayerNormResult {
  Tensor out;   // (..., D)
  Tensor mean;  // (...) one per row, x's dtype
  Tensor rstd;  // (...)
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

}  // namespace gf::kernels

#pragma once
// Softmax and log-softmax over the last dim, fused and numerically stable (the row max is
// subtracted before exp). A row whose entries are all -inf (every position masked) gives
// softmax 0 everywhere and log_softmax -inf everywhere, and a zero gradient in both: never NaN.
#include "tensor/tensor.h"

namespace gf::kernels {

Tensor softmax(const Tensor& x);      // (..., C) -> (..., C)
Tensor log_softmax(const Tensor& x);  // (..., C) -> (..., C)

// Gradients from the saved output y and the upstream gradient g (both (..., C)):
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
Tensor softmax_backward(const Tensor& y, const Tensor& g);
Tensor log_softmax_backward(const Tensor& y, const Tensor& g);

}  // namespace gf::kernels

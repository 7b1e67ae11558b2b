#pragma once
// Elementwise unary kernels and their backward formulas. Each backward kernel turns the upstream
// gradient g into the input's gradient from the one tensor its forward saved: the output y where
// the derivative is cheapest in terms of y (exp, sqrt, tanh, relu, sigmoid), else the input x.
// All take float32 or float64 tensors of any layout and return dense tensors of the same shape.
#include "tensor/tensor.h"

namespace gf::kernels {

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double p);  // x^p elementwise
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);     // exact: x * Phi(x), Phi the standard normal CDF (via erf)
Tensor sigmoid(const Tensor& x);  // 1 / (1 + e^-x), without overflow for large |x|

Tensor exp_backward(const Tensor& g, const Tensor& y);      // g * y
Tensor log_backward(const Tensor& g, const Tensor& x);      // g / x
Tensor sqrt_backward(const Tensor& g, const Tensor& y);     // g / (2 y)
Tensor pow_backward(const Tensor& g, const Tensor& x, double p);  // g * p * x^(p-1)
Tensor tanh_backward(const Tensor& g, const Tensor& y);     // g * (1 - y^2)
Tensor relu_backward(const Tensor& g, const Tensor& y);     // g where y > 0, else 0
Tensor gelu_backward(const Tensor& g, const Tensor& x);     // g * (Phi(x) + x * phi(x))
Tensor sigmoid_backward(const Tensor& g, const Tensor& y);  // g * y * (1 - y)

}  // namespace gf::kernels

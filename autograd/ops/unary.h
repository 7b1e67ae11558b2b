#pragma once
// Elementwise unary functions on Variables.
#include "autograd/variable.h"

namespace gf {

Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable pow(const Variable& x, double p);
Variable tanh(const Variable& x);
Variable relu(const Variable& x);
Variable gelu(const Variable& x);  // exact erf form x * Phi(x), PyTorch's default
Variable sigmoid(const Variable& x);

}  // namespace gf

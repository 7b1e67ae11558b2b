#pragma once
// Layer normalisation over the last dim, as PyTorch's F.layer_norm(x, (D,), weight, bias, eps).
#include "autograd/variable.h"

namespace gf {

// x (..., D); weight and bias (D,) or undefined Variables (no affine transform).
Variable layer_norm(const Variable& x, const Variable& weight = Variable(), const Variable& bias = Variable(),
                    double eps = 1e-5);

}  // namespace gf

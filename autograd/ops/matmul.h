#pragma once
// Matrix products on Variables: batched matmul with broadcast batch dims, and nn.Linear's affine map.
#include "autograd/variable.h"

namespace gf {

// a (..., m, k) @ b (..., k, n) -> (..., m, n), batch dims broadcast (NumPy). Transposed views
// (e.g. matmul(q, transpose(k, -1, -2))) reach BLAS through its transpose flags, with no copy.
Variable matmul(const Variable& a, const Variable& b);

// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out), as PyTorch's nn.Linear.
// bias may be an undefined Variable (no bias).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias = Variable());

}  // namespace gf

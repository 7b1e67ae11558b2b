#pragma once
// Softmax and log-softmax over the last dim (fused, numerically stable). A row that is all -inf
// (fully masked) gives softmax 0 and log_softmax -inf there, each with a zero gradient.
#include "autograd/variable.h"

namespace gf {

Variable softmax(const Variable& x);      // (..., C) -> (..., C)
Variable log_softmax(const Variable& x);  // (..., C) -> (..., C)

}  // namespace gf

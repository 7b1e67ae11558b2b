#pragma once
// Selection ops on Variables: the embedding gather, masked_fill and where.
#include <cstdint>

#include "autograd/variable.h"

namespace gf {

// Rows of weight (N, D...) picked by int64 `indices` of any shape: the result has shape
// indices.shape + weight.shape[1:] (the embedding lookup). The gradient scatter-adds back into
// weight's rows; rows picked more than once accumulate. Positions whose index is padding_idx
// (when >= 0) send no gradient, so that row stays as it is.
Variable index_select(const Variable& weight, const Tensor& indices, int64_t padding_idx = -1);

// x with `value` (may be -INFINITY) where the bool mask, broadcastable to x's shape, is true.
// Masked positions get zero gradient.
Variable masked_fill(const Variable& x, const Tensor& mask, double value);

// cond ? a : b elementwise with broadcasting over all three; a's and b's gradients are summed
// back to their own shapes.
Variable where(const Tensor& cond, const Variable& a, const Variable& b);

}  // namespace gf

#pragma once
// Kernels that move elements by position rather than compute on them: the embedding gather and
// its scatter-add, scatter along a dim (the backward of max), where/masked_fill, and concat.
// Index tensors are int64 and range-checked; masks and conditions are bool.
#include <vector>

#include "tensor/tensor.h"

namespace gf::kernels {

// out[i..., :] = weight[indices[i...], :]: rows of `weight` (N, D...) picked by `indices` of any
// shape; the result has shape indices.shape + weight.shape[1:]. The embedding lookup.
Tensor index_select(const Tensor& weight, const Tensor& indices);

// dst[indices[i...], :] += src[i..., :] for every position of `indices`, skipping positions whose
// index equals skip_index (when skip_index >= 0). dst (N, D...) must be contiguous; src has shape
// indices.shape + dst.shape[1:]. Repeated indices accumulate; the result does not depend on the
// thread count (each thread owns a block of feature columns and walks the indices in order).
void index_add_(Tensor& dst, const Tensor& indices, const Tensor& src, int64_t skip_index = -1);

// A zero tensor of `shape` with out[..., index[..., k, ...], ...] += src[..., k, ...] along `dim`:
// index and src share a shape that equals `shape` except in `dim`. The backward of max/gather.
Tensor scatter_add_along(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src);

// out = cond ? a : b elementwise, cond bool; all three broadcast to a common shape.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// x with `value` wherever mask (bool, broadcastable to x's shape) is true; value may be -inf.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Joins tensors of one dtype along `dim`; their shapes must agree in every other dim.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);

}  // namespace gf::kernels

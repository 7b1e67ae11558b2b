#pragma once
// Weights laid out for decoding. A decoding step multiplies a few rows by every weight matrix, and
// OpenBLAS repacks a matrix at every call; from the (out, in) row-major layout it needs a
// transposing copy, from column-major (the same (out, in) tensor with strides (1, out)) a plain
// one, which is cheaper (docs/performance.md). Same values and shapes; the products agree to
// rounding, not always to the bit: OpenBLAS may sum a column-major operand's terms in another order
// (its SkylakeX and Cooperlake small-matrix kernels do). Decoding in groups also lets OpenBLAS's
// AVX-512 kernels skip packing (decode_column_block in tensor/kernels/matmul.h), which needs this
// layout.
#include "nn/module.h"

namespace gf::nn {

// Gives every weight that linear() reads (Linear's weight, MultiheadAttention's in_proj_weight)
// the column-major layout, in place: each parameter keeps its Variable, name and values, so the
// module still loads, saves and runs forward as before. A weight shared with an Embedding (tied)
// is left as it is, as embedding lookups read its rows. For models that only decode from now on:
// an optimizer built earlier keeps the old storage.
void lay_out_for_decoding(Module& root);

// Whether `w` (2-D) is stored column-major, as lay_out_for_decoding leaves it.
bool is_column_major(const Tensor& w);

}  // namespace gf::nn

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
// weights = BFloat16 (a model decoded with bf16 products, --precision bf16): those weights are
// also rounded to bfloat16, once, and kept only so: half their bytes, and no float32 copy beside
// the bf16 one that each product would otherwise round the weight into. linear() then needs bf16
// products and no gradient (it says so otherwise). A σReparam weight, computed at each call, a
// tied one and a float64 one stay as they are.
void lay_out_for_decoding(Module& root, DType weights = DType::Float32);

// Whether `w` (2-D) is stored column-major, as lay_out_for_decoding leaves it.
bool is_column_major(const Tensor& w);

}  // namespace gf::nn

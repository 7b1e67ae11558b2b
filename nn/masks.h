#pragma once
// Attention masks. Boolean masks mean true = blocked; float masks are added to the scores.
#include "tensor/tensor.h"

namespace gf::nn {

// (B, S) bool: true where ids == pad.
Tensor make_pad_mask(const Tensor& ids, int64_t pad);
// (n, n) bool: true above the diagonal (a position may not see later ones). Built once at the
// longest length asked for so far and sliced.
Tensor make_causal_mask(int64_t n);

}  // namespace gf::nn

#pragma once
// Attention masks. Boolean masks mean true = blocked; float masks are added to the scores.
#include "tensor/tensor.h"

namespace gf::nn {

// (B, S) bool: true where ids == pad.
Tensor make_pad_mask(const Tensor& ids, int64_t pad);
// (n, n) bool: true above the diagonal (a position may not see later ones). Built once at the
// longest length asked for so far and sliced.
Tensor make_causal_mask(int64_t n);

// MultiheadAttention's masks for B rows, H heads, L queries and S keys: key_padding_mask (B, S) and
// attn_mask (L, S) or (B*H, L, S), each undefined, bool or floating; anything else is an error.
void check_attention_masks(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t B, int64_t H, int64_t L, int64_t S);
// OR of the boolean masks as one (B, 1, L, S) or (B, H, L, S) tensor; undefined if none is bool.
Tensor combine_bool_masks(const Tensor& key_padding_mask, const Tensor& attn_mask, int64_t B, int64_t H, int64_t L, int64_t S);

}  // namespace gf::nn

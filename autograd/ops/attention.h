#pragma once
// Fused scaled-dot-product attention: softmax(scale * q k^T, blocked keys -> weight 0), dropout on
// the weights, times v, in one op whose scores never exist as a (B, H, L, S) tensor (forward or
// backward). MultiheadAttention uses it whenever it can (docs/attention.md).
#include "autograd/variable.h"
#include "tensor/kernels/random.h"

namespace gf {

struct FusedAttentionOptions {
  int64_t heads = 1, kv_heads = 1;  // query heads H; key/value heads KV dividing H (grouped query)
  double scale = 1.0;
  Tensor key_padding_mask;  // (B, S) bool (true = blocked) or undefined
  Tensor attn_mask;         // (L, S) bool (true = blocked) or undefined
  double dropout_p = 0.0;   // on the weights; 0 = off (pass 0 in eval)
  Generator* gen = nullptr; // drawn from when dropout_p > 0: B*H*L*S numbers, as dropout() on (B, H, L, S)
  int64_t block_q = 0, block_k = 0;  // tile sizes; 0 = the kernel's defaults
};

// q (B, L, H*d_k), k and v (B, S, KV*d_k) -> (B, L, H*d_k), heads merged. The inputs may be
// narrow() views of a packed projection (B, L, 3D): they are read in place. A query row with
// every key blocked gives 0 and zero gradients, as softmax() does.
Variable fused_attention(const Variable& q, const Variable& k, const Variable& v, const FusedAttentionOptions& options);

// Self-attention on the packed projection qkv (B, L, (H + 2 KV) d_k): q, k and v are its column
// blocks [0, H d_k), [H d_k, (H + KV) d_k), [(H + KV) d_k, end). The same as fused_attention on
// narrow() views, but the gradient is one (B, L, (H + 2 KV) d_k) tensor written in place, rather than
// three zero-padded slices summed by the engine.
Variable fused_self_attention(const Variable& qkv, const FusedAttentionOptions& options);

}  // namespace gf

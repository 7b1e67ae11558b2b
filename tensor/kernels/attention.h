#pragma once
// Fused, blocked scaled-dot-product attention (FlashAttention-style online softmax) with its
// backward. The scores are never held as a (B, H, L, S) tensor: the forward walks key blocks for
// each block of queries, keeping a running max and a running sum per row, and saves only the output
// and one log-sum-exp per row; the backward recomputes each block of scores from Q, K and the
// log-sum-exp. Memory is O(B*H*L) beside the inputs, not O(B*H*L*S). See docs/attention.md.
//
// Layout: q (B, L, H*d_k), k and v (B, S, KV*d_k), each with unit stride in the last dim and any
// row stride (so narrow() views of a packed (B, L, 3D) projection are read in place); head h's
// features are columns [h*d_k, (h+1)*d_k). Query head h uses key/value head h / (H / KV) (grouped
// query; K and V are never repeated). The output is (B, L, H*d_k), dense: heads already merged.
//
// Under --precision bf16, q, k and v are bfloat16 (to_bf16 of the projections): the tiles' products
// take bfloat16 operands and accumulate in float32 (bf16_tile.h), while the scores, the online
// softmax, the output, the log-sum-exp, dO for D = rowsum(dO * O), and the gradients are float32.
#include <cstdint>

#include "tensor/kernels/random.h"
#include "tensor/tensor.h"

namespace gf::kernels {

struct AttentionConfig {
  int64_t heads = 1, kv_heads = 1;
  double scale = 1.0;             // scores are scale * (q . k)
  Tensor key_padding_mask;        // (B, S) bool, true = blocked; or undefined
  Tensor attn_mask;               // (L, S) bool, true = blocked; or undefined
  // Dropout on the softmax weights: the keep decision for weight (b, h, l, s) is number
  // base + ((b*H + h)*L + l)*S + s of gen's stream, as keep_mask() draws for a (B, H, L, S) tensor.
  double dropout_p = 0.0;
  Generator gen;                  // a copy: at() reads only the seed
  uint64_t dropout_base = 0;
  int64_t block_q = 0, block_k = 0;  // 0 = the default tile sizes (tests use small odd ones)
  bool out_bf16 = false;  // the forward also writes its output rounded to bfloat16 (float32 output only)
};

struct AttentionForward {
  Tensor out;  // (B, L, H*d_k)
  Tensor lse;  // (B, H, L): log-sum-exp of each row's scores, -inf for a row with every key blocked
  Tensor out_bf16;  // (B, L, H*d_k) bfloat16: out as to_bf16 rounds it, with cfg.out_bf16; else undefined
};

struct AttentionGrads {
  Tensor q, k, v;  // (B, L, H*d_k), (B, S, KV*d_k), (B, S, KV*d_k), dense
};

AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionConfig& cfg);

// g is the gradient of the output (B, L, H*d_k); out and lse are attention_forward's.
AttentionGrads attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const AttentionConfig& cfg);

// The same, adding into dq, dk, dv (zeroed by the caller; shapes of q, k, v, unit stride in the
// last dim, any row stride): narrow() views of one (B, L, 3D) buffer give the gradient of a packed
// projection in one tensor.
void attention_backward_into(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionConfig& cfg, const Tensor& dq, const Tensor& dk,
                             const Tensor& dv);

}  // namespace gf::kernels

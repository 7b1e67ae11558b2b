#pragma once
// Multi-head attention, batch-first, with nn.MultiheadAttention's parameters and semantics:
//   q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v   (W_q|W_k|W_v = in_proj_weight)
//   per head h (d_k = D / H features each): weights = softmax(q_h k_h^T / sqrt(d_k) + masks)
//   output = concat_h(weights_h v_h) out_proj.weight^T + out_proj.bias
// Grouped-query attention (Ainslie et al. 2023) with kv_heads < H: keys and values are projected to
// kv_heads heads only, and query head h uses key/value head h / (H / kv_heads) (PyTorch's
// repeat_interleave order); kv_heads = 1 is multi-query attention (Shazeer 2019). The projections
// are then separate q_proj, k_proj, v_proj Linears, as Hugging Face names them.
// Masks: key_padding_mask (B, S) and attn_mask (L, S) or (B*H, L, S), each bool (true = blocked,
// the score becomes -inf) or float (added to the scores). A row with every key blocked gets zero
// weights (softmax's rule), never NaN.
#include <functional>
#include <memory>
#include <utility>

#include "autograd/ops/attention.h"
#include "nn/dropout.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace gf::nn {

struct AttentionResult {
  Variable output;   // (B, L, D)
  Variable weights;  // (B, H, L, S) per head, part of the graph; undefined unless asked for
};

class MultiheadAttention : public Module {
 public:
  // kv_heads: 0 or num_heads = multi-head; fewer (a divisor of num_heads) = grouped-query.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     Generator& gen = default_generator(), int64_t kv_heads = 0);

  AttentionResult forward(const Variable& query, const Variable& key, const Variable& value,
                          const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor(),
                          bool need_weights = false) const;

  // The pieces, for incremental decoding with a KV cache (KV = kv_heads).
  Variable project_q(const Variable& x) const;                       // (B, L, D) -> (B, H, L, d_k)
  std::pair<Variable, Variable> project_kv(const Variable& x) const;  // (B, S, D) -> 2 x (B, KV, S, d_k)
  // q (B, H, L, d_k), k and v (B, KV, S, d_k) -> output (B, L, D) after out_proj.
  AttentionResult attend(const Variable& q, const Variable& k, const Variable& v, const Tensor& key_padding_mask,
                         const Tensor& attn_mask, bool need_weights) const;
  // An empty cache for `batch` rows and up to `capacity` positions.
  KVCache start_cache(int64_t batch, int64_t capacity, DType dtype) const;
  // Self-attention of x's t new positions (B, t, D) over the cache and themselves, causally: new
  // position i sees every cached position and new positions <= i. Their K and V are appended.
  // No graph is recorded. Returns (B, t, D).
  AttentionResult forward_cached(const Variable& x, KVCache& cache, bool need_weights = false) const;
  // Attention of one new position per row over a cache, with no (B, H, 1, S) tensors and no
  // per-head GEMM calls: q (R, H, 1, d_k); k and v (Bk, KV, capacity, d_k), of which positions
  // [0, len) are used; row r reads key/value row kv_rows[r] (empty: row r), so the rows of one
  // sentence's beam share its cross-attention keys and values; key_padding_mask (R, len) per query
  // row, bool or float, or undefined; position_rows (R x capacity), if not empty, names the
  // key/value row of each (row, position) instead (KVCache::position_rows). Returns (R, 1, D)
  // after out_proj; no weights, no graph. The loop is kernels::attend_one (tensor/kernels/attend_one.h).
  Variable attend_one(const Variable& q, const Tensor& k, const Tensor& v, int64_t len, const std::vector<int64_t>& kv_rows,
                      const Tensor& key_padding_mask, const std::vector<int64_t>& position_rows = {}) const;

  bool grouped() const { return kv_heads != num_heads; }

  Variable in_proj_weight;  // (3D, D): multi-head only
  Variable in_proj_bias;    // (3D): multi-head only
  std::shared_ptr<Linear> q_proj;          // D -> D: grouped-query only
  std::shared_ptr<Linear> k_proj, v_proj;  // D -> KV * d_k: grouped-query only
  std::shared_ptr<Linear> out_proj;
  std::shared_ptr<Dropout> attn_dropout;
  int64_t embed_dim, num_heads, kv_heads, head_dim;

  // ---- switches for experiments (the gradient-flow labs); the defaults are the Transformer ----
  // Scores are (q . k) * score_scale: 1 / sqrt(head_dim) unless changed (1.0 = "no 1/sqrt(d_k)").
  double score_scale;
  // true: the softmax is written out as exp(s - max) / sum, as a naive implementation does, and a
  // row with every key blocked gives (-inf) - (-inf) = NaN. false: the guarded softmax (zeros).
  bool naive_softmax = false;
  // When set, called on every forward with the attention weights (B, H, L, S) (before dropout,
  // part of the graph, so retain_grad() and hooks work on them): per-head statistics, pictures.
  std::function<void(const Variable&)> weights_observer;
  // When set, called on every forward with the weights (B, H, L, S) as plain data (before dropout).
  // Unlike weights_observer it keeps the fused op: the weights are then computed apart, without a
  // graph and without drawing random numbers, so the forward's numbers are unchanged by it
  // (train --grad-stats reads entropies through it).
  std::function<void(const Tensor&)> weights_peek;
  // When set, the attention weights (B, H, L, S) are replaced by what it returns (same shape)
  // before dropout, the observers and the mixing of the values: counterfactual attention, e.g. each
  // row permuted over its keys or made uniform (Jain and Wallace 2019; Wiegreffe and Pinter 2019).
  // forward() and forward_cached() then take the unfused path; attend_one() (one new position of
  // cached decoding) does not apply it.
  std::function<Variable(const Variable&)> weights_transform;
  // forward() runs the fused, blocked attention op (autograd/ops/attention.h, docs/attention.md)
  // unless the weights are asked for (need_weights, weights_observer, weights_transform),
  // naive_softmax is set, or a mask is float or per head. false forces the unfused path; the
  // environment variable GRADFLOW_UNFUSED_ATTENTION=1 sets false for every module built after it
  // is read (A/B runs).
  bool fused = true;

  // σReparam (Zhai et al. 2023, arXiv:2303.06296; nn/sigma_reparam.h) on the query and key
  // projections, and with `all` on the value and output projections too. Each weight W (W_q,
  // W_k: (H * d_k or KV * d_k, D)) is then used as (γ / σ(W)) W: σ(W) its spectral norm, estimated
  // by one power-iteration step per forward from the previous step's vector (a buffer, advanced only
  // by forwards that record a graph in training mode, so that probes and evaluation leave it alone),
  // γ a learned scalar initialised to σ(W), so that the module computes what it computed before.
  // Why for W_q and W_k: σ(W_q) σ(W_k) bounds the attention logits and through them how low a
  // head's entropy can go (the paper's Theorem 3.1); under Adam σ(W) can grow by about
  // lr * sqrt(rows * cols) per step, γ by about lr. Adds parameters q_gamma, k_gamma (and v_gamma,
  // out_proj.sigma_gamma) of shape (1) and buffers q_sigma_u, k_sigma_u (v_sigma_u,
  // out_proj.sigma_u) of shape (D): call it before an optimizer is built from the parameters, and
  // before loading a state saved with it. Calling it twice is an error.
  void use_sigma_reparam(bool all = false);
  bool sigma_reparam() const { return sigma_reparam_; }
  // The query (which = 0), key (1) or value (2) projection weight forward() uses: W, or
  // (γ / σ(W)) W under σReparam (advancing its vector as a forward does).
  Variable projection_weight(int which) const;

 private:
  // The projections with the heads not yet split: (B, L, D) and 2 x (B, S, KV * d_k).
  Variable q_rows(const Variable& x) const;
  std::pair<Variable, Variable> kv_rows(const Variable& x) const;
  // attend() on unsplit projections: the fused op when allowed, else split_heads and attend().
  AttentionResult attend_rows(const Variable& q, const Variable& k, const Variable& v, const Tensor& key_padding_mask,
                              const Tensor& attn_mask, bool need_weights) const;
  bool can_fuse(const Tensor& key_padding_mask, const Tensor& attn_mask, bool need_weights) const;
  FusedAttentionOptions fused_options(const Tensor& key_padding_mask, const Tensor& attn_mask) const;
  // softmax(scores + masks) (B, H, L, S) from q (B, H, L, d_k) and k (B, KV, S, d_k): attend()'s first half.
  Variable weights_of(const Variable& q, const Variable& k, const Tensor& key_padding_mask, const Tensor& attn_mask) const;
  // weights_peek's call on the fused path: the weights from the unsplit projections, no graph.
  void peek_weights(const Variable& q, const Variable& k, const Tensor& key_padding_mask, const Tensor& attn_mask) const;
  void check_input(const Variable& x, const char* what) const;  // x (B, len, embed_dim)
  Variable split_heads(const Variable& x, int64_t heads) const;  // (B, L, heads * d_k) -> (B, heads, L, d_k) contiguous
  // W_q, W_k or W_v (which = 0, 1, 2) as stored: a block of in_proj_weight, or q/k/v_proj's weight.
  Variable raw_weight(int which) const;
  Variable raw_bias(int which) const;  // undefined without biases
  bool reparametrised(int which) const { return which < 2 ? sigma_reparam_ : sigma_value_; }

  bool sigma_reparam_ = false, sigma_value_ = false;
};

}  // namespace gf::nn

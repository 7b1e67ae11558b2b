#pragma once
// The Transformer decoder: layers as nn.TransformerDecoderLayer (masked self-attention with the
// causal and target padding masks, cross-attention `multihead_attn` with the source padding mask
// only, then the FFN), the stack with its final LayerNorm, and incremental decoding with a KV
// cache: self-attention K/V grow by one position a step, cross-attention K/V are projected once.
#include <memory>
#include <optional>
#include <vector>

#include "nn/transformer_encoder.h"

namespace gf::nn {

// One layer's cache for incremental decoding.
struct DecoderLayerCache {
  KVCache self;             // the target positions so far
  Tensor cross_k, cross_v;  // (Bs, KV, S, d_k): the source, projected once (KV = key/value heads)
  // The cross_k/cross_v row each batch row reads (empty: row i reads row i). Reordering or
  // repeating rows only rewrites this: the hypotheses of one sentence share its source's K/V.
  std::vector<int64_t> cross_rows;
  int64_t bytes() const;
  // Keeps batch rows `rows` (in that order, repeats allowed): beam search reorders hypotheses with
  // it. The self-attention cache is gathered; the cross-attention K/V are not copied.
  void select_rows(const std::vector<int64_t>& rows);
};

struct DecoderLayerOutput {
  Variable output;         // (B, T, D)
  Variable cross_weights;  // (B, H, T, S) when asked for
};

class TransformerDecoderLayer : public FeedForwardLayer {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& opt, Generator& gen = default_generator());
  // tgt (B, T, D), memory (B, S, D); tgt_mask (T, T) (causal); tgt_key_padding_mask (B, T);
  // memory_key_padding_mask (B, S).
  DecoderLayerOutput forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask = Tensor(),
                             const Tensor& tgt_key_padding_mask = Tensor(), const Tensor& memory_key_padding_mask = Tensor(),
                             bool need_weights = false) const;

  // Incremental decoding (no graph): projects the source into the cache.
  // dtype: the cache's (memory's by default; bfloat16 under float32 halves its bytes).
  void start_cache(DecoderLayerCache& cache, const Variable& memory, int64_t capacity, std::optional<DType> dtype = std::nullopt) const;
  // x (B, 1, D): the newest position; appends its K/V to the cache. Returns (B, 1, D).
  DecoderLayerOutput forward_step(const Variable& x, DecoderLayerCache& cache, const Tensor& memory_key_padding_mask,
                                  bool need_weights = false) const;

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  // linear1, dropout, linear2 or ff, and activation: FeedForwardLayer's (nn/ffn.h)
  std::shared_ptr<Norm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;
  TransformerLayerOptions options;
  // An experiment switch (lab norm): each residual is x * residual_scale + sublayer(...), DeepNorm's
  // alpha (Wang et al. 2022, arXiv:2203.00555); 1 (the default) is the standard layer, computed
  // without the multiplication.
  double residual_scale = 1.0;

 private:
  template <class SelfBlock, class CrossBlock>
  Variable sublayers(const Variable& tgt, SelfBlock self_block, CrossBlock cross_block) const;
};

struct DecoderOutput {
  Variable output;                       // (B, T, D)
  std::vector<Variable> cross_weights;  // per layer (B, H, T, S), when asked for
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& opt, int64_t num_layers, bool final_norm = true,
                     Generator& gen = default_generator());
  DecoderOutput forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask = Tensor(),
                        const Tensor& tgt_key_padding_mask = Tensor(), const Tensor& memory_key_padding_mask = Tensor(),
                        bool need_weights = false) const;
  std::vector<DecoderLayerCache> start_cache(const Variable& memory, int64_t capacity, std::optional<DType> dtype = std::nullopt) const;
  DecoderOutput forward_step(const Variable& x, std::vector<DecoderLayerCache>& caches, const Tensor& memory_key_padding_mask,
                             bool need_weights = false) const;

  std::shared_ptr<ModuleList<TransformerDecoderLayer>> layers;
  std::shared_ptr<Norm> norm;  // null without final_norm
};

}  // namespace gf::nn

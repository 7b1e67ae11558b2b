#pragma once
// The Transformer encoder: layers as nn.TransformerEncoderLayer (batch-first; post-norm by default,
// pre-norm with norm_first; the norm kind, feed-forward kind and grouped-query attention from the
// options) and the stack with its final norm, as nn.Transformer builds it.
#include <memory>

#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/ffn.h"
#include "nn/layer_options.h"
#include "nn/linear.h"
#include "nn/module_list.h"
#include "nn/multihead_attention.h"
#include "nn/norm.h"

namespace gf::nn {

class TransformerEncoderLayer : public FeedForwardLayer {
 public:
  // gen draws the initial weights (a seeded model is reproducible whatever else has drawn).
  explicit TransformerEncoderLayer(const TransformerLayerOptions& opt, Generator& gen = default_generator());
  // src (B, S, D); src_key_padding_mask (B, S); src_mask (S, S) optional.
  Variable forward(const Variable& src, const Tensor& src_key_padding_mask = Tensor(), const Tensor& src_mask = Tensor()) const;
  // Causal self-attention with a KV cache (the decoder-only model's decoding): x (B, t, D) are the
  // next t positions after those in the cache; no graph. Returns (B, t, D).
  Variable forward_cached(const Variable& x, KVCache& cache) const;

  std::shared_ptr<MultiheadAttention> self_attn;
  // linear1, dropout, linear2 or ff, and activation: FeedForwardLayer's (nn/ffn.h)
  std::shared_ptr<Norm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;
  TransformerLayerOptions options;
  // An experiment switch (lab norm): each residual is x * residual_scale + sublayer(...), DeepNorm's
  // alpha (Wang et al. 2022, arXiv:2203.00555); 1 (the default) is the standard layer, computed
  // without the multiplication.
  double residual_scale = 1.0;

 private:
  template <class SelfBlock>
  Variable sublayers(const Variable& src, SelfBlock self_block) const;
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& opt, int64_t num_layers, bool final_norm = true,
                     Generator& gen = default_generator());
  Variable forward(const Variable& src, const Tensor& src_key_padding_mask = Tensor(), const Tensor& mask = Tensor()) const;

  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<Norm> norm;  // null without final_norm
};

}  // namespace gf::nn

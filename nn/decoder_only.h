#pragma once
// A decoder-only (GPT-style) Transformer from the same layers as the translator: token embeddings
// scaled by sqrt(d_model) plus sinusoidal positions, a stack of self-attention layers with the
// causal and padding masks (TransformerEncoderLayer: self-attention and FFN, no cross-attention,
// no encoder), a final norm and the output projection. Names as a PyTorch user would build it from
// nn.TransformerEncoder(..., norm=...) with a causal mask: emb.weight, pos.pe,
// transformer.layers.N.*, transformer.norm.*, out.*.
#include <memory>
#include <optional>
#include <vector>

#include "nn/embedding.h"
#include "nn/positional_encoding.h"
#include "nn/transformer_encoder.h"

namespace gf::nn {

struct DecoderOnlyOptions {
  int64_t vocab = 0;
  TransformerLayerOptions layer;  // every layer (width, heads, kv heads, norm, ...)
  int64_t num_layers = 3;
  bool tie_output = false;  // out.weight shares emb.weight
  int64_t pad = 0;
  int64_t max_len = 512;    // positions in the table
};

class DecoderOnlyTransformer : public Module {
 public:
  explicit DecoderOnlyTransformer(const DecoderOnlyOptions& opt, uint64_t init_seed = 1);

  // ids (B, T) int64, PAD after each sequence -> logits (B, T, vocab); position t sees positions
  // <= t that are not PAD. last_only: the final norm and the output projection run at the last
  // position alone -> (B, 1, vocab) (decoding needs no other position's scores: the projection is
  // the largest product, and a prompt's source positions would be most of its rows).
  Variable forward(const Tensor& ids, bool last_only = false) const;
  // The same up to the output projection: the states (B, T, D) after the final norm, for a loss
  // that applies `out` itself (the training loss, on the scored positions only).
  Variable hidden_states(const Tensor& ids) const;

  // Incremental decoding (no graph): one cache per layer for `batch` rows and `capacity` positions;
  // forward_cached runs ids (B, t) at the positions after those cached (no PAD among them) and
  // returns their logits (B, t, vocab), or with last_only the last position's (B, 1, vocab).
  // dtype: the cache's (the weights' by default; bfloat16 under float32 halves its bytes).
  std::vector<KVCache> start_cache(int64_t batch, int64_t capacity, std::optional<DType> dtype = std::nullopt) const;
  Variable forward_cached(const Tensor& ids, std::vector<KVCache>& caches, bool last_only = false) const;

  Variable embed(const Tensor& ids, int64_t offset = 0) const;  // (B, T) -> (B, T, D)
  const DecoderOnlyOptions& options() const { return options_; }

  std::shared_ptr<Embedding> emb;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<TransformerEncoder> transformer;  // its layers, with the final norm
  std::shared_ptr<Linear> out;

 private:
  DecoderOnlyOptions options_;
};

}  // namespace gf::nn

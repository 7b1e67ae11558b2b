#pragma once
// The translator: embeddings scaled by sqrt(d_model) plus sinusoidal positions, nn.Transformer's
// encoder and decoder (each stack with its final LayerNorm), and the output projection. Names
// match ../shared/reference/torch_translator.py: src_emb, tgt_emb, pos.pe, transformer.encoder.*,
// transformer.decoder.*, out.
#include <memory>
#include <vector>

#include "nn/embedding.h"
#include "nn/positional_encoding.h"
#include "nn/transformer_decoder.h"
#include "nn/transformer_encoder.h"

namespace gf::nn {

struct Seq2SeqOptions {
  int64_t src_vocab = 0, tgt_vocab = 0;
  TransformerLayerOptions layer;  // every encoder and decoder layer (width, heads, norm, ...)
  int64_t num_layers = 3;         // layers in each of the encoder and the decoder
  bool tie_output = false;        // out.weight shares tgt_emb.weight
  int64_t pad = 0;
  int64_t max_len = 512;
};

class Transformer : public Module {
 public:
  Transformer(const TransformerLayerOptions& opt, int64_t num_encoder_layers, int64_t num_decoder_layers,
              Generator& gen = default_generator());
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

class Seq2SeqTransformer : public Module {
 public:
  explicit Seq2SeqTransformer(const Seq2SeqOptions& opt, uint64_t init_seed = 1);

  // Teacher forcing: src (B, S) and tgt_in (B, T) int64 ids -> logits (B, T, tgt_vocab).
  Variable forward(const Tensor& src, const Tensor& tgt_in) const;
  // Also returns each decoder layer's cross-attention weights (B, H, T, S).
  DecoderOutput forward_with_attention(const Tensor& src, const Tensor& tgt_in) const;
  // forward() without the output projection: the decoder's last states (B, T, D), which
  // project() turns into logits. The training loss projects them inside linear_cross_entropy.
  Variable decoder_states(const Tensor& src, const Tensor& tgt_in) const;

  Variable embed_src(const Tensor& src) const;                          // (B, S) -> (B, S, D)
  Variable embed_tgt(const Tensor& tgt, int64_t offset = 0) const;      // (B, T) -> (B, T, D)
  Variable encode(const Tensor& src, const Tensor& src_pad_mask) const;  // -> memory (B, S, D)
  Variable project(const Variable& h) const;                            // (B, T, D) -> (B, T, V)

  const Seq2SeqOptions& options() const { return options_; }

  // Which masks forward() applies. All on is the Transformer; the gradient-flow labs turn one off
  // to show what it is for. (Incremental decoding with a KV cache always applies all three.)
  struct Masks {
    bool causal = true;          // decoder self-attention: no position sees a later one
    bool source_padding = true;  // PAD source keys, in encoder self-attention and cross-attention
    bool target_padding = true;  // PAD target keys, in decoder self-attention
  } masks;
  // Whether the loss's gradient reaches the encoder. Its only path is the decoder's cross-attention
  // reading the memory; false gives the decoder memory.detach(): the same forward, and no gradient
  // for any encoder parameter (the source embedding included). The crossattn lab's control.
  bool encoder_gradient = true;

  std::shared_ptr<Embedding> src_emb, tgt_emb;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<Transformer> transformer;
  std::shared_ptr<Linear> out;

 private:
  DecoderOutput run(const Tensor& src, const Tensor& tgt_in, bool need_weights, bool project_output = true) const;

  Seq2SeqOptions options_;
};

}  // namespace gf::nn

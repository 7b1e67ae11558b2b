#include "nn/seq2seq.h"

#include <cmath>
#include <stdexcept>

#include "autograd/ops/arith.h"
#include "nn/init.h"
#include "nn/masks.h"
#include "tensor/check.h"

namespace gf::nn {

Transformer::Transformer(const TransformerLayerOptions& opt, int64_t n_enc, int64_t n_dec, Generator& gen) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(opt, n_enc, true, gen));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(opt, n_dec, true, gen));
}

Seq2SeqTransformer::Seq2SeqTransformer(const Seq2SeqOptions& opt, uint64_t init_seed) : options_(opt) {
  GF_CHECK(opt.src_vocab > 0 && opt.tgt_vocab > 0, "Seq2SeqTransformer: vocabulary sizes must be positive, got {} and {}",
           opt.src_vocab, opt.tgt_vocab);
  // Every initialiser below draws from this one generator, so the same seed gives the same weights.
  Generator gen(init_seed);
  opt.layer.validate();
  const int64_t D = opt.layer.d_model;
  src_emb = register_module("src_emb", std::make_shared<Embedding>(opt.src_vocab, D, opt.pad, gen));
  tgt_emb = register_module("tgt_emb", std::make_shared<Embedding>(opt.tgt_vocab, D, opt.pad, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(D, opt.max_len));
  drop = register_module("drop", std::make_shared<Dropout>(opt.layer.dropout));
  transformer = register_module("transformer", std::make_shared<Transformer>(opt.layer, opt.num_layers, opt.num_layers, gen));
  out = register_module("out", std::make_shared<Linear>(D, opt.tgt_vocab, true, gen));
  // As the reference: xavier_uniform_ on every parameter with more than one dim.
  for (auto& p : parameters())
    if (p.ndim() > 1) {
      Tensor t = p.data();
      init::xavier_uniform_(t, gen);
    }
  // The reference's xavier pass overwrites the padding rows too; they get no gradient either way,
  // and a zero row keeps padded positions' embeddings at exactly the positional encoding.
  src_emb->weight.data().select(0, opt.pad).zero_();
  tgt_emb->weight.data().select(0, opt.pad).zero_();
  if (opt.tie_output) {
    out->weight = tgt_emb->weight;
    out->set_parameter("weight", tgt_emb->weight);
  }
}

Variable Seq2SeqTransformer::embed_src(const Tensor& src) const {
  Variable e = src_emb->forward(src) * std::sqrt(static_cast<double>(options_.layer.d_model));  // (B, S, D)
  return drop->forward(pos->forward(e));
}

Variable Seq2SeqTransformer::embed_tgt(const Tensor& tgt, int64_t offset) const {
  Variable e = tgt_emb->forward(tgt) * std::sqrt(static_cast<double>(options_.layer.d_model));  // (B, T, D)
  return drop->forward(pos->forward(e, offset));
}

Variable Seq2SeqTransformer::encode(const Tensor& src, const Tensor& src_pad_mask) const {
  return transformer->encoder->forward(embed_src(src), src_pad_mask);  // (B, S, D)
}

Variable Seq2SeqTransformer::project(const Variable& h) const { return out->forward(h); }

DecoderOutput Seq2SeqTransformer::run(const Tensor& src, const Tensor& tgt_in, bool need_weights, bool project_output) const {
  GF_CHECK(src.ndim() == 2 && tgt_in.ndim() == 2 && src.size(0) == tgt_in.size(0),
           "Seq2SeqTransformer: src {} and tgt {} must be (B, S) and (B, T) with the same B", shape_str(src.shape()),
           shape_str(tgt_in.shape()));
  Tensor src_pad = masks.source_padding ? make_pad_mask(src, options_.pad) : Tensor();     // (B, S)
  Tensor tgt_pad = masks.target_padding ? make_pad_mask(tgt_in, options_.pad) : Tensor();  // (B, T)
  Tensor causal = masks.causal ? make_causal_mask(tgt_in.size(1)) : Tensor();            // (T, T)
  Variable memory = encode(src, src_pad);                // (B, S, D)
  if (!encoder_gradient) memory = memory.detach();       // (B, S, D): the encoder gets no gradient
  DecoderOutput d = transformer->decoder->forward(embed_tgt(tgt_in), memory, causal, tgt_pad, src_pad, need_weights);
  if (project_output) d.output = project(d.output);  // (B, T, V); else the states (B, T, D)
  return d;
}

Variable Seq2SeqTransformer::decoder_states(const Tensor& src, const Tensor& tgt_in) const { return run(src, tgt_in, false, false).output; }

DecoderOutput Seq2SeqTransformer::forward_with_attention(const Tensor& src, const Tensor& tgt_in) const { return run(src, tgt_in, true); }

Variable Seq2SeqTransformer::forward(const Tensor& src, const Tensor& tgt_in) const { return run(src, tgt_in, false).output; }

}  // namespace gf::nn

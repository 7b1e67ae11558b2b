#include "nn/transformer_encoder.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "nn/ffn.h"

namespace gf::nn {

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& opt, Generator& gen)
    : FeedForwardLayer(opt), options(opt) {
  // Registration order follows PyTorch's, so named_parameters() lists the same sequence.
  self_attn = register_module("self_attn",
                              std::make_shared<MultiheadAttention>(opt.d_model, opt.nhead, opt.dropout, true, gen, opt.kv_heads));
  register_feed_forward(opt, gen);
  norm1 = register_module("norm1", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
  norm2 = register_module("norm2", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(opt.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(opt.dropout));
}

// The two sub-layers with residuals, post-norm or pre-norm; self-attention varies between the
// full sequence and cached decoding.
template <class SelfBlock>
Variable TransformerEncoderLayer::sublayers(const Variable& src, SelfBlock attention) const {
  auto self_block = [&](const Variable& x) { return dropout1->forward(attention(x)); };  // (B, S, D)
  auto ff_block = [&](const Variable& x) {
    return dropout2->forward(feed_forward_block(x));  // (B, S, D)
  };
  auto skip = [&](const Variable& x) { return residual_scale == 1.0 ? x : x * residual_scale; };  // (B, S, D)
  Variable x = src;  // (B, S, D)
  if (options.norm_first) {
    x = skip(x) + self_block(norm1->forward(x));
    x = skip(x) + ff_block(norm2->forward(x));
  } else if (residual_scale == 1.0) {  // each residual add, its dropout and the norm as one op
    x = norm1->forward_residual(x, attention(x), *dropout1);
    x = norm2->forward_residual(x, feed_forward_block(x), *dropout2);
  } else {
    x = norm1->forward(skip(x) + self_block(x));
    x = norm2->forward(skip(x) + ff_block(x));
  }
  return x;
}

Variable TransformerEncoderLayer::forward(const Variable& src, const Tensor& kpm, const Tensor& src_mask) const {
  return sublayers(src, [&](const Variable& x) { return self_attn->forward(x, x, x, kpm, src_mask).output; });  // (B, S, D)
}

Variable TransformerEncoderLayer::forward_cached(const Variable& x, KVCache& cache) const {
  NoGradGuard ng;
  return sublayers(x, [&](const Variable& h) { return self_attn->forward_cached(h, cache).output; });  // (B, t, D)
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& opt, int64_t num_layers, bool final_norm, Generator& gen) {
  layers = register_module("layers", std::make_shared<ModuleList<TransformerEncoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(opt, gen));
  if (final_norm) norm = register_module("norm", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
}

Variable TransformerEncoder::forward(const Variable& src, const Tensor& kpm, const Tensor& mask) const {
  Variable x = src;  // (B, S, D)
  size_t i = 0;
  for (const auto& layer : *layers) {
    NameScope scope("encoder.layers." + std::to_string(i++));
    x = layer->forward(x, kpm, mask);
  }
  return norm ? norm->forward(x) : x;
}

}  // namespace gf::nn

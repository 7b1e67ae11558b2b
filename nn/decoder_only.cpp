#include "nn/decoder_only.h"

#include <cmath>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/shape.h"
#include "nn/init.h"
#include "nn/masks.h"
#include "tensor/check.h"

namespace gf::nn {

DecoderOnlyTransformer::DecoderOnlyTransformer(const DecoderOnlyOptions& opt, uint64_t init_seed) : options_(opt) {
  GF_CHECK(opt.vocab > 0, "DecoderOnlyTransformer: the vocabulary size must be positive, got {}", opt.vocab);
  opt.layer.validate();
  Generator gen(init_seed);  // every initialiser draws from it: the same seed gives the same weights
  const int64_t D = opt.layer.d_model;
  emb = register_module("emb", std::make_shared<Embedding>(opt.vocab, D, opt.pad, gen));
  pos = register_module("pos", std::make_shared<PositionalEncoding>(D, opt.max_len));
  drop = register_module("drop", std::make_shared<Dropout>(opt.layer.dropout));
  transformer = register_module("transformer", std::make_shared<TransformerEncoder>(opt.layer, opt.num_layers, true, gen));
  out = register_module("out", std::make_shared<Linear>(D, opt.vocab, true, gen));
  // As the translator: xavier_uniform_ on every matrix, the padding row kept at zero.
  for (auto& p : parameters())
    if (p.ndim() > 1) {
      Tensor t = p.data();
      init::xavier_uniform_(t, gen);
    }
  emb->weight.data().select(0, opt.pad).zero_();
  if (opt.tie_output) {
    out->weight = emb->weight;
    out->set_parameter("weight", emb->weight);
  }
}

Variable DecoderOnlyTransformer::embed(const Tensor& ids, int64_t offset) const {
  Variable e = emb->forward(ids) * std::sqrt(static_cast<double>(options_.layer.d_model));  // (B, T, D)
  return drop->forward(pos->forward(e, offset));
}

namespace {
// The last position of (B, T, D) states: (B, 1, D).
Variable last_position(const Variable& x) { return narrow(x, 1, x.size(1) - 1, 1); }
}  // namespace

Variable DecoderOnlyTransformer::forward(const Tensor& ids, bool last_only) const {
  const Variable h = hidden_states(ids);                   // (B, T, D)
  return out->forward(last_only ? last_position(h) : h);  // (B, T, V) or (B, 1, V)
}

Variable DecoderOnlyTransformer::hidden_states(const Tensor& ids) const {
  GF_CHECK(ids.ndim() == 2, "DecoderOnlyTransformer: ids must be (B, T), got {}", shape_str(ids.shape()));
  Tensor pad = make_pad_mask(ids, options_.pad);         // (B, T)
  Tensor causal = make_causal_mask(ids.size(1));          // (T, T)
  return transformer->forward(embed(ids), pad, causal);  // (B, T, D), after the final norm
}

std::vector<KVCache> DecoderOnlyTransformer::start_cache(int64_t batch, int64_t capacity, std::optional<DType> dtype) const {
  std::vector<KVCache> caches;
  const DType d = dtype.value_or(emb->weight.dtype());
  for (const auto& layer : *transformer->layers) caches.push_back(layer->self_attn->start_cache(batch, capacity, d));
  return caches;
}

Variable DecoderOnlyTransformer::forward_cached(const Tensor& ids, std::vector<KVCache>& caches, bool last_only) const {
  NoGradGuard ng;
  GF_CHECK(caches.size() == transformer->layers->size(), "DecoderOnlyTransformer::forward_cached: {} caches for {} layers",
           caches.size(), transformer->layers->size());
  Variable x = embed(ids, caches.empty() ? 0 : caches[0].length);  // (B, t, D)
  for (size_t i = 0; i < caches.size(); ++i) x = (*transformer->layers)[i].forward_cached(x, caches[i]);
  if (last_only) x = last_position(x);                     // (B, 1, D)
  if (transformer->norm) x = transformer->norm->forward(x);
  return out->forward(x);  // (B, t, V) or (B, 1, V)
}

}  // namespace gf::nn

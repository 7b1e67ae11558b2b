#include "nn/transformer_decoder.h"

#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "nn/ffn.h"
#include "tensor/check.h"
#include "tensor/kernels/indexing.h"

namespace gf::nn {

int64_t DecoderLayerCache::bytes() const {
  int64_t n = self.bytes();
  for (const Tensor* t : {&cross_k, &cross_v})
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}

void DecoderLayerCache::select_rows(const std::vector<int64_t>& rows) {
  const int64_t B = self.k.defined() ? self.batch() : cross_rows.empty() ? (cross_k.defined() ? cross_k.size(0) : 0)
                                                                         : static_cast<int64_t>(cross_rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    GF_CHECK_AS(std::out_of_range, rows[i] >= 0 && rows[i] < B,
                "DecoderLayerCache::select_rows: index {} at position {} is out of range for a table of {} rows", rows[i], i, B);
  self.select_rows(rows);
  std::vector<int64_t> next(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) next[i] = cross_rows.empty() ? rows[i] : cross_rows[static_cast<size_t>(rows[i])];
  cross_rows = std::move(next);
}

namespace {

// The cross-attention K or V each batch row reads, as its own (B, KV, S, d_k) tensor (a copy only
// when rows share or reorder source rows): for the attention weights, which attend() computes.
Tensor cross_of_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  if (rows.empty()) return t;
  return kernels::index_select(t, Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));  // (B, KV, S, d_k)
}

}  // namespace

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& opt, Generator& gen)
    : FeedForwardLayer(opt), options(opt) {
  auto attention = [&] { return std::make_shared<MultiheadAttention>(opt.d_model, opt.nhead, opt.dropout, true, gen, opt.kv_heads); };
  self_attn = register_module("self_attn", attention());
  multihead_attn = register_module("multihead_attn", attention());
  register_feed_forward(opt, gen);
  norm1 = register_module("norm1", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
  norm2 = register_module("norm2", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
  norm3 = register_module("norm3", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(opt.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(opt.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(opt.dropout));
}

// The three sub-layers with residuals, post-norm or pre-norm; the attention blocks vary between
// full-sequence and incremental use.
template <class SelfBlock, class CrossBlock>
Variable TransformerDecoderLayer::sublayers(const Variable& tgt, SelfBlock self_block, CrossBlock cross_block) const {
  auto ff_block = [&](const Variable& x) {
    return dropout3->forward(feed_forward_block(x));  // (B, T, D)
  };
  // Each block runs in a NameScope named as its module (ff_block as PyTorch's method), so anomaly
  // reports and graph pictures say which part of the layer an op belongs to.
  auto in = [](const char* scope, const auto& block, const Variable& v) {
    NameScope s(scope);
    return block(v);  // (B, T, D)
  };
  auto norm = [](const Norm& n) { return [&n](const Variable& v) { return n.forward(v); }; };
  auto skip = [&](const Variable& x) { return residual_scale == 1.0 ? x : x * residual_scale; };  // (B, T, D)
  Variable x = tgt;  // (B, T, D)
  if (options.norm_first) {
    x = skip(x) + dropout1->forward(in("self_attn", self_block, in("norm1", norm(*norm1), x)));
    x = skip(x) + dropout2->forward(in("multihead_attn", cross_block, in("norm2", norm(*norm2), x)));
    x = skip(x) + in("ff_block", ff_block, in("norm3", norm(*norm3), x));
  } else if (residual_scale == 1.0) {  // each residual add, its dropout and the norm as one op
    auto residual = [&](const Norm& n, const Dropout& d, const Variable& res) {
      return [&n, &d, res](const Variable& v) { return n.forward_residual(res, v, d); };
    };
    x = in("norm1", residual(*norm1, *dropout1, x), in("self_attn", self_block, x));
    x = in("norm2", residual(*norm2, *dropout2, x), in("multihead_attn", cross_block, x));
    x = in("norm3", residual(*norm3, *dropout3, x), in("ff_block", [&](const Variable& v) { return feed_forward_block(v); }, x));
  } else {
    x = in("norm1", norm(*norm1), skip(x) + dropout1->forward(in("self_attn", self_block, x)));
    x = in("norm2", norm(*norm2), skip(x) + dropout2->forward(in("multihead_attn", cross_block, x)));
    x = in("norm3", norm(*norm3), skip(x) + in("ff_block", ff_block, x));
  }
  return x;
}

DecoderLayerOutput TransformerDecoderLayer::forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask,
                                                    const Tensor& tgt_kpm, const Tensor& memory_kpm, bool need_weights) const {
  DecoderLayerOutput r;
  auto self_block = [&](const Variable& x) { return self_attn->forward(x, x, x, tgt_kpm, tgt_mask).output; };
  auto cross_block = [&](const Variable& x) {
    AttentionResult a = multihead_attn->forward(x, memory, memory, memory_kpm, Tensor(), need_weights);  // no causal mask
    r.cross_weights = a.weights;
    return a.output;
  };
  r.output = sublayers(tgt, self_block, cross_block);
  return r;
}

void TransformerDecoderLayer::start_cache(DecoderLayerCache& cache, const Variable& memory, int64_t capacity, std::optional<DType> dtype) const {
  NoGradGuard ng;
  const DType d = dtype.value_or(memory.dtype());
  auto [k, v] = multihead_attn->project_kv(memory);  // (B, H, S, d_k) each
  cache.cross_k = k.data().to(d);
  cache.cross_v = v.data().to(d);
  cache.self = self_attn->start_cache(memory.size(0), capacity, d);
}

DecoderLayerOutput TransformerDecoderLayer::forward_step(const Variable& x, DecoderLayerCache& cache, const Tensor& memory_kpm,
                                                         bool need_weights) const {
  NoGradGuard ng;
  GF_CHECK(x.ndim() == 3 && x.size(1) == 1, "TransformerDecoderLayer::forward_step: expected (B, 1, D), got {}",
           shape_str(x.shape()));
  GF_CHECK_AS(std::length_error, cache.self.length < cache.self.capacity(),
              "TransformerDecoderLayer::forward_step: the cache holds {} positions and is full", cache.self.capacity());
  DecoderLayerOutput r;
  auto self_block = [&](const Variable& h) { return self_attn->forward_cached(h, cache.self).output; };  // (B, 1, D)
  auto cross_block = [&](const Variable& h) {
    Variable q = multihead_attn->project_q(h);  // (B, H, 1, d_k)
    if (!need_weights) return multihead_attn->attend_one(q, cache.cross_k, cache.cross_v, cache.cross_k.size(2), cache.cross_rows, memory_kpm);  // (B, 1, D)
    Variable ck(cross_of_rows(cache.cross_k, cache.cross_rows).to(h.dtype())), cv(cross_of_rows(cache.cross_v, cache.cross_rows).to(h.dtype()));  // (B, KV, S, d_k)
    AttentionResult a = multihead_attn->attend(q, ck, cv, memory_kpm, Tensor(), need_weights);
    r.cross_weights = a.weights;
    return a.output;
  };
  r.output = sublayers(x, self_block, cross_block);
  return r;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& opt, int64_t num_layers, bool final_norm, Generator& gen) {
  layers = register_module("layers", std::make_shared<ModuleList<TransformerDecoderLayer>>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerDecoderLayer>(opt, gen));
  if (final_norm) norm = register_module("norm", make_norm(opt.norm, opt.d_model, opt.layer_norm_eps));
}

DecoderOutput TransformerDecoder::forward(const Variable& tgt, const Variable& memory, const Tensor& tgt_mask, const Tensor& tgt_kpm,
                                          const Tensor& memory_kpm, bool need_weights) const {
  DecoderOutput r;
  Variable x = tgt;  // (B, T, D)
  size_t i = 0;
  for (const auto& layer : *layers) {
    NameScope scope("decoder.layers." + std::to_string(i++));
    DecoderLayerOutput o = layer->forward(x, memory, tgt_mask, tgt_kpm, memory_kpm, need_weights);
    x = o.output;
    if (need_weights) r.cross_weights.push_back(o.cross_weights);
  }
  r.output = norm ? norm->forward(x) : x;
  return r;
}

std::vector<DecoderLayerCache> TransformerDecoder::start_cache(const Variable& memory, int64_t capacity, std::optional<DType> dtype) const {
  std::vector<DecoderLayerCache> caches(layers->size());
  for (size_t i = 0; i < layers->size(); ++i) (*layers)[i].start_cache(caches[i], memory, capacity, dtype);
  return caches;
}

DecoderOutput TransformerDecoder::forward_step(const Variable& x_in, std::vector<DecoderLayerCache>& caches, const Tensor& memory_kpm,
                                               bool need_weights) const {
  GF_CHECK(caches.size() == layers->size(), "TransformerDecoder::forward_step: {} caches for {} layers", caches.size(),
           layers->size());
  DecoderOutput r;
  Variable x = x_in;  // (B, 1, D)
  for (size_t i = 0; i < layers->size(); ++i) {
    DecoderLayerOutput o = (*layers)[i].forward_step(x, caches[i], memory_kpm, need_weights);
    x = o.output;
    if (need_weights) r.cross_weights.push_back(o.cross_weights);
  }
  NoGradGuard ng;
  r.output = norm ? norm->forward(x) : x;
  return r;
}

}  // namespace gf::nn

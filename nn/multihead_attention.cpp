#include "nn/multihead_attention.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "nn/init.h"
#include "nn/masks.h"
#include "nn/sigma_reparam.h"
#include "tensor/check.h"

namespace gf::nn {

MultiheadAttention::MultiheadAttention(int64_t d, int64_t h, double dropout, bool bias, Generator& gen, int64_t kv)
    : embed_dim(d),
      num_heads(h),
      kv_heads(kv > 0 ? kv : h),
      head_dim(h > 0 ? d / h : 0),
      score_scale(h > 0 && d >= h ? 1.0 / std::sqrt(static_cast<double>(d / h)) : 1.0) {
  GF_CHECK(h > 0 && d % h == 0, "MultiheadAttention: embed_dim {} is not divisible by num_heads {}", d, h);
  GF_CHECK(kv >= 0 && h % kv_heads == 0, "MultiheadAttention: kv_heads {} does not divide num_heads {}", kv, h);
  if (!grouped()) {
    Tensor w = Tensor::empty({3 * d, d});  // (3D, D)
    init::xavier_uniform_(w, gen);
    in_proj_weight = register_parameter("in_proj_weight", w);
    if (bias) in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * d}));
  } else {
    const int64_t dkv = kv_heads * head_dim;
    q_proj = register_module("q_proj", std::make_shared<Linear>(d, d, bias, gen));
    k_proj = register_module("k_proj", std::make_shared<Linear>(d, dkv, bias, gen));
    v_proj = register_module("v_proj", std::make_shared<Linear>(d, dkv, bias, gen));
    for (const auto& p : {q_proj, k_proj, v_proj}) {  // as the packed layout: xavier weights, zero biases
      Tensor w = p->weight.data();
      init::xavier_uniform_(w, gen);
      if (bias) Tensor(p->bias.data()).zero_();
    }
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(d, d, bias, gen));
  if (bias) {
    Tensor b = out_proj->bias.data();  // shares storage
    b.zero_();                         // as nn.MultiheadAttention's _reset_parameters
  }
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(dropout));  // no parameters: no state_dict keys
  static const bool unfused_env = [] {
    const char* e = std::getenv("GRADFLOW_UNFUSED_ATTENTION");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  fused = !unfused_env;
}

Variable MultiheadAttention::split_heads(const Variable& x, int64_t heads) const {
  const int64_t B = x.size(0), L = x.size(1);
  Variable r = reshape(x, {B, L, heads, head_dim});  // (B, L, heads, d_k)
  return contiguous(permute(r, {0, 2, 1, 3}));       // (B, heads, L, d_k)
}

Variable MultiheadAttention::raw_weight(int which) const {
  GF_CHECK(which >= 0 && which <= 2, "MultiheadAttention: projection {} is not 0 (query), 1 (key) or 2 (value)", which);
  if (grouped()) return (which == 0 ? q_proj : which == 1 ? k_proj : v_proj)->weight;  // (D or KV*d_k, D)
  return narrow(in_proj_weight, 0, which * embed_dim, embed_dim);                    // (D, D)
}

Variable MultiheadAttention::raw_bias(int which) const {
  if (grouped()) return (which == 0 ? q_proj : which == 1 ? k_proj : v_proj)->bias;
  return in_proj_bias.defined() ? narrow(in_proj_bias, 0, which * embed_dim, embed_dim) : Variable();  // (D)
}

namespace {
const char* const kReparamName[3] = {"q", "k", "v"};
}  // namespace

void MultiheadAttention::use_sigma_reparam(bool all) {
  GF_CHECK(!sigma_reparam_, "MultiheadAttention::use_sigma_reparam: σReparam is already on");
  for (int which = 0; which < (all ? 3 : 2); ++which) {
    const Variable w = raw_weight(which);
    std::vector<double> u;
    const double sigma = sigma_reparam::initial_sigma(w.data(), u);
    register_buffer(std::string(kReparamName[which]) + "_sigma_u", Tensor::from_vector(u, {embed_dim}).to(w.dtype()));  // (D)
    register_parameter(std::string(kReparamName[which]) + "_gamma", Tensor::full({1}, sigma, w.dtype()));               // (1)
  }
  if (all) out_proj->use_sigma_reparam();
  sigma_reparam_ = true;
  sigma_value_ = all;
}

Variable MultiheadAttention::projection_weight(int which) const {
  const Variable w = raw_weight(which);
  if (!reparametrised(which)) return w;
  const std::string name = kReparamName[which];
  return sigma_reparam::reparametrise(w, buffer(name + "_sigma_u"), parameter(name + "_gamma"), is_training() && GradMode::enabled());
}

Variable MultiheadAttention::q_rows(const Variable& x) const {
  if (sigma_reparam_) return linear(x, projection_weight(0), raw_bias(0));                  // (B, L, D)
  if (grouped()) return q_proj->forward(x);                                                  // (B, L, D)
  Variable w = narrow(in_proj_weight, 0, 0, embed_dim);                                    // (D, D)
  Variable b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, 0, embed_dim) : Variable();  // (D)
  return linear(x, w, b);                                                                  // (B, L, D)
}

std::pair<Variable, Variable> MultiheadAttention::kv_rows(const Variable& x) const {
  if (sigma_reparam_) return {linear(x, projection_weight(1), raw_bias(1)), linear(x, projection_weight(2), raw_bias(2))};  // (B, S, KV*d_k)
  if (grouped()) return {k_proj->forward(x), v_proj->forward(x)};                                      // (B, S, KV*d_k)
  Variable w = narrow(in_proj_weight, 0, embed_dim, 2 * embed_dim);                                    // (2D, D)
  Variable b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, embed_dim, 2 * embed_dim) : Variable();  // (2D)
  Variable kv = linear(x, w, b);                                                                       // (B, S, 2D)
  return {narrow(kv, -1, 0, embed_dim), narrow(kv, -1, embed_dim, embed_dim)};                         // (B, S, D) views
}

Variable MultiheadAttention::project_q(const Variable& x) const { return split_heads(q_rows(x), num_heads); }  // (B, H, L, d_k)

std::pair<Variable, Variable> MultiheadAttention::project_kv(const Variable& x) const {
  auto [k, v] = kv_rows(x);                                             // (B, S, KV*d_k)
  return {split_heads(k, kv_heads), split_heads(v, kv_heads)};  // (B, KV, S, d_k)
}

void MultiheadAttention::check_input(const Variable& x, const char* what) const {
  GF_CHECK(x.ndim() == 3 && x.size(2) == embed_dim, "MultiheadAttention: {} must be (B, len, {}), got {}", what, embed_dim,
           shape_str(x.shape()));
}

namespace {

// softmax written out from ops, with no guard: a fully blocked row gives NaN (see naive_softmax).
Variable unguarded_softmax(const Variable& s) {
  Variable e = exp(s - max(s, -1, /*keepdim=*/true));  // (..., S)
  return e / sum(e, {-1}, /*keepdim=*/true);            // (..., S)
}

}  // namespace

Variable MultiheadAttention::weights_of(const Variable& q, const Variable& k, const Tensor& kpm, const Tensor& attn_mask) const {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), KV = k.size(1), G = H / KV;
  // A group's G query heads are consecutive, so (B, H, L, d_k) is (B, KV, G*L, d_k) with no copy, and
  // each key/value head meets its group's queries in one product: K and V are never repeated.
  Variable qg = G > 1 ? reshape(q, {B, KV, G * L, head_dim}) : q;              // (B, KV, G*L, d_k)
  Variable scores = matmul(qg * score_scale, transpose(k, -2, -1));  // (B, KV, G*L, S)
  if (G > 1) scores = reshape(scores, {B, H, L, S});                  // (B, H, L, S)
  // Float masks are added; boolean masks block (-inf). The two conventions are never mixed.
  if (attn_mask.defined() && attn_mask.dtype() != DType::Bool) {
    Tensor m = attn_mask.to(scores.dtype());
    if (m.ndim() == 3) m = m.reshape({B, H, L, S});
    scores = scores + Variable(m);  // (B, H, L, S)
  }
  if (kpm.defined() && kpm.dtype() != DType::Bool) scores = scores + Variable(kpm.to(scores.dtype()).reshape({B, 1, 1, S}));
  Tensor blocked = combine_bool_masks(kpm, attn_mask, B, H, L, S);  // (B, 1|H, L, S)
  if (blocked.defined()) scores = masked_fill(scores, blocked, -INFINITY);
  return naive_softmax ? unguarded_softmax(scores) : softmax(scores);  // (B, H, L, S)
}

void MultiheadAttention::peek_weights(const Variable& q, const Variable& k, const Tensor& kpm, const Tensor& attn_mask) const {
  NoGradGuard ng;
  weights_peek(weights_of(split_heads(q, num_heads), split_heads(k, kv_heads), kpm, attn_mask).data());
}

AttentionResult MultiheadAttention::attend(const Variable& q, const Variable& k, const Variable& v, const Tensor& kpm,
                                           const Tensor& attn_mask, bool need_weights) const {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), KV = k.size(1);
  GF_CHECK(KV == kv_heads && v.size(1) == KV && H == num_heads,
           "MultiheadAttention::attend: q {}, k {}, v {} for {} query and {} key/value heads", shape_str(q.shape()),
           shape_str(k.shape()), shape_str(v.shape()), num_heads, kv_heads);
  const int64_t G = H / KV;  // query heads per key/value head
  check_attention_masks(kpm, attn_mask, B, H, L, S);
  Variable weights = weights_of(q, k, kpm, attn_mask);  // (B, H, L, S)
  if (weights_transform) {
    const Shape shape = weights.shape();
    weights = weights_transform(weights);  // (B, H, L, S)
    GF_CHECK(weights.shape() == shape, "MultiheadAttention: weights_transform returned {} for weights {}", shape_str(weights.shape()),
             shape_str(shape));
  }
  if (weights_peek) weights_peek(weights.data());
  if (weights_observer) weights_observer(weights);
  Variable kept = attn_dropout->p > 0 ? attn_dropout->forward(weights) : weights;  // (B, H, L, S)
  Variable mixed = matmul(G > 1 ? reshape(kept, {B, KV, G * L, S}) : kept, v);  // (B, KV, G*L, d_k)
  if (G > 1) mixed = reshape(mixed, {B, H, L, head_dim});                         // (B, H, L, d_k)
  Variable merged = reshape(permute(mixed, {0, 2, 1, 3}), {B, L, H * head_dim});            // (B, L, D)
  AttentionResult r;
  r.output = out_proj->forward(merged);  // (B, L, D)
  if (need_weights) r.weights = weights;
  return r;
}

bool MultiheadAttention::can_fuse(const Tensor& kpm, const Tensor& attn_mask, bool need_weights) const {
  // Float masks would need to be added tile by tile; (B*H, L, S) masks are rare. Both stay unfused.
  const bool kpm_ok = !kpm.defined() || kpm.dtype() == DType::Bool;
  const bool mask_ok = !attn_mask.defined() || (attn_mask.dtype() == DType::Bool && attn_mask.ndim() == 2);
  return fused && !need_weights && !weights_observer && !weights_transform && !naive_softmax && kpm_ok && mask_ok;
}

AttentionResult MultiheadAttention::attend_rows(const Variable& q, const Variable& k, const Variable& v, const Tensor& kpm,
                                                const Tensor& attn_mask, bool need_weights) const {
  if (!can_fuse(kpm, attn_mask, need_weights))
    return attend(split_heads(q, num_heads), split_heads(k, kv_heads), split_heads(v, kv_heads), kpm, attn_mask, need_weights);
  check_attention_masks(kpm, attn_mask, q.size(0), num_heads, q.size(1), k.size(1));
  if (weights_peek) peek_weights(q, k, kpm, attn_mask);
  AttentionResult r;
  r.output = out_proj->forward(fused_attention(q, k, v, fused_options(kpm, attn_mask)));  // (B, L, D): heads come out merged
  return r;
}

FusedAttentionOptions MultiheadAttention::fused_options(const Tensor& kpm, const Tensor& attn_mask) const {
  FusedAttentionOptions o;
  o.heads = num_heads, o.kv_heads = kv_heads, o.scale = score_scale;
  o.key_padding_mask = kpm, o.attn_mask = attn_mask;
  // As attn_dropout->forward() would: numbers are drawn only in training with p > 0.
  o.dropout_p = attn_dropout->is_training() ? attn_dropout->p : 0.0;
  o.gen = &default_generator();
  return o;
}

AttentionResult MultiheadAttention::forward(const Variable& query, const Variable& key, const Variable& value, const Tensor& kpm,
                                            const Tensor& attn_mask, bool need_weights) const {
  const int64_t D = embed_dim;
  check_input(query, "query");
  check_input(key, "key");
  check_input(value, "value");
  GF_CHECK(key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == value.size(1),
           "MultiheadAttention: query {}, key {} and value {} disagree in batch or key length", shape_str(query.shape()),
           shape_str(key.shape()), shape_str(value.shape()));
  Variable q, k, v;  // (B, L, D), (B, S, KV*d_k) x 2: heads not split, so the fused op reads them in place
  if (!grouped() && !sigma_reparam_ && query.impl() == key.impl() && key.impl() == value.impl()) {
    Variable qkv = linear(query, in_proj_weight, in_proj_bias);  // (B, L, 3D): one GEMM for self-attention
    if (can_fuse(kpm, attn_mask, need_weights)) {  // one gradient tensor for the three projections
      const int64_t B = query.size(0), L = query.size(1);
      check_attention_masks(kpm, attn_mask, B, num_heads, L, L);
      if (weights_peek) peek_weights(narrow(qkv, -1, 0, D), narrow(qkv, -1, D, D), kpm, attn_mask);
      AttentionResult r;
      r.output = out_proj->forward(fused_self_attention(qkv, fused_options(kpm, attn_mask)));  // (B, L, D)
      return r;
    }
    q = narrow(qkv, -1, 0, D);
    k = narrow(qkv, -1, D, D);
    v = narrow(qkv, -1, 2 * D, D);
  } else if (key.impl() == value.impl()) {
    q = q_rows(query);
    std::tie(k, v) = kv_rows(key);
  } else if (grouped() && !sigma_reparam_) {
    q = q_rows(query);
    k = k_proj->forward(key);
    v = v_proj->forward(value);
  } else {
    q = q_rows(query);
    k = linear(key, projection_weight(1), raw_bias(1));
    v = linear(value, projection_weight(2), raw_bias(2));
  }
  return attend_rows(q, k, v, kpm, attn_mask, need_weights);
}

}  // namespace gf::nn

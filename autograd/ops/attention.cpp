// fused_attention: the forward keeps the inputs, the output and one log-sum-exp per query row;
// the backward recomputes each tile of scores and regenerates the dropout decisions from the
// generator's counter, so neither the weights nor a dropout mask is ever stored.
#include "autograd/ops/attention.h"

#include <array>
#include <stdexcept>
#include <string>

#include "autograd/function.h"
#include "tensor/check.h"
#include "tensor/kernels/attention.h"
#include "tensor/kernels/bf16.h"

namespace gf {

struct FusedAttentionBackward : Node {
  // (B, L, H*d_k), (B, S, KV*d_k), (B, S, KV*d_k): views of the projections, or under bf16 their
  // bfloat16 copies (the products' operands; half the bytes, and the float32 projections are freed)
  Tensor q, k, v;
  Tensor out;      // (B, L, H*d_k); undefined under bf16 (the backward does not read it)
  Tensor lse;      // (B, H, L)
  kernels::AttentionConfig cfg;
  Op kind() const override { return Op::Attention; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (B, L, H*d_k)
    kernels::AttentionGrads gr = kernels::attention_backward(g, q, k, v, out, lse, cfg);
    return {needs_grad(0) ? gr.q : Tensor(), needs_grad(1) ? gr.k : Tensor(), needs_grad(2) ? gr.v : Tensor()};
  }
  std::vector<SavedTensor> saved() override { return {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}}; }
};

namespace {

// The kernel's configuration; claims the generator's numbers for dropout, as dropout() would for
// the (B, H, L, S) weights, at the same point of the forward.
kernels::AttentionConfig make_config(const FusedAttentionOptions& o, int64_t B, int64_t L, int64_t S, const Shape& q_shape) {
  GF_CHECK(o.dropout_p == 0.0 || o.gen != nullptr, "fused_attention: dropout {} needs a generator (q {})", o.dropout_p,
           shape_str(q_shape));
  kernels::AttentionConfig cfg;
  cfg.heads = o.heads, cfg.kv_heads = o.kv_heads, cfg.scale = o.scale;
  cfg.key_padding_mask = o.key_padding_mask, cfg.attn_mask = o.attn_mask;
  cfg.block_q = o.block_q, cfg.block_k = o.block_k;
  if (o.dropout_p > 0.0) {
    cfg.dropout_p = o.dropout_p;
    cfg.gen = *o.gen;
    cfg.dropout_base = o.gen->reserve(static_cast<uint64_t>(B * o.heads * L * S));
  }
  return cfg;
}

// The operands as the kernel multiplies them: under bf16, float32 rounded to bfloat16 once here.
Tensor operand(const Tensor& t) { return kernels::bf16_products(t.dtype()) ? kernels::to_bf16(t) : t; }

// The column blocks of a packed (B, L, (H + 2 KV) d_k) tensor: q, k, v.
std::array<Tensor, 3> unpack(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t dk = qkv.size(2) / (heads + 2 * kv_heads);
  return {qkv.narrow(2, 0, heads * dk), qkv.narrow(2, heads * dk, kv_heads * dk),
          qkv.narrow(2, (heads + kv_heads) * dk, kv_heads * dk)};
}

}  // namespace

Variable fused_attention(const Variable& q, const Variable& k, const Variable& v, const FusedAttentionOptions& o) {
  GF_CHECK(q.ndim() == 3 && k.ndim() == 3, "fused_attention: q {} and k {} must be (B, len, heads*d_k)", shape_str(q.shape()),
           shape_str(k.shape()));
  kernels::AttentionConfig cfg = make_config(o, q.size(0), q.size(1), k.size(1), q.shape());
  const Tensor qd = operand(q.data()), kd = operand(k.data()), vd = operand(v.data());
  cfg.out_bf16 = qd.dtype() == DType::BFloat16;  // out_proj reads the output in bfloat16
  kernels::AttentionForward r = kernels::attention_forward(qd, kd, vd, cfg);  // (B, L, H*d_k)
  auto node = make_node<FusedAttentionBackward>({&q, &k, &v});
  if (node) {
    node->q = qd, node->k = kd, node->v = vd;
    // Under bf16 the backward's D comes from its tiles, not from the output: not kept.
    node->out = cfg.out_bf16 ? Tensor() : r.out, node->lse = std::move(r.lse);
    node->cfg = std::move(cfg);
  }
  Variable out = Variable::from_op(std::move(r.out), node);
  out.set_bf16_copy(std::move(r.out_bf16));
  return out;
}

struct FusedSelfAttentionBackward : Node {
  Tensor qkv;  // (B, L, (H + 2 KV) d_k): the projection, or under bf16 its bfloat16 copy
  Tensor out;  // (B, L, H*d_k); undefined under bf16 (the backward does not read it)
  Tensor lse;  // (B, H, L)
  kernels::AttentionConfig cfg;
  Op kind() const override { return Op::Attention; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (B, L, H*d_k)
    Tensor gx = Tensor::zeros(qkv.shape(), lse.dtype());  // (B, L, (H + 2 KV) d_k), the scores' type
    auto [q, k, v] = unpack(qkv, cfg.heads, cfg.kv_heads);
    auto [gq, gk, gv] = unpack(gx, cfg.heads, cfg.kv_heads);
    kernels::attention_backward_into(g, q, k, v, out, lse, cfg, gq, gk, gv);
    return {gx};
  }
  std::vector<SavedTensor> saved() override { return {{"qkv", &qkv}, {"out", &out}, {"lse", &lse}}; }
};

Variable fused_self_attention(const Variable& qkv, const FusedAttentionOptions& o) {
  GF_CHECK(qkv.ndim() == 3 && o.heads > 0 && o.kv_heads > 0 && qkv.size(2) % (o.heads + 2 * o.kv_heads) == 0,
           "fused_self_attention: qkv {} is not (B, L, (H + 2 KV) d_k) for {} query and {} key/value heads",
           shape_str(qkv.shape()), o.heads, o.kv_heads);
  kernels::AttentionConfig cfg = make_config(o, qkv.size(0), qkv.size(1), qkv.size(1), qkv.shape());
  const Tensor qkvd = operand(qkv.data());  // (B, L, (H + 2 KV) d_k)
  auto [q, k, v] = unpack(qkvd, o.heads, o.kv_heads);
  cfg.out_bf16 = qkvd.dtype() == DType::BFloat16;  // out_proj reads the output in bfloat16
  kernels::AttentionForward r = kernels::attention_forward(q, k, v, cfg);  // (B, L, H*d_k)
  auto node = make_node<FusedSelfAttentionBackward>({&qkv});
  if (node) {
    node->qkv = qkvd;
    // Under bf16 the backward's D comes from its tiles, not from the output: not kept.
    node->out = cfg.out_bf16 ? Tensor() : r.out, node->lse = std::move(r.lse);
    node->cfg = std::move(cfg);
  }
  Variable out = Variable::from_op(std::move(r.out), node);
  out.set_bf16_copy(std::move(r.out_bf16));
  return out;
}

}  // namespace gf

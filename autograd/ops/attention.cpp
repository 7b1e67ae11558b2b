// fused_attention: the forward keeps the inputs, the output and one log-sum-exp per query row;
// the backward recomputes each tile of scores and regenerates the dropout decisions from the
// generator's counter, so neither the weights nor a dropout mask is ever stored.
#include "autograd/ops/attention.h"

#include <stdexcept>
#include <string>

#include "autograd/function.h"
#include "tensor/check.h"
#include "tensor/kernels/attention.h"

namespace gf {

struct FusedAttentionBackward : Node {
  Tensor q, k, v;  // (B, L, H*d_k), (B, S, KV*d_k), (B, S, KV*d_k): views of the projections
  Tensor out;      // (B, L, H*d_k)
  Tensor lse;      // (B, H, L)
  kernels::AttentionConfig cfg;
  const char* name() const override { return "attention"; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (B, L, H*d_k)
    kernels::AttentionGrads gr = kernels::attention_backward(g, q, k, v, out, lse, cfg);
    return {needs_grad(0) ? gr.q : Tensor(), needs_grad(1) ? gr.k : Tensor(), needs_grad(2) ? gr.v : Tensor()};
  }
  std::vector<SavedTensor> saved() override { return {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}}; }
};

Variable fused_attention(const Variable& q, const Variable& k, const Variable& v, const FusedAttentionOptions& o) {
  GF_CHECK(o.dropout_p == 0.0 || o.gen != nullptr, "fused_attention: dropout {} needs a generator (q {})", o.dropout_p,
           shape_str(q.shape()));
  kernels::AttentionConfig cfg;
  cfg.heads = o.heads, cfg.kv_heads = o.kv_heads, cfg.scale = o.scale;
  cfg.key_padding_mask = o.key_padding_mask, cfg.attn_mask = o.attn_mask;
  cfg.block_q = o.block_q, cfg.block_k = o.block_k;
  if (o.dropout_p > 0.0 && q.ndim() == 3 && k.ndim() == 3) {
    // Claims the numbers dropout() would claim for the (B, H, L, S) weights, in the same order.
    cfg.dropout_p = o.dropout_p;
    cfg.gen = *o.gen;
    cfg.dropout_base = o.gen->reserve(static_cast<uint64_t>(q.size(0) * o.heads * q.size(1) * k.size(1)));
  }
  kernels::AttentionForward r = kernels::attention_forward(q.data(), k.data(), v.data(), cfg);  // (B, L, H*d_k)
  auto node = make_node<FusedAttentionBackward>({&q, &k, &v});
  if (node) {
    node->q = q.data(), node->k = k.data(), node->v = v.data();
    node->out = r.out, node->lse = std::move(r.lse);
    node->cfg = std::move(cfg);
  }
  return Variable::from_op(std::move(r.out), node);
}

}  // namespace gf

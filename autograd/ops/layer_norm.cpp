// layer_norm: the forward keeps the input and per-row mean and rstd; backward recomputes the
// normalised input from them and gives all three gradients in one fused pass per row.
#include "autograd/ops/layer_norm.h"

#include "autograd/function.h"
#include "tensor/kernels/layer_norm.h"

namespace gf {

struct LayerNormBackward : Node {
  Tensor x;       // (..., D)
  Tensor mean;    // (...)
  Tensor rstd;    // (...)
  Tensor weight;  // (D,) or undefined; needed for grad_x only
  const char* name() const override { return "layer_norm"; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (..., D)
    kernels::LayerNormGrads gr =
        kernels::layer_norm_backward(g, x, mean, rstd, weight, needs_grad(0), needs_grad(1), needs_grad(2));
    return {gr.x, gr.weight, gr.bias};
  }
  std::vector<SavedTensor> saved() override { return {{"x", &x}, {"mean", &mean}, {"rstd", &rstd}, {"weight", &weight}}; }
};

Variable layer_norm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  kernels::LayerNormResult r = kernels::layer_norm(x.data(), weight.defined() ? weight.data() : Tensor(),
                                                   bias.defined() ? bias.data() : Tensor(), eps);
  auto node = make_node<LayerNormBackward>({&x, &weight, &bias});
  if (node) {
    node->x = x.data();
    node->mean = std::move(r.mean);
    node->rstd = std::move(r.rstd);
    if (node->needs_grad(0) && weight.defined()) node->weight = weight.data();
  }
  return Variable::from_op(std::move(r.out), node);
}

}  // namespace gf

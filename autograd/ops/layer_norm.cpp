// layer_norm: the forward keeps its output (or, when the weight has a zero, its input and the
// per-row mean) and rstd; backward recovers the normalised input from them and gives all three
// gradients in one fused pass per row.
#include "autograd/ops/layer_norm.h"

#include <cmath>

#include "autograd/function.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/dropout.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/layer_norm.h"

namespace gf {

struct LayerNormBackward : Node {
  // Either the output y (and bias), when every weight element is nonzero: the input is then kept
  // by nothing and freed, while y is kept anyway by the next layer's linear. Or else the input x
  // (and mean), as PyTorch keeps it.
  bool from_output = false;
  Tensor kept;    // (..., D): y or x
  Tensor mean;    // (...): with x only
  Tensor rstd;    // (...)
  Tensor weight;  // (D,) or undefined
  Tensor bias;    // (D,) or undefined: with y only
  Op kind() const override { return Op::LayerNorm; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (..., D)
    kernels::LayerNormGrads gr =
        from_output ? kernels::layer_norm_backward_from_output(g, kept, rstd, weight, bias, needs_grad(0), needs_grad(1), needs_grad(2))
                    : kernels::layer_norm_backward(g, kept, mean, rstd, weight, needs_grad(0), needs_grad(1), needs_grad(2));
    return {gr.x, gr.weight, gr.bias};
  }
  std::vector<SavedTensor> saved() override {
    return {{from_output ? "y" : "x", &kept}, {"mean", &mean}, {"rstd", &rstd}, {"weight", &weight}, {"bias", &bias}};
  }
};

namespace {
// (y - bias) / weight undoes the affine step only when no weight element is 0 (or not finite).
bool invertible(const Tensor& weight) {
  if (!weight.defined()) return true;
  for (double w : weight.to_vector<double>())
    if (w == 0.0 || !std::isfinite(w)) return false;
  return true;
}
}  // namespace

Variable layer_norm(const Variable& x, const Variable& weight, const Variable& bias, double eps) {
  // Under bf16 the output's bfloat16 copy is written with it: the linear layers read it (Variable::bf16_copy).
  Tensor out_bf16;
  kernels::LayerNormResult r = kernels::layer_norm(x.data(), weight.defined() ? weight.data() : Tensor(),
                                                   bias.defined() ? bias.data() : Tensor(), eps,
                                                   kernels::bf16_products(x.dtype()) ? &out_bf16 : nullptr);
  auto node = make_node<LayerNormBackward>({&x, &weight, &bias});
  if (node) {
    node->from_output = invertible(weight.defined() ? weight.data() : Tensor());
    node->kept = node->from_output ? r.out : x.data();
    if (!node->from_output) node->mean = std::move(r.mean);
    node->rstd = std::move(r.rstd);
    if (weight.defined() && (node->needs_grad(0) || node->from_output)) node->weight = weight.data();
    if (node->from_output && bias.defined()) node->bias = bias.data();
  }
  Variable out = Variable::from_op(std::move(r.out), node);
  out.set_bf16_copy(std::move(out_bf16));
  return out;
}

struct AddLayerNormBackward : Node {
  Tensor out;     // (..., D): the norm's output, which the next layer keeps anyway
  Tensor rstd;    // (...)
  Tensor weight;  // (D,) or undefined
  Tensor bias;    // (D,) or undefined
  Tensor keep;    // (..., D) bool, true = kept; undefined without dropout
  double scale = 1.0;
  Op kind() const override { return Op::AddLayerNorm; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (..., D)
    kernels::AddLayerNormGrads gr = kernels::add_layer_norm_backward(g, out, rstd, weight, bias, keep, scale, needs_grad(0), needs_grad(1),
                                                                     needs_grad(2), needs_grad(3));
    return {gr.x, gr.y, gr.weight, gr.bias};
  }
  std::vector<SavedTensor> saved() override {
    return {{"y", &out}, {"rstd", &rstd}, {"weight", &weight}, {"bias", &bias}, {"keep", &keep}};
  }
};

Variable add_layer_norm(const Variable& x, const Variable& y, double p, bool training, Generator& gen, const Variable& weight,
                        const Variable& bias, double eps) {
  GF_CHECK(p >= 0.0 && p <= 1.0, "add_layer_norm: probability {} is outside [0, 1] (input {})", p, shape_str(y.shape()));
  const Tensor w = weight.defined() ? weight.data() : Tensor(), b = bias.defined() ? bias.data() : Tensor();
  if (!invertible(w)) return layer_norm(x + dropout(y, p, training, gen), weight, bias, eps);
  const double drop = training ? p : 0.0;  // as dropout(): no draws in eval or at p == 0
  const double scale = drop == 1.0 ? 0.0 : 1.0 / (1.0 - drop);
  Tensor keep, out_bf16;  // (..., D) bool, or undefined; the output in bfloat16 under bf16 (as layer_norm)
  kernels::LayerNormResult r =
      kernels::add_layer_norm(x.data(), y.data(), drop, scale, gen, keep, w, b, eps, kernels::bf16_products(x.dtype()) ? &out_bf16 : nullptr);
  auto node = make_node<AddLayerNormBackward>({&x, &y, &weight, &bias});
  if (node) {
    node->out = r.out;
    node->rstd = std::move(r.rstd);
    node->weight = w, node->bias = b;
    node->keep = std::move(keep);
    node->scale = scale;
  }
  Variable out = Variable::from_op(std::move(r.out), node);
  out.set_bf16_copy(std::move(out_bf16));
  return out;
}

}  // namespace gf

// matmul and linear: forward and backward side by side. Every gradient is one GEMM (or a loop of
// GEMMs over the batch) reading transposed operands through BLAS's flags, never a transposed copy.
#include "autograd/ops/matmul.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/reduce.h"

namespace gf {

// ---- matmul: grad_a = g @ b^T, grad_b = a^T @ g, each summed over a's / b's broadcast batch dims ----
struct MatmulBackward : Node {
  Tensor a;  // (..., m, k), kept only when b needs a gradient
  Tensor b;  // (..., k, n), kept only when a needs a gradient
  Shape a_shape, b_shape;
  Op kind() const override { return Op::Matmul; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (batch..., m, n)
    Tensor ga, gb;
    if (needs_grad(0)) ga = kernels::matmul_sum_to(g, b.transpose(-1, -2), a_shape);  // (..., m, k)
    if (needs_grad(1)) gb = kernels::matmul_sum_to(a.transpose(-1, -2), g, b_shape);  // (..., k, n)
    return {ga, gb};
  }
  std::vector<SavedTensor> saved() override { return {{"a", &a}, {"b", &b}}; }
};

Variable matmul(const Variable& a, const Variable& b) {
  Tensor out = kernels::matmul(a.data(), b.data());  // (batch..., m, n)
  auto node = make_node<MatmulBackward>({&a, &b});
  if (node) {
    node->a_shape = a.shape(), node->b_shape = b.shape();
    if (node->needs_grad(1)) node->a = a.data();
    if (node->needs_grad(0)) node->b = b.data();
  }
  return Variable::from_op(std::move(out), node);
}

// ---- linear: with x as (N, in) and g as (N, out): grad_x = g @ W, grad_W = g^T @ x,
// grad_b = column sums of g. Under bf16 (kernels::bf16_products) the three products take
// bfloat16 operands: W rounded once in the forward (the copy is kept for grad_x), x rounded in
// the forward and again in the backward (keeping the float32 x, which the layer before holds
// anyway, costs less memory than a second, bfloat16 copy), g rounded once for both. ----
struct LinearBackward : Node {
  Tensor x2;      // (N, in): x with its leading dims flattened, kept only when W needs a gradient
  Tensor x2b;     // (N, in) bfloat16, under bf16 instead of x2 when x came with its copy (Variable::bf16_copy)
  Tensor weight;  // (out, in), kept only when x needs a gradient; bfloat16 under bf16
  Shape x_shape;
  bool bf16 = false;
  Op kind() const override { return Op::Linear; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (..., out)
    const int64_t out_f = g.shape().back();
    const int64_t rows = shape_numel(Shape(x_shape.begin(), x_shape.end() - 1));
    Tensor g2 = g.reshape({rows, out_f});  // (N, out)
    Tensor gx, gw, gb;
    if (bf16) {
      // The gradient rounded and, in the same pass, the bias gradient's column sums (the bits of sum(g2, {0})).
      const Tensor g2b = needs_grad(2) ? kernels::to_bf16_and_column_sums(g2, gb) : kernels::to_bf16(g2);  // (N, out)
      if (needs_grad(0)) gx = kernels::matmul_bf16(g2b, weight).reshape(x_shape);                     // (..., in)
      if (needs_grad(1)) gw = kernels::matmul_bf16(g2b.transpose(0, 1), x2b.defined() ? x2b : kernels::to_bf16(x2));  // (out, in)
    } else {
      if (needs_grad(0)) gx = kernels::matmul(g2, weight).reshape(x_shape);  // (..., in)
      if (needs_grad(1)) gw = kernels::matmul(g2.transpose(0, 1), x2);     // (out, in)
    }
    if (needs_grad(2) && !bf16) gb = kernels::sum(g2, {0}, false);  // (out,)
    return {gx, gw, gb};
  }
  std::vector<SavedTensor> saved() override { return {{"x2", &x2}, {"x2b", &x2b}, {"weight", &weight}}; }
};

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  Tensor xc = x.data().contiguous();  // (..., in): at most one copy, shared with backward
  const bool bf16 = kernels::bf16_products(x.dtype()) && (weight.dtype() == DType::Float32 || weight.dtype() == DType::BFloat16);
  // A weight kept in bfloat16 (nn::lay_out_for_decoding for bf16 decoding) is only read by bf16
  // products, and has no float32 values to train.
  if (weight.dtype() == DType::BFloat16)
    GF_CHECK(bf16 && !(GradMode::enabled() && weight.requires_grad()),
             "linear: the weight {} is stored in bfloat16 (a model laid out for bf16 decoding); it needs --precision bf16 products on "
             "float32 input (got {} input, {} products) and no gradient", shape_str(weight.shape()), dtype_name(x.dtype()),
             precision_name(kernels::precision()));
  const Tensor w = bf16 ? kernels::bf16_weight(weight.data()) : weight.data();  // (out, in)
  const Tensor b = bias.defined() ? bias.data() : Tensor();                       // (out)
  // Under bf16, x's bfloat16 copy when the op that made x wrote one with it (layer norm, relu + dropout,
  // attention: Variable::bf16_copy), else x rounded here.
  const Tensor& xb_made = x.bf16_copy();
  const Tensor xb = !bf16 ? Tensor() : xb_made.defined() && xb_made.shape() == xc.shape() ? xb_made : kernels::to_bf16(xc);  // (..., in)
  Tensor out = bf16 ? kernels::linear_bf16(xb, w, b) : kernels::linear(xc, w, b);  // (..., out)
  auto node = make_node<LinearBackward>({&x, &weight, &bias});
  if (node) {
    node->x_shape = x.shape();
    node->bf16 = bf16;
    const Shape rows_in{shape_numel(Shape(x.shape().begin(), x.shape().end() - 1)), x.shape().back()};  // (N, in)
    // Under bf16 the weight gradient reads x in bfloat16: the copy x came with, kept instead of the
    // float32 x (the same bits as rounding x again, without the pass; and where only the next
    // products read x, as the feed-forward block's hidden layer, the float32 x is then freed).
    if (node->needs_grad(1)) {
      if (bf16 && xb_made.defined() && xb.storage() == xb_made.storage())
        node->x2b = xb.view(rows_in);
      else
        node->x2 = xc.view(rows_in);
    }
    if (node->needs_grad(0)) node->weight = w;
  }
  return Variable::from_op(std::move(out), node);
}

}  // namespace gf

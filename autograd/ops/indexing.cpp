// Selection ops: forward and backward side by side. Each backward routes the gradient back to
// the elements the forward picked; the rest get zero.
#include "autograd/ops/indexing.h"

#include <stdexcept>
#include <string>

#include "autograd/function.h"
#include "tensor/check.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/indexing.h"

namespace gf {

// ---- index_select: the gradient scatter-adds into the rows it was gathered from ----
struct IndexSelectBackward : Node {
  Tensor indices;     // int64 (I...)
  Shape weight_shape;  // (N, D...)
  int64_t padding_idx = -1;
  Op kind() const override { return Op::IndexSelect; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: (I..., D...)
    Tensor gw = Tensor::zeros(weight_shape, g.dtype());    // (N, D...)
    kernels::index_add_(gw, indices, g, padding_idx);
    return {gw};
  }
  std::vector<SavedTensor> saved() override { return {{"indices", &indices}}; }
};

Variable index_select(const Variable& weight, const Tensor& indices, int64_t padding_idx) {
  GF_CHECK_AS(std::out_of_range, weight.ndim() < 1 || padding_idx < weight.shape()[0],
              "index_select: padding_idx {} is outside a table of {} rows (weight {})", padding_idx, weight.shape()[0],
              shape_str(weight.shape()));
  Tensor out = kernels::index_select(weight.data(), indices);  // (I..., D...); checks the indices
  auto node = make_node<IndexSelectBackward>({&weight});
  if (node) node->indices = indices, node->weight_shape = weight.shape(), node->padding_idx = padding_idx;
  return Variable::from_op(std::move(out), node);
}

// ---- masked_fill: masked positions were overwritten by a constant, so their gradient is 0 ----
struct MaskedFillBackward : Node {
  Tensor mask;  // bool, broadcastable to the input's shape
  Op kind() const override { return Op::MaskedFill; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::masked_fill(g, mask, 0.0)}; }
  std::vector<SavedTensor> saved() override { return {{"mask", &mask}}; }
};

Variable masked_fill(const Variable& x, const Tensor& mask, double value) {
  Tensor out = kernels::masked_fill(x.data(), mask, value);  // x's shape; checks the mask
  auto node = make_node<MaskedFillBackward>({&x});
  if (node) node->mask = mask;
  return Variable::from_op(std::move(out), node);
}

// ---- where: a gets the gradient where cond holds, b where it does not ----
struct WhereBackward : Node {
  Tensor cond;          // bool, broadcastable to the output's shape
  Shape a_shape, b_shape;
  Op kind() const override { return Op::Where; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: the broadcast output shape
    Tensor zero = Tensor::scalar(0.0, g.dtype());            // ()
    Tensor ga, gb;
    if (needs_grad(0)) ga = kernels::sum_to(kernels::where(cond, g, zero), a_shape);
    if (needs_grad(1)) gb = kernels::sum_to(kernels::where(cond, zero, g), b_shape);
    return {ga, gb};
  }
  std::vector<SavedTensor> saved() override { return {{"cond", &cond}}; }
};

Variable where(const Tensor& cond, const Variable& a, const Variable& b) {
  Tensor out = kernels::where(cond, a.data(), b.data());  // broadcast of all three; checks shapes and dtypes
  auto node = make_node<WhereBackward>({&a, &b});
  if (node) node->cond = cond, node->a_shape = a.shape(), node->b_shape = b.shape();
  return Variable::from_op(std::move(out), node);
}

}  // namespace gf

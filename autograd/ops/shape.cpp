// Shape ops: forward and backward side by side. Each backward undoes the forward's view on the
// gradient (a reshape, the inverse permutation, a zero-padded slice, a sum over broadcast dims).
#include "autograd/ops/shape.h"

#include <stdexcept>
#include <string>

#include "autograd/function.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/indexing.h"

namespace gf {

// ---- reshape (also unsqueeze and squeeze): the gradient takes the input's shape back ----
struct ReshapeBackward : Node {
  Shape shape;  // the input's shape
  Op op = Op::Reshape;  // or Unsqueeze, Squeeze
  Op kind() const override { return op; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g.reshape(shape)}; }
};

namespace {
Variable reshaped(const Variable& x, Tensor out, Op op) {
  auto node = make_node<ReshapeBackward>({&x});
  if (node) node->shape = x.shape(), node->op = op;
  return Variable::from_op(std::move(out), node);
}
}  // namespace

Variable reshape(const Variable& x, const Shape& shape) { return reshaped(x, x.data().reshape(shape), Op::Reshape); }
Variable unsqueeze(const Variable& x, int64_t dim) { return reshaped(x, x.data().unsqueeze(dim), Op::Unsqueeze); }
Variable squeeze(const Variable& x, int64_t dim) { return reshaped(x, x.data().squeeze(dim), Op::Squeeze); }

// ---- permute (and transpose): the inverse permutation of the gradient, still a view ----
struct PermuteBackward : Node {
  std::vector<int64_t> inverse;  // inverse[dims[i]] = i
  Op op = Op::Permute;  // or Transpose
  Op kind() const override { return op; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g.permute(inverse)}; }
};

Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  Tensor out = x.data().permute(dims);  // x's dims reordered; checks dims
  auto node = make_node<PermuteBackward>({&x});
  if (node) {
    node->inverse.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)
      node->inverse[normalize_dim(dims[i], dims.size(), "permute", x.shape())] = static_cast<int64_t>(i);
  }
  return Variable::from_op(std::move(out), node);
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  Tensor out = x.data().transpose(d0, d1);  // x's shape with d0 and d1 swapped
  auto node = make_node<PermuteBackward>({&x});
  if (node) {
    const int a = normalize_dim(d0, x.shape().size(), "transpose", x.shape());
    const int b = normalize_dim(d1, x.shape().size(), "transpose", x.shape());
    node->op = Op::Transpose;
    node->inverse.resize(x.shape().size());
    for (size_t i = 0; i < node->inverse.size(); ++i) node->inverse[i] = static_cast<int64_t>(i);
    std::swap(node->inverse[a], node->inverse[b]);  // a swap is its own inverse
  }
  return Variable::from_op(std::move(out), node);
}

// ---- contiguous: a copy in forward only; the gradient passes through ----
struct IdentityBackward : Node {
  Op kind() const override { return Op::Contiguous; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }
};

Variable contiguous(const Variable& x) {
  if (x.data().is_contiguous()) return x;
  Tensor out = x.data().contiguous();  // x's shape, dense
  return Variable::from_op(std::move(out), make_node<IdentityBackward>({&x}));
}

// ---- narrow: the gradient fills its slice of a zero tensor of the input's shape ----
struct NarrowBackward : Node {
  Shape shape;  // the input's shape
  int64_t dim = 0, start = 0, length = 0;
  Op kind() const override { return Op::Narrow; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = Tensor::zeros(shape, g.dtype());  // the input's shape
    gx.narrow(dim, start, length).copy_(g);
    return {gx};
  }
};

Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  Tensor out = x.data().narrow(dim, start, length);  // x's shape with `length` in dim; checks the range
  auto node = make_node<NarrowBackward>({&x});
  if (node) {
    node->shape = x.shape();
    node->dim = normalize_dim(dim, x.shape().size(), "narrow", x.shape());
    node->start = start < 0 ? start + x.shape()[node->dim] : start;
    node->length = length;
  }
  return Variable::from_op(std::move(out), node);
}

// ---- concat: each input's gradient is its slice of the output's gradient ----
struct ConcatBackward : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // each input's size in dim
  Op kind() const override { return Op::Concat; }
  std::vector<Tensor> backward(const Tensor& g) override {
    std::vector<Tensor> grads(sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs_grad(i)) grads[i] = g.narrow(dim, start, sizes[i]);  // input i's shape, a view of g
      start += sizes[i];
    }
    return grads;
  }
};

Variable concat(const std::vector<Variable>& xs, int64_t dim) {
  std::vector<Tensor> datas;
  std::vector<const Variable*> inputs;
  for (const Variable& x : xs) {
    datas.push_back(x.data());
    inputs.push_back(&x);
  }
  Tensor out = kernels::concat(datas, dim);  // inputs' shape with their dim sizes summed; checks shapes
  auto node = make_node<ConcatBackward>(inputs);
  if (node) {
    node->dim = normalize_dim(dim, xs[0].shape().size(), "concat", xs[0].shape());
    for (const Variable& x : xs) node->sizes.push_back(x.shape()[node->dim]);
  }
  return Variable::from_op(std::move(out), node);
}

// ---- expand: a broadcast view; the gradient is summed over the broadcast dims ----
struct ExpandBackward : Node {
  Shape shape;  // the input's shape
  Op kind() const override { return Op::Expand; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::sum_to(g, shape)}; }
};

Variable expand(const Variable& x, const Shape& shape) {
  Tensor out = x.data().expand(shape);  // `shape`, zero strides on broadcast dims
  auto node = make_node<ExpandBackward>({&x});
  if (node) node->shape = x.shape();
  return Variable::from_op(std::move(out), node);
}

}  // namespace gf

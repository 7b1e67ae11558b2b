// Reductions: forward and backward side by side. sum and mean spread the gradient back over
// every element they folded; max sends it to the one element it picked.
#include "autograd/ops/reduce.h"

#include "autograd/function.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/indexing.h"
#include "tensor/kernels/reduce.h"

namespace gf {
namespace {

// x's shape with the reduced dims set to 1 (empty dims = all), and how many elements each output folds.
struct Reduced {
  Shape keep;
  int64_t count = 1;
};

Reduced reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, const char* op) {
  Reduced r{shape, 1};
  std::vector<bool> hit(shape.size(), dims.empty());
  for (int64_t d : dims) hit[normalize_dim(d, shape.size(), op, shape)] = true;
  for (size_t i = 0; i < shape.size(); ++i)
    if (hit[i]) r.count *= shape[i], r.keep[i] = 1;
  return r;
}

// Copies g (the output's shape) to every element of `shape` it was reduced from, times scale.
Tensor spread(const Tensor& g, const Shape& keep, const Shape& shape, double scale) {
  Tensor wide = g.reshape(keep).expand(shape);  // zero-stride view, `shape`
  // A dense result: consumers get ordinary tensors, not views with zero strides.
  return scale == 1.0 ? wide.contiguous() : kernels::mul_scalar(wide, scale);
}

}  // namespace

// ---- sum: every input element gets the gradient of the output it was summed into ----
struct SumBackward : Node {
  Shape keep, shape;  // output shape with keepdim, and the input's shape
  Op kind() const override { return Op::Sum; }
  std::vector<Tensor> backward(const Tensor& g) override { return {spread(g, keep, shape, 1.0)}; }
};

Variable sum(const Variable& x, std::vector<int64_t> dims, bool keepdim) {
  Tensor out = kernels::sum(x.data(), dims, keepdim);  // x's shape minus (or 1 in) the dims
  auto node = make_node<SumBackward>({&x});
  if (node) node->keep = reduced_shape(x.shape(), dims, "sum").keep, node->shape = x.shape();
  return Variable::from_op(std::move(out), node);
}

// ---- mean: the same, divided by the number of elements averaged ----
struct MeanBackward : Node {
  Shape keep, shape;  // output shape with keepdim, and the input's shape
  int64_t count = 1;
  Op kind() const override { return Op::Mean; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {spread(g, keep, shape, 1.0 / static_cast<double>(count))};
  }
};

Variable mean(const Variable& x, std::vector<int64_t> dims, bool keepdim) {
  Tensor out = kernels::mean(x.data(), dims, keepdim);  // x's shape minus (or 1 in) the dims
  auto node = make_node<MeanBackward>({&x});
  if (node) {
    Reduced r = reduced_shape(x.shape(), dims, "mean");
    node->keep = r.keep, node->shape = x.shape(), node->count = r.count;
  }
  return Variable::from_op(std::move(out), node);
}

// ---- max: the gradient lands on the argmax, zero elsewhere ----
struct MaxBackward : Node {
  Tensor indices;  // int64, x's shape with dim = 1: where each max was
  Shape shape;     // the input's shape
  int dim = 0;
  Op kind() const override { return Op::Max; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {kernels::scatter_add_along(shape, dim, indices, g.reshape(indices.shape()))};
  }
  std::vector<SavedTensor> saved() override { return {{"indices", &indices}}; }
};

Variable max(const Variable& x, int64_t dim, bool keepdim) {
  kernels::MaxResult r = kernels::max(x.data(), dim, /*keepdim=*/true);  // values, indices: x's shape with dim = 1
  auto node = make_node<MaxBackward>({&x});
  if (node) {
    node->indices = r.indices;
    node->shape = x.shape();
    node->dim = normalize_dim(dim, x.shape().size(), "max", x.shape());
  }
  Tensor values = r.values;  // x's shape with dim = 1
  if (!keepdim) values = values.squeeze(dim);  // x's shape without dim
  return Variable::from_op(std::move(values), node);
}

}  // namespace gf

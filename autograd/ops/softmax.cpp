// softmax and log_softmax: both backward passes need only the saved output, not the input.
#include "autograd/ops/softmax.h"

#include "autograd/function.h"
#include "tensor/kernels/softmax.h"

namespace gf {

// ---- softmax: grad_x = y * (g - sum(g * y)) ----
struct SoftmaxBackward : Node {
  Tensor y;  // (..., C) the output
  Op kind() const override { return Op::Softmax; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::softmax_backward(y, g)}; }
  std::vector<SavedTensor> saved() override { return {{"y", &y}}; }
};

Variable softmax(const Variable& x) {
  Tensor y = kernels::softmax(x.data());  // (..., C)
  auto node = make_node<SoftmaxBackward>({&x});
  if (node) node->y = y;
  return Variable::from_op(std::move(y), node);
}

// ---- log_softmax: grad_x = g - exp(y) * sum(g) ----
struct LogSoftmaxBackward : Node {
  Tensor y;  // (..., C) the output
  Op kind() const override { return Op::LogSoftmax; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::log_softmax_backward(y, g)}; }
  std::vector<SavedTensor> saved() override { return {{"y", &y}}; }
};

Variable log_softmax(const Variable& x) {
  Tensor y = kernels::log_softmax(x.data());  // (..., C)
  auto node = make_node<LogSoftmaxBackward>({&x});
  if (node) node->y = y;
  return Variable::from_op(std::move(y), node);
}

}  // namespace gf

// Elementwise unary functions: each op's forward and backward side by side. Each Node saves one
// tensor: the output where the derivative is a function of it (exp, sqrt, tanh, relu, sigmoid),
// which the result Variable holds anyway, else the input.
#include "autograd/ops/unary.h"

#include "autograd/function.h"
#include "tensor/kernels/unary.h"

namespace gf {
namespace {

// A Node whose backward is kernels::<op>_backward(g, saved).
template <Tensor (*Backward)(const Tensor&, const Tensor&)>
struct SavedOneBackward : Node {
  Op op = Op::Exp;  // set by unary_op
  bool is_output = false;  // what `kept` is: the output y, or the input x
  Tensor kept;             // the input's shape: x or y, as the formula needs
  Op kind() const override { return op; }
  std::vector<Tensor> backward(const Tensor& g) override { return {Backward(g, kept)}; }
  std::vector<SavedTensor> saved() override { return {{is_output ? "y" : "x", &kept}}; }
};

// Runs forward(x); if a graph is recorded, the Node saves the output (save_output) or the input.
template <Tensor (*Backward)(const Tensor&, const Tensor&)>
Variable unary_op(const Variable& x, Op op, Tensor (*forward)(const Tensor&), bool save_output) {
  Tensor y = forward(x.data());  // x's shape
  auto node = make_node<SavedOneBackward<Backward>>({&x});
  if (node) {
    node->op = op;
    node->is_output = save_output;
    node->kept = save_output ? y : x.data();
  }
  return Variable::from_op(std::move(y), node);
}

}  // namespace

// d exp(x) = exp(x) = y
Variable exp(const Variable& x) { return unary_op<kernels::exp_backward>(x, Op::Exp, kernels::exp, true); }
// d log(x) = 1 / x
Variable log(const Variable& x) { return unary_op<kernels::log_backward>(x, Op::Log, kernels::log, false); }
// d sqrt(x) = 1 / (2 y)
Variable sqrt(const Variable& x) { return unary_op<kernels::sqrt_backward>(x, Op::Sqrt, kernels::sqrt, true); }
// d tanh(x) = 1 - y^2
Variable tanh(const Variable& x) { return unary_op<kernels::tanh_backward>(x, Op::Tanh, kernels::tanh, true); }
// d relu(x) = [y > 0]
Variable relu(const Variable& x) { return unary_op<kernels::relu_backward>(x, Op::Relu, kernels::relu, true); }
// d gelu(x) = Phi(x) + x phi(x): needs x itself
Variable gelu(const Variable& x) { return unary_op<kernels::gelu_backward>(x, Op::Gelu, kernels::gelu, false); }
// d sigmoid(x) = y (1 - y)
Variable sigmoid(const Variable& x) {
  return unary_op<kernels::sigmoid_backward>(x, Op::Sigmoid, kernels::sigmoid, true);
}

// ---- pow: d x^p = p x^(p-1); needs x and p ----
struct PowBackward : Node {
  Tensor x;  // the input's shape
  double p = 1.0;
  Op kind() const override { return Op::Pow; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::pow_backward(g, x, p)}; }
  std::vector<SavedTensor> saved() override { return {{"x", &x}}; }
};

Variable pow(const Variable& x, double p) {
  Tensor y = kernels::pow(x.data(), p);  // x's shape
  auto node = make_node<PowBackward>({&x});
  if (node) node->x = x.data(), node->p = p;
  return Variable::from_op(std::move(y), node);
}

}  // namespace gf

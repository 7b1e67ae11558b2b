// Broadcasting arithmetic: each op's forward and backward side by side. Gradients of broadcast
// inputs are summed back to the input's shape (sum_to).
#include "autograd/ops/arith.h"

#include "autograd/function.h"
#include "tensor/kernels/binary.h"

namespace gf {

// ---- add: d(a+b) = (g, g) ----
struct AddBackward : Node {
  Shape a_shape, b_shape;
  Op kind() const override { return Op::Add; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {needs_grad(0) ? kernels::sum_to(g, a_shape) : Tensor(), needs_grad(1) ? kernels::sum_to(g, b_shape) : Tensor()};
  }
};

Variable add(const Variable& a, const Variable& b) {
  Tensor out = kernels::add(a.data(), b.data());
  auto node = make_node<AddBackward>({&a, &b});
  if (node) node->a_shape = a.shape(), node->b_shape = b.shape();
  return Variable::from_op(std::move(out), node);
}

// ---- sub: d(a-b) = (g, -g) ----
struct SubBackward : Node {
  Shape a_shape, b_shape;
  Op kind() const override { return Op::Sub; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {needs_grad(0) ? kernels::sum_to(g, a_shape) : Tensor(),
            needs_grad(1) ? kernels::sum_to(kernels::mul_scalar(g, -1.0), b_shape) : Tensor()};
  }
};

Variable sub(const Variable& a, const Variable& b) {
  Tensor out = kernels::sub(a.data(), b.data());
  auto node = make_node<SubBackward>({&a, &b});
  if (node) node->a_shape = a.shape(), node->b_shape = b.shape();
  return Variable::from_op(std::move(out), node);
}

// ---- mul: d(a*b) = (g*b, g*a); each gradient needs only the other input ----
struct MulBackward : Node {
  Tensor a, b;  // saved inputs (only those needed)
  Shape a_shape, b_shape;
  Op kind() const override { return Op::Mul; }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {needs_grad(0) ? kernels::sum_to(kernels::mul(g, b), a_shape) : Tensor(),
            needs_grad(1) ? kernels::sum_to(kernels::mul(g, a), b_shape) : Tensor()};
  }
  std::vector<SavedTensor> saved() override { return {{"a", &a}, {"b", &b}}; }
};

Variable mul(const Variable& a, const Variable& b) {
  Tensor out = kernels::mul(a.data(), b.data());
  auto node = make_node<MulBackward>({&a, &b});
  if (node) {
    node->a_shape = a.shape(), node->b_shape = b.shape();
    if (node->needs_grad(1)) node->a = a.data();
    if (node->needs_grad(0)) node->b = b.data();
  }
  return Variable::from_op(std::move(out), node);
}

// ---- div: d(a/b) = (g/b, -g*a/b^2) ----
struct DivBackward : Node {
  Tensor a, b;
  Op kind() const override { return Op::Div; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor g_over_b = kernels::div(g, b);
    Tensor ga, gb;
    if (needs_grad(0)) ga = kernels::sum_to(g_over_b, a.shape());
    if (needs_grad(1)) gb = kernels::sum_to(kernels::mul_scalar(kernels::div(kernels::mul(g_over_b, a), b), -1.0), b.shape());
    return {ga, gb};
  }
  std::vector<SavedTensor> saved() override { return {{"a", &a}, {"b", &b}}; }
};

Variable div(const Variable& a, const Variable& b) {
  Tensor out = kernels::div(a.data(), b.data());
  auto node = make_node<DivBackward>({&a, &b});
  if (node) node->a = a.data(), node->b = b.data();
  return Variable::from_op(std::move(out), node);
}

// ---- neg and scalar arithmetic: d(s*a) = s*g, d(a+s) = g ----
// neg is mul_scalar by -1, so its Node reports "mul_scalar".
struct ScaleBackward : Node {
  double scale = 1.0;
  Op kind() const override { return Op::MulScalar; }
  std::vector<Tensor> backward(const Tensor& g) override { return {scale == 1.0 ? g : kernels::mul_scalar(g, scale)}; }
};

Variable mul_scalar(const Variable& a, double s) {
  Tensor out = kernels::mul_scalar(a.data(), s);
  auto node = make_node<ScaleBackward>({&a});
  if (node) node->scale = s;
  return Variable::from_op(std::move(out), node);
}

Variable neg(const Variable& a) { return mul_scalar(a, -1.0); }

// Its own Node so that anomaly reports and graph pictures name the op that ran.
struct AddScalarBackward : Node {
  Op kind() const override { return Op::AddScalar; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }  // the gradient passes through
};

Variable add_scalar(const Variable& a, double s) {
  Tensor out = kernels::add_scalar(a.data(), s);
  auto node = make_node<AddScalarBackward>({&a});
  return Variable::from_op(std::move(out), node);
}

}  // namespace gf

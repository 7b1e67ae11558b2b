// dropout: the backward applies the same mask and scale; the mask is kept as bool (1 byte per
// element) rather than as a float tensor of scales. relu_dropout: both ops in one, keeping only
// its output.
#include "autograd/ops/dropout.h"

#include <stdexcept>
#include <string>

#include "autograd/function.h"
#include "autograd/ops/unary.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"

namespace gf {

struct DropoutBackward : Node {
  Tensor mask;  // (...) bool, true = kept
  double scale = 1.0;
  Op kind() const override { return Op::Dropout; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::apply_mask(g, mask, scale)}; }
  std::vector<SavedTensor> saved() override { return {{"mask", &mask}}; }
};

namespace {
// Checks dropout's arguments for op (dropout or relu_dropout) and returns the kept elements'
// scale 1 / (1 - p); p == 1 drops everything: scale 0 instead of 1 / 0.
double kept_scale(const Variable& x, double p, const char* op) {
  GF_CHECK(p >= 0.0 && p <= 1.0, "{}: probability {} is outside [0, 1] (input {})", op, p, shape_str(x.shape()));
  GF_CHECK(is_floating(x.dtype()), "{}: expected a float32 or float64 tensor, got {} {}", op, dtype_name(x.dtype()),
           shape_str(x.shape()));
  return p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
}
}  // namespace

Variable dropout(const Variable& x, double p, bool training, Generator& gen) {
  const double scale = kept_scale(x, p, "dropout");
  if (!training || p == 0.0) return x;
  Tensor mask;                                                          // (...) bool, true = kept
  Tensor out = kernels::dropout_forward(x.data(), p, scale, gen, mask);  // (...)
  auto node = make_node<DropoutBackward>({&x});
  if (node) node->mask = std::move(mask), node->scale = scale;
  return Variable::from_op(std::move(out), node);
}

struct ReluDropoutBackward : Node {
  // (...): relu(x) * (scale or 0), the next layer's input, so no extra memory; under bf16 its
  // bfloat16 copy instead (the next linear keeps that one, and the float32 output is freed)
  Tensor out;
  double scale = 1.0;
  Op kind() const override { return Op::ReluDropout; }
  std::vector<Tensor> backward(const Tensor& g) override { return {kernels::relu_dropout_backward(g, out, scale)}; }
  std::vector<SavedTensor> saved() override { return {{"out", &out}}; }
};

Variable relu_dropout(const Variable& x, double p, bool training, Generator& gen) {
  const double scale = kept_scale(x, p, "relu_dropout");
  if (!training || p == 0.0) return relu(x);
  Tensor out_bf16;  // under bf16, the output rounded as it is written: the next linear reads it
  Tensor out = kernels::relu_dropout_forward(x.data(), p, scale, gen, kernels::bf16_products(x.dtype()) ? &out_bf16 : nullptr);  // (...)
  auto node = make_node<ReluDropoutBackward>({&x});
  if (node) node->out = out_bf16.defined() ? out_bf16 : out, node->scale = scale;
  Variable result = Variable::from_op(std::move(out), node);
  result.set_bf16_copy(std::move(out_bf16));
  return result;
}

}  // namespace gf

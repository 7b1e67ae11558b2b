#pragma once
// Variable: a Tensor that takes part in reverse-mode autograd. It holds the data, the gradient
// (for leaves, and for intermediates after retain_grad()) and the Node that produced it.
#include <memory>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "tensor/tensor.h"

namespace gf {

struct VariableImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;          // null for leaves
  std::shared_ptr<Node> grad_accumulator;  // leaves that require grad: their AccumulateGrad
  std::string name;
  // The data rounded to bfloat16 by the op that made it, under --precision bf16 (layer norm, the
  // feed-forward block's relu + dropout, the fused attention write it as they write the data), for
  // the bf16 products that read this tensor: they then skip their own rounding pass. Undefined
  // otherwise; set_data drops it.
  Tensor bf16;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the data in place (optimizers, loading weights); shape and dtype must not change.
  void set_data(const Tensor& t);
  // As set_data, for a leaf, but t may be of another dtype: nn::lay_out_for_decoding keeps a
  // decoding-only model's weights in bfloat16. The gradient held (of the old dtype) is dropped.
  void set_data_any_dtype(const Tensor& t);
  const Shape& shape() const { return data().shape(); }
  int64_t size(int64_t dim) const { return data().size(dim); }
  int ndim() const { return data().ndim(); }
  int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  double item() const { return data().item(); }

  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  // Leaves only: start or stop tracking gradients.
  Variable& requires_grad_(bool on = true);
  bool is_leaf() const { return !impl_ || impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

  const Tensor& grad() const { return impl_->grad; }
  Tensor& mutable_grad() { return impl_->grad; }
  void zero_grad() { impl_->grad = Tensor(); }

  // A new leaf sharing this data, outside the graph.
  Variable detach() const;

  // Backward from a scalar (upstream gradient 1), or from any tensor with an explicit upstream
  // gradient of its shape. The graph is freed afterwards unless retain_graph.
  void backward(bool retain_graph = false) const;
  void backward(const Tensor& grad_output, bool retain_graph = false) const;

  // An intermediate tensor keeps its gradient in .grad after backward (leaves always do).
  void retain_grad() const;
  // hook(grad) runs when this tensor's gradient is ready; a defined return value replaces it.
  // Returns a handle for remove_hook.
  int register_hook(GradHook hook) const;
  void remove_hook(int handle) const;

  // The Node that receives this tensor's gradient: its grad_fn, or for a leaf its accumulator;
  // null when it does not require grad.
  std::shared_ptr<Node> gradient_edge() const;

  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }
  std::string name() const { return impl_ ? impl_->name : ""; }
  void set_name(const std::string& n) const { impl_->name = n; }

  // Internal: wraps an op's result; node may be null (no graph recorded).
  static Variable from_op(Tensor data, std::shared_ptr<Node> node);
  // The data's bfloat16 copy made with it (VariableImpl::bf16), or undefined.
  const Tensor& bf16_copy() const;
  // Internal, for ops: records t (bfloat16, the data's shape, contiguous) as that copy.
  void set_bf16_copy(Tensor t) const;

 private:
  std::shared_ptr<VariableImpl> impl_;
};

}  // namespace gf

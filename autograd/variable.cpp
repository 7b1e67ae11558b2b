#include "autograd/variable.h"

#include <stdexcept>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/profile.h"
#include "tensor/check.h"
#include "tensor/kernels/binary.h"

namespace gf {

Node::~Node() {
  // Dismantle long chains iteratively: a Node whose last owner is this one gives its edges to
  // the stack before it dies, so destruction never recurses (100,000-op chains).
  std::vector<std::shared_ptr<Node>> stack = std::move(next);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n && n.use_count() == 1) {
      for (auto& e : n->next) stack.push_back(std::move(e));
      n->next.clear();
    }
  }
}

std::vector<Tensor> AccumulateGrad::backward(const Tensor& grad_output) {
  auto v = variable.lock();
  if (!v) return {};
  if (!v->grad.defined()) {
    // The first gradient is taken as it is when nothing else can see its buffer (as PyTorch
    // steals it): no copy. A buffer shared with another tensor (the caller's upstream gradient,
    // an add's two inputs) is copied, so accumulating later cannot write into someone else's.
    const auto& st = grad_output.storage();
    const bool sole = st.use_count() == 1 && grad_output.is_contiguous() && grad_output.offset() == 0 &&
                      static_cast<size_t>(grad_output.numel()) * dtype_size(grad_output.dtype()) == st->nbytes();
    v->grad = sole ? grad_output : grad_output.clone();
  } else {
    kernels::add_(v->grad, grad_output);
  }
  return {};
}

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  check_defined(data, "Variable");
  impl_->data = std::move(data);
  if (requires_grad) requires_grad_(true);
}

const Tensor& Variable::data() const {
  GF_CHECK(impl_, "Variable::data: the Variable is undefined (default-constructed)");
  return impl_->data;
}

void Variable::set_data(const Tensor& t) {
  GF_CHECK(t.shape() == impl_->data.shape() && t.dtype() == impl_->data.dtype(), "Variable::set_data: {} {} does not match {} {}",
           dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(impl_->data.dtype()), shape_str(impl_->data.shape()));
  impl_->data = t;
  impl_->bf16 = Tensor();
}

const Tensor& Variable::bf16_copy() const {
  static const Tensor kNone;
  return impl_ ? impl_->bf16 : kNone;
}

void Variable::set_bf16_copy(Tensor t) const {
  GF_CHECK_AS(std::logic_error, !t.defined() || (t.dtype() == DType::BFloat16 && t.shape() == impl_->data.shape() && t.is_contiguous()),
              "set_bf16_copy: {} {} for data {}", t.defined() ? dtype_name(t.dtype()) : "undefined", shape_str(t.shape()),
              shape_str(impl_->data.shape()));
  impl_->bf16 = std::move(t);
}

void Variable::set_data_any_dtype(const Tensor& t) {
  GF_CHECK(t.shape() == impl_->data.shape() && is_leaf(), "Variable::set_data_any_dtype: {} {} for a {} leaf of shape {}",
           dtype_name(t.dtype()), shape_str(t.shape()), is_leaf() ? "" : "non-", shape_str(impl_->data.shape()));
  impl_->data = t;
  impl_->bf16 = Tensor();
  impl_->grad = Tensor();  // of the old dtype
}

Variable& Variable::requires_grad_(bool on) {
  GF_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad; this one of shape {} is the output of {}",
           shape_str(shape()), impl_->grad_fn->name());
  GF_CHECK(!on || is_floating(impl_->data.dtype()), "requires_grad_: {} tensors cannot require grad (shape {})",
           dtype_name(impl_->data.dtype()), shape_str(shape()));
  impl_->requires_grad = on;
  if (!on) impl_->grad_accumulator.reset();
  return *this;
}

Variable Variable::detach() const { return Variable(data(), false); }

std::shared_ptr<Node> Variable::gradient_edge() const {
  if (!impl_ || !impl_->requires_grad) return nullptr;
  if (impl_->grad_fn) return impl_->grad_fn;
  if (!impl_->grad_accumulator) impl_->grad_accumulator = std::make_shared<AccumulateGrad>(impl_);
  return impl_->grad_accumulator;
}

Variable Variable::from_op(Tensor data, std::shared_ptr<Node> node) {
  Variable v(std::move(data));
  if (profile::enabled()) profile::forward_done(node ? node->name() : nullptr, v.impl_->data);
  if (node) {
    v.impl_->requires_grad = true;
    node->output_shape = v.impl_->data.shape();
    if (AnomalyMode::enabled()) check_forward_anomaly(*node, v.impl_->data);
    v.impl_->grad_fn = std::move(node);
  }
  return v;
}

void Variable::backward(bool retain_graph) const {
  GF_CHECK(data().numel() == 1,
           "backward: called without an upstream gradient on a tensor of shape {}; only a one-element tensor gets the "
           "implicit gradient 1",
           shape_str(shape()));
  backward(Tensor::ones(shape(), dtype()), retain_graph);
}

void Variable::backward(const Tensor& grad_output, bool retain_graph) const {
  GF_CHECK(requires_grad(), "backward: tensor of shape {} does not require grad", shape_str(shape()));
  GF_CHECK(grad_output.shape() == shape(), "backward: upstream gradient {} does not match the tensor's shape {}",
           shape_str(grad_output.shape()), shape_str(shape()));
  run_backward(gradient_edge(), grad_output.to(dtype()), retain_graph);
}

void Variable::retain_grad() const {
  GF_CHECK(requires_grad(), "retain_grad: tensor of shape {} does not require grad", shape_str(shape()));
  if (is_leaf()) return;  // leaves keep their gradient anyway
  impl_->grad_fn->retained = impl_;
}

namespace {
int g_next_hook = 1;
}

int Variable::register_hook(GradHook hook) const {
  auto edge = gradient_edge();
  GF_CHECK(edge, "register_hook: tensor of shape {} does not require grad", shape_str(shape()));
  int handle = g_next_hook++;
  edge->hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::remove_hook(int handle) const {
  auto edge = gradient_edge();
  if (!edge) return;
  auto& hs = edge->hooks;
  for (auto it = hs.begin(); it != hs.end(); ++it)
    if (it->first == handle) {
      hs.erase(it);
      return;
    }
}

namespace detail {
namespace {
uint64_t g_node_sequence = 0;

template <class Inputs>
bool any_requires_grad_in(const Inputs& inputs) {
  for (const Variable* v : inputs)
    if (v && v->requires_grad()) return true;
  return false;
}

template <class Inputs>
void wire_node_to(Node& node, const Inputs& inputs) {
  node.sequence = ++g_node_sequence;
  node.next.reserve(inputs.size());
  node.input_shapes.reserve(inputs.size());
  for (const Variable* v : inputs) {
    node.next.push_back(v ? v->gradient_edge() : nullptr);
    node.input_shapes.push_back(v && v->defined() ? v->shape() : Shape{});
  }
  if (AnomalyMode::enabled()) node.created_in = NameScope::current();
}
}  // namespace

bool any_requires_grad(std::initializer_list<const Variable*> inputs) { return any_requires_grad_in(inputs); }
bool any_requires_grad(const std::vector<const Variable*>& inputs) { return any_requires_grad_in(inputs); }
void wire_node(Node& node, std::initializer_list<const Variable*> inputs) { wire_node_to(node, inputs); }
void wire_node(Node& node, const std::vector<const Variable*>& inputs) { wire_node_to(node, inputs); }
}  // namespace detail

}  // namespace gf

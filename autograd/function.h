#pragma once
// What an op needs to record itself: make_node() builds its backward Node only when some input
// requires grad and grad mode is on, and wires the edges to the inputs' gradient sinks.
//
//   Variable mul(const Variable& a, const Variable& b) {
//     Tensor out = kernels::mul(a.data(), b.data());              // forward
//     auto node = make_node<MulBackward>({&a, &b});
//     if (node) { node->a = a.data(); node->b = b.data(); }       // save what backward needs
//     return Variable::from_op(std::move(out), node);
//   }
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/variable.h"

namespace gf {

namespace detail {
void wire_node(Node& node, std::initializer_list<const Variable*> inputs);
bool any_requires_grad(std::initializer_list<const Variable*> inputs);
void wire_node(Node& node, const std::vector<const Variable*>& inputs);
bool any_requires_grad(const std::vector<const Variable*>& inputs);
}  // namespace detail

template <class NodeT>
std::shared_ptr<NodeT> make_node(std::initializer_list<const Variable*> inputs) {
  if (!GradMode::enabled() || !detail::any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>();
  detail::wire_node(*node, inputs);
  return node;
}

// For ops with a run-time number of inputs (concat).
template <class NodeT>
std::shared_ptr<NodeT> make_node(const std::vector<const Variable*>& inputs) {
  if (!GradMode::enabled() || !detail::any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<NodeT>();
  detail::wire_node(*node, inputs);
  return node;
}

}  // namespace gf

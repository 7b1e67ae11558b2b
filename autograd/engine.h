#pragma once
// The backward pass: an iterative topological walk over Nodes (no recursion, so very deep
// graphs are fine), gradients summed where a tensor was used more than once.
#include <memory>

#include "autograd/node.h"

namespace gf {

void run_backward(const std::shared_ptr<Node>& root, const Tensor& grad_output, bool retain_graph);

// Anomaly mode checks; throw std::runtime_error naming the op, its shapes and where it was made.
void check_forward_anomaly(const Node& node, const Tensor& output);

}  // namespace gf

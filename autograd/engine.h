#pragma once
// The backward pass: an iterative topological walk over Nodes (no recursion, so very deep
// graphs are fine), gradients summed where a tensor was used more than once.
#include <memory>

#include "autograd/node.h"

namespace gf {

void run_backward(const std::shared_ptr<Node>& root, const Tensor& grad_output, bool retain_graph);

// Anomaly mode's forward check: throws std::runtime_error at the first NaN of output, naming the
// op, its input shapes and the scope it was made in.
void check_forward_anomaly(const Node& node, const Tensor& output);

}  // namespace gf

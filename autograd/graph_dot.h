#pragma once
// The backward graph as data and as a Graphviz DOT picture: every Node reachable from a tensor's
// grad_fn, named by op, output shape and the NameScope it was created in, with the tensors it
// saved for backward and their bytes. The walk is iterative (an explicit stack), so graphs of any
// depth are fine. Scopes are recorded only while anomaly mode is on (AnomalyGuard): capture a
// graph for a picture with it on.
//
//   AnomalyGuard scopes;
//   Variable y = f(x);
//   auto nodes = reachable_nodes(y.gradient_edge());   // keeps the Nodes (and what they saved) alive
//   std::string dot = graph_dot(describe_graph(nodes)); // `dot -Tsvg` draws it
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/variable.h"

namespace gf {

// One tensor a Node keeps for its backward.
struct GraphSaved {
  std::string name;  // as the Node's formula names it: "y", "weight", "mask"
  Shape shape;
  DType dtype = DType::Float32;
  size_t bytes = 0;                  // numel x element size: what this view covers
  const Storage* storage = nullptr;  // its buffer (identity only): views of one buffer share it
  size_t storage_bytes = 0;          // the whole buffer, all of which the view keeps alive
};

struct GraphNode {
  std::string op;       // Node::name(): "matmul", "softmax", "AccumulateGrad"
  Shape shape;          // the output's shape; for a leaf's accumulator, the leaf's shape
  std::string scope;    // Node::created_in: "decoder.layers.0/self_attn" ("" at top level or without anomaly mode)
  uint64_t sequence = 0;  // creation order (0 for accumulators, which are made on first use)
  bool leaf = false;      // an AccumulateGrad: where a leaf's gradient lands
  std::string leaf_name;  // the leaf Variable's name, when it has one
  const VariableImpl* variable = nullptr;  // the leaf, for accumulators (identity only)
  const Storage* leaf_storage = nullptr;   // the leaf's data buffer
  bool released = false;                   // backward has run through it and freed what it saved
  std::vector<GraphSaved> saved;           // the saved tensors still held (released ones are gone)
  // Per input of the op, in order (as Node::next): the index of the Node its gradient goes to, or
  // kNone when that input takes no gradient (or its Node is not in the graph).
  std::vector<size_t> inputs;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t saved_bytes() const;
};

struct Graph {
  std::vector<GraphNode> nodes;  // nodes[0] is the root
  size_t edges() const;
  // Sum of every saved tensor's bytes as listed (a buffer two Nodes save counts twice).
  size_t saved_bytes() const;
  // The distinct buffers the saved tensors keep alive, each counted once, whole.
  size_t held_bytes() const;
  // held_bytes() without the buffers of the graph's leaves (parameters, inputs that require grad):
  // the memory the graph holds beyond what exists anyway.
  size_t held_activation_bytes() const;
};

// Every Node reachable from root along Node::next, root first, each once, in depth-first order
// (iterative). Holding the result keeps the Nodes alive across backward, so that what backward
// freed can be inspected afterwards. Empty for a null root.
std::vector<std::shared_ptr<Node>> reachable_nodes(const std::shared_ptr<Node>& root);

// What these Nodes are, with the edges among them (edges to Nodes not in the list are left out).
Graph describe_graph(const std::vector<std::shared_ptr<Node>>& nodes);

// describe_graph(reachable_nodes(v.gradient_edge())); an empty Graph when v requires no grad.
Graph capture_graph(const Variable& v);

struct DotOptions {
  std::string title;  // the picture's caption (the totals follow it)
  // Names for leaves, overriding Variable::name() (e.g. full parameter paths from named_parameters()).
  std::unordered_map<const VariableImpl*, std::string> leaf_names;
  bool clusters = true;  // a box per scope, nested along '/'
  size_t max_saved_lines = 6;  // saved tensors listed per node; more are summed on one line
};

// The graph in Graphviz DOT. Arrows follow the forward pass (from an input's Node to the Node that
// consumed it); backward runs against them, starting at the root (drawn with a double border).
std::string graph_dot(const Graph& graph, const DotOptions& options = {});

// "512 B", "8.0 KiB", "1.50 MiB": bytes for people.
std::string format_bytes(size_t bytes);

}  // namespace gf

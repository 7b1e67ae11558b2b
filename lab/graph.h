#pragma once
// The measurements behind lab `graph` (lab/labs/graph.cpp), public so that tests can check them;
// defined in lab/parts/graph_memory.cpp. A forward pass of one nn::TransformerDecoderLayer records
// the autograd graph; its saved tensors are the activation memory of training.
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/graph_dot.h"
#include "nn/transformer_decoder.h"

namespace gf::lab {

constexpr const char* kGraphLayerScope = "decoder.layers.0";  // the layer's NameScope

// One forward pass of the layer and the graph it recorded.
struct GraphPass {
  int64_t T = 0;
  Variable tgt, memory;  // (B, T, D), (B, S, D): leaves that require grad, as the layer's inputs in a model do
  Variable output;       // (B, T, D)
  Variable loss;         // (): sum(output * r) with a fixed random r, so every output element gets a gradient
  std::vector<std::shared_ptr<Node>> nodes;  // the whole graph, root first; held across backward
};
// The inputs, r and (seed + 1) the dropout masks drawn from `seed`; the Nodes record their scopes.
GraphPass graph_forward(const nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed);
// The pass's graph in Graphviz DOT, leaves named by their parameter paths, under `title`.
std::string graph_pass_dot(const nn::TransformerDecoderLayer& layer, const GraphPass& p, const std::string& title);

// What kind of memory a saved buffer is: the attention maps (the weights, and the masks of their
// shape: causal, dropout) of self- or cross-attention, a leaf's buffer (parameters and the layer's
// inputs, which exist anyway), or any other activation.
enum class SavedKind { SelfMaps, CrossMaps, Leaf, Other };
const char* saved_kind_name(SavedKind k);
// Each saved buffer's kind, by the op that saved it: a map is what an attention scope's softmax,
// masked_fill and dropout saved, the fused op's row statistic, and the weights the matmul with V
// saved (its first operand, made by the softmax or, in training, the attention dropout).
std::unordered_map<const Storage*, SavedKind> classify_saved(const Graph& g);

// Saved bytes against the target length: one graph per length, the same structure at each.
struct GraphSweep {
  std::vector<double> T;
  std::vector<Graph> graphs;
  std::map<SavedKind, std::vector<double>> bytes;  // per kind, per length: bytes of the distinct buffers
  std::vector<double> held, listed;                // per length: distinct buffers; every saved tensor as listed
};
// Throws std::logic_error when the graphs' structure (op and saved tensors of node i) differs.
GraphSweep graph_sweep(std::vector<double> T, std::vector<Graph> graphs);
// One saved tensor followed over the lengths: log-log slope of its bytes against T, its kind at the
// longest length.
struct TrackedSaved {
  size_t node, index;
  double slope;
  SavedKind kind;
};
std::vector<TrackedSaved> track_saved(const GraphSweep& s);
// Saved bytes (as listed) per scope, per length.
std::map<std::string, std::vector<double>> bytes_by_scope(const GraphSweep& s);
// The log-log slope of bytes on T between each pair of consecutive lengths.
std::vector<double> local_slopes(const std::vector<double>& T, const std::vector<double>& bytes);

// A forward and backward of a fresh pass at length T, measuring what the graph holds before and
// after (live bytes: tensor/storage.h's process-wide count, so a measurement runs alone), and the
// layer's gradients afterwards. The layer's gradients are zeroed first.
struct AfterBackward {
  size_t saved_before = 0, saved_after = 0;
  int64_t op_nodes = 0, released = 0;
  int64_t live_before_forward = 0, live_after_forward = 0, live_after_backward = 0;
  int64_t kept_bytes = 0;  // what must remain: the gradients, the inputs, the output and loss
  struct Param {
    std::string name, shape;
    double grad_norm = NAN;  // NaN: no gradient
    bool reached = false;    // an accumulator in the pass's graph, and a finite non-zero gradient
  };
  std::vector<Param> params;
  double bias[2][3] = {};  // [self, cross attention][q, k, v]: |grad| of in_proj_bias's thirds
};
AfterBackward run_backward_pass(nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed, bool retain_graph);

// Graphviz's `dot -Tsvg` output for a .dot file, or "" when dot is not installed or fails.
std::string run_dot(const std::string& dot_path);

}  // namespace gf::lab

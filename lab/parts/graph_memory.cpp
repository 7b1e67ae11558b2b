// The measurements behind lab `graph` (lab/labs/graph.cpp; declared in lab/graph.h).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "lab/common.h"
#include "lab/graph.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "tensor/storage.h"

namespace gf::lab {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

GraphPass graph_forward(const nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed) {
  const int64_t D = layer.options.d_model;
  Generator gen(seed);
  default_generator().seed(seed + 1);  // the dropout masks
  GraphPass p;
  p.T = T;
  p.tgt = Variable(kernels::randn({B, T, D}, gen), true);     // (B, T, D)
  p.memory = Variable(kernels::randn({B, S, D}, gen), true);  // (B, S, D)
  p.tgt.set_name("tgt");
  p.memory.set_name("memory");
  Variable r(kernels::randn({B, T, D}, gen));  // (B, T, D)
  AnomalyGuard scopes;  // Nodes record the NameScope they were made in only in anomaly mode
  {
    NameScope scope(kGraphLayerScope);
    p.output = layer.forward(p.tgt, p.memory, nn::make_causal_mask(T)).output;  // (B, T, D)
  }
  p.loss = sum(p.output * r);  // ()
  p.nodes = reachable_nodes(p.loss.grad_fn());
  return p;
}

std::string graph_pass_dot(const nn::TransformerDecoderLayer& layer, const GraphPass& p, const std::string& title) {
  DotOptions o;
  o.title = title;
  for (const auto& [name, v] : layer.named_parameters()) o.leaf_names[v.impl().get()] = std::string(kGraphLayerScope) + "." + name;
  o.leaf_names[p.tgt.impl().get()] = "tgt (input)";
  o.leaf_names[p.memory.impl().get()] = "memory (input)";
  return graph_dot(describe_graph(p.nodes), o);
}

const char* saved_kind_name(SavedKind k) {
  switch (k) {
    case SavedKind::SelfMaps: return "self-attention maps";
    case SavedKind::CrossMaps: return "cross-attention maps";
    case SavedKind::Leaf: return "leaves' buffers";
    case SavedKind::Other: return "other activations";
  }
  return "?";
}

std::unordered_map<const Storage*, SavedKind> classify_saved(const Graph& g) {
  std::unordered_map<const Storage*, SavedKind> kind;
  for (const auto& n : g.nodes)
    if (n.leaf_storage) kind[n.leaf_storage] = SavedKind::Leaf;
  auto made_by_weights_op = [&](const GraphNode& n) {
    const size_t a = n.inputs.empty() ? GraphNode::kNone : n.inputs[0];
    return a != GraphNode::kNone && (g.nodes[a].op == "softmax" || g.nodes[a].op == "dropout");
  };
  for (const auto& n : g.nodes) {
    const bool self = ends_with(n.scope, "/self_attn"), cross = ends_with(n.scope, "/multihead_attn");
    if (!self && !cross) continue;
    const SavedKind k = self ? SavedKind::SelfMaps : SavedKind::CrossMaps;
    if (n.op == "softmax" || n.op == "masked_fill" || n.op == "dropout")
      for (const auto& x : n.saved) kind.try_emplace(x.storage, k);
    // The fused op (docs/attention.md) keeps no map: its per-row log-sum-exp is all that is left.
    if (n.op == "attention")
      for (const auto& x : n.saved)
        if (x.name == "lse") kind.try_emplace(x.storage, k);
    if (n.op == "matmul" && made_by_weights_op(n))
      for (const auto& x : n.saved)
        if (x.name == "a") kind.try_emplace(x.storage, k);
  }
  for (const auto& n : g.nodes)
    for (const auto& x : n.saved) kind.try_emplace(x.storage, SavedKind::Other);
  return kind;
}

GraphSweep graph_sweep(std::vector<double> T, std::vector<Graph> graphs) {
  GraphSweep s{std::move(T), std::move(graphs), {}, {}, {}};
  for (const Graph& g : s.graphs) {
    const auto kind = classify_saved(g);  // bytes of the distinct saved buffers of each kind
    std::map<SavedKind, double> bytes{{SavedKind::SelfMaps, 0}, {SavedKind::CrossMaps, 0}, {SavedKind::Leaf, 0}, {SavedKind::Other, 0}};
    std::unordered_set<const Storage*> seen;
    for (const auto& n : g.nodes)
      for (const auto& x : n.saved)
        if (seen.insert(x.storage).second) bytes[kind.at(x.storage)] += static_cast<double>(x.storage_bytes);
    for (const auto& [k, b] : bytes) s.bytes[k].push_back(b);
    s.held.push_back(static_cast<double>(g.held_bytes()));
    s.listed.push_back(static_cast<double>(g.saved_bytes()));
  }
  // The walk is deterministic, so node i is the same op at every length: checked here, since the
  // per-tensor slopes pair them up.
  for (size_t j = 0; j < s.graphs.size(); ++j) {
    const Graph& g = s.graphs[j];
    bool same = g.nodes.size() == s.graphs[0].nodes.size();
    for (size_t i = 0; same && i < g.nodes.size(); ++i)
      same = g.nodes[i].op == s.graphs[0].nodes[i].op && g.nodes[i].saved.size() == s.graphs[0].nodes[i].saved.size();
    GF_CHECK_AS(std::logic_error, same, "lab graph: the graph's structure changed with the target length (T {} against T {})", s.T[j], s.T[0]);
  }
  return s;
}

std::vector<TrackedSaved> track_saved(const GraphSweep& s) {
  const Graph& last = s.graphs.back();
  const auto kind = classify_saved(last);
  std::vector<TrackedSaved> out;
  for (size_t i = 0; i < last.nodes.size(); ++i)
    for (size_t k = 0; k < last.nodes[i].saved.size(); ++k) {
      std::vector<double> bytes;
      for (const Graph& g : s.graphs) bytes.push_back(static_cast<double>(g.nodes[i].saved[k].bytes));
      out.push_back({i, k, loglog_slope(s.T, bytes), kind.at(last.nodes[i].saved[k].storage)});
    }
  return out;
}

std::map<std::string, std::vector<double>> bytes_by_scope(const GraphSweep& s) {
  std::map<std::string, std::vector<double>> out;
  for (size_t i = 0; i < s.graphs.size(); ++i)
    for (const auto& n : s.graphs[i].nodes) {
      if (n.leaf) continue;
      auto& v = out[n.scope.empty() ? "(top level)" : n.scope];
      v.resize(s.graphs.size(), 0.0);
      v[i] += static_cast<double>(n.saved_bytes());
    }
  return out;
}

std::vector<double> local_slopes(const std::vector<double>& T, const std::vector<double>& bytes) {
  std::vector<double> out;
  for (size_t i = 0; i + 1 < T.size(); ++i) out.push_back(std::log(bytes[i + 1] / bytes[i]) / std::log(T[i + 1] / T[i]));
  return out;
}

AfterBackward run_backward_pass(nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed, bool retain_graph) {
  AfterBackward a;
  layer.zero_grad();
  a.live_before_forward = memory_stats().live_bytes;
  GraphPass p = graph_forward(layer, B, T, S, seed);
  a.live_after_forward = memory_stats().live_bytes;
  const Graph before = describe_graph(p.nodes);
  a.saved_before = before.saved_bytes();
  p.loss.backward(retain_graph);
  const Graph after = describe_graph(p.nodes);
  a.saved_after = after.saved_bytes();
  for (const auto& n : after.nodes) a.op_nodes += !n.leaf, a.released += n.released;
  a.live_after_backward = memory_stats().live_bytes;
  // What must remain after backward: the gradients, the output and loss (still referenced here).
  for (const auto& v : layer.parameters()) a.kept_bytes += static_cast<int64_t>(v.grad().nbytes());
  for (const Variable* v : {&p.tgt, &p.memory}) a.kept_bytes += static_cast<int64_t>(v->grad().nbytes() + v->data().nbytes());
  for (const Variable* v : {&p.output, &p.loss}) a.kept_bytes += static_cast<int64_t>(v->data().nbytes());
  std::unordered_set<const VariableImpl*> sinks;  // the leaves with an accumulator in the graph
  for (const auto& n : before.nodes)
    if (n.leaf) sinks.insert(n.variable);
  for (const auto& [name, v] : layer.named_parameters()) {
    const bool has = v.grad().defined();
    a.params.push_back({name, shape_str(v.shape()), has ? l2_norm(v.grad()) : NAN,
                        sinks.count(v.impl().get()) && has && count_nonfinite(v.grad()) == 0 && l2_norm(v.grad()) > 0});
  }
  for (int cross = 0; cross < 2; ++cross) {
    const nn::MultiheadAttention& at = cross ? *layer.multihead_attn : *layer.self_attn;
    const Tensor g = at.in_proj_bias.grad();  // (3D): the q, k and v thirds
    for (int64_t third = 0; third < 3; ++third) a.bias[cross][third] = l2_norm(g.narrow(0, third * at.embed_dim, at.embed_dim));
  }
  return a;
}

std::string run_dot(const std::string& dot_path) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) return "";
  std::FILE* p = popen(("dot -Tsvg " + shell_quote(dot_path) + " 2>/dev/null").c_str(), "r");
  if (!p) return "";
  std::string svg;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) svg.append(buf, n);
  return pclose(p) == 0 ? svg : "";
}

}  // namespace gf::lab

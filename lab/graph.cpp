// Lab `graph`: the autograd graph of one Transformer decoder layer, forward and backward.
//
// Reverse-mode autograd records, for every op of the forward pass, a Node that knows how to send
// the gradient of its output back to its inputs, and keeps the tensors that formula needs
// (softmax keeps its output, matmul both operands, layer norm its input and statistics). Those
// saved tensors are the activation memory of training. Here: one nn::TransformerDecoderLayer in
// training mode (dropout on), drawn as a Graphviz graph (nodes by op, output shape and module
// scope, saved tensors and their bytes); the saved bytes measured at several target lengths (the
// self-attention weights are T x T, so they grow quadratically while the rest grows linearly);
// which parameters backward reaches; and what backward frees (Node::release).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/graph_dot.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "nn/masks.h"
#include "nn/transformer_decoder.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "tensor/storage.h"

namespace gf::lab {
namespace {

const char* kLayerScope = "decoder.layers.0";

// One forward pass of the layer and the graph it recorded.
struct Pass {
  int64_t T = 0;
  Variable tgt, memory;  // (B, T, D), (B, S, D): leaves that require grad, as the layer's inputs in a model do
  Variable output;       // (B, T, D)
  Variable loss;         // (): sum(output * r) with a fixed random r, so every output element gets a gradient
  std::vector<std::shared_ptr<Node>> nodes;  // the whole graph, root first; held across backward
};

Pass forward(const nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed) {
  const int64_t D = layer.options.d_model;
  Generator gen(seed);
  default_generator().seed(seed + 1);  // the dropout masks
  Pass p;
  p.T = T;
  p.tgt = Variable(kernels::randn({B, T, D}, gen), true);     // (B, T, D)
  p.memory = Variable(kernels::randn({B, S, D}, gen), true);  // (B, S, D)
  p.tgt.set_name("tgt");
  p.memory.set_name("memory");
  Variable r(kernels::randn({B, T, D}, gen));  // (B, T, D)
  AnomalyGuard scopes;  // Nodes record the NameScope they were made in only in anomaly mode
  {
    NameScope scope(kLayerScope);
    p.output = layer.forward(p.tgt, p.memory, nn::make_causal_mask(T)).output;  // (B, T, D)
  }
  p.loss = sum(p.output * r);  // ()
  p.nodes = reachable_nodes(p.loss.grad_fn());
  return p;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// What kind of memory a saved buffer is: the attention maps (the weights, and the masks of their
// shape: causal, dropout) of self- or cross-attention, a leaf's buffer (parameters and the layer's
// inputs, which exist anyway), or any other activation.
enum class Kind { SelfMaps, CrossMaps, Leaf, Other };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::SelfMaps: return "self-attention maps";
    case Kind::CrossMaps: return "cross-attention maps";
    case Kind::Leaf: return "leaves' buffers";
    case Kind::Other: return "other activations";
  }
  return "?";
}

// Each saved buffer's kind, by the op that saved it: a map is what an attention scope's softmax,
// masked_fill and dropout saved, and the weights the matmul with V saved (its first operand, made by
// the softmax or, in training, the attention dropout).
std::unordered_map<const Storage*, Kind> classify(const Graph& g) {
  std::unordered_map<const Storage*, Kind> kind;
  for (const auto& n : g.nodes)
    if (n.leaf_storage) kind[n.leaf_storage] = Kind::Leaf;
  auto made_by_weights_op = [&](const GraphNode& n) {
    const size_t a = n.inputs.empty() ? GraphNode::kNone : n.inputs[0];
    return a != GraphNode::kNone && (g.nodes[a].op == "softmax" || g.nodes[a].op == "dropout");
  };
  for (const auto& n : g.nodes) {
    const bool self = ends_with(n.scope, "/self_attn"), cross = ends_with(n.scope, "/multihead_attn");
    if (!self && !cross) continue;
    const Kind k = self ? Kind::SelfMaps : Kind::CrossMaps;
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
    for (const auto& x : n.saved) kind.try_emplace(x.storage, Kind::Other);
  return kind;
}

// Bytes of the distinct saved buffers of each kind.
std::map<Kind, double> bytes_by_kind(const Graph& g) {
  const auto kind = classify(g);
  std::map<Kind, double> out{{Kind::SelfMaps, 0}, {Kind::CrossMaps, 0}, {Kind::Leaf, 0}, {Kind::Other, 0}};
  std::unordered_set<const Storage*> seen;
  for (const auto& n : g.nodes)
    for (const auto& s : n.saved)
      if (seen.insert(s.storage).second) out[kind.at(s.storage)] += static_cast<double>(s.storage_bytes);
  return out;
}

std::vector<int64_t> parse_lengths(const std::string& text) {
  std::vector<int64_t> v;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GF_CHECK(used != 0 && used == item.size() && x >= 1, "lab graph: --lengths expects positive integers separated by commas, got '{}'",
             text);
    v.push_back(x);
  }
  GF_CHECK(v.size() >= 3, "lab graph: --lengths needs at least three lengths, got '{}'", text);
  return v;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Graphviz's `dot` output for a .dot file, or "" when dot is not installed or fails.
std::string run_dot(const std::string& dot_path) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) return "";
  std::FILE* p = popen(("dot -Tsvg " + shell_quote(dot_path) + " 2>/dev/null").c_str(), "r");
  if (!p) return "";
  std::string svg;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) svg.append(buf, n);
  return pclose(p) == 0 ? svg : "";
}

// ---------------------------------------------------------------- the picture

std::unordered_map<const VariableImpl*, std::string> leaf_names(const nn::TransformerDecoderLayer& layer, const Pass& p) {
  std::unordered_map<const VariableImpl*, std::string> names;
  for (const auto& [name, v] : layer.named_parameters()) names[v.impl().get()] = std::string(kLayerScope) + "." + name;
  names[p.tgt.impl().get()] = "tgt (input)";
  names[p.memory.impl().get()] = "memory (input)";
  return names;
}

void draw(Report& r, const nn::TransformerDecoderLayer& layer, const Pass& p, int64_t B, int64_t S) {
  DotOptions o;
  o.title = fmt::format("gradflow: one TransformerDecoderLayer (d_model {}, {} heads, ff {}, dropout {}), B {}, T {}, S {}, loss = sum(output * r)",
                        layer.options.d_model, layer.options.nhead, layer.options.dim_feedforward, layer.options.dropout, B, p.T, S);
  o.leaf_names = leaf_names(layer, p);
  const std::string dot = graph_dot(describe_graph(p.nodes), o);
  r.write_file("decoder_layer.dot", dot);
  const std::string svg = run_dot((std::filesystem::path(r.out_dir()) / "decoder_layer.dot").string());
  if (svg.empty()) {
    r.say("Graphviz's `dot` was not found (Debian: apt-get install graphviz), so the graph is only in decoder_layer.dot;");
    r.say("draw it elsewhere with `dot -Tsvg decoder_layer.dot -o decoder_layer.svg`.");
  } else {
    r.write_file("decoder_layer.svg", svg);
    r.say("the graph, drawn by Graphviz: decoder_layer.svg (from decoder_layer.dot)");
  }
}

// Nodes and saved bytes per scope of the picture's graph.
void scope_table(Report& r, const Graph& g) {
  struct Row {
    int64_t nodes = 0, saved = 0;
    size_t bytes = 0;
  };
  std::map<std::string, Row> by;
  for (const auto& n : g.nodes) {
    Row& row = by[n.leaf ? "(leaves: parameters and inputs)" : n.scope.empty() ? "(top level: the loss)" : n.scope];
    row.nodes += 1, row.saved += static_cast<int64_t>(n.saved.size()), row.bytes += n.saved_bytes();
  }
  Table t("scopes", {"scope", "nodes", "saved tensors", "saved bytes (as listed)"});
  for (const auto& [scope, row] : by) t.row({scope, row.nodes, row.saved, row.bytes});
  r.print(t);
}

// ---------------------------------------------------------------- the sweep over lengths

struct Sweep {
  std::vector<double> T;
  std::vector<Graph> graphs;  // one per length, the same structure
  std::map<Kind, std::vector<double>> bytes;  // per kind, per length
  std::vector<double> held, listed;
};

Sweep sweep(Report& r, const nn::TransformerDecoderLayer& layer, const std::vector<int64_t>& lengths, int64_t B, int64_t S) {
  Sweep s;
  for (int64_t T : lengths) {
    Pass p = forward(layer, B, T, S, r.seed(0));
    s.T.push_back(static_cast<double>(T));
    s.graphs.push_back(describe_graph(p.nodes));
    const Graph& g = s.graphs.back();
    for (const auto& [k, b] : bytes_by_kind(g)) s.bytes[k].push_back(b);
    s.held.push_back(static_cast<double>(g.held_bytes()));
    s.listed.push_back(static_cast<double>(g.saved_bytes()));
  }
  // The walk is deterministic, so node i is the same op at every length: checked here, since the
  // per-tensor slopes below pair them up.
  for (size_t j = 0; j < s.graphs.size(); ++j) {
    const Graph& g = s.graphs[j];
    bool same = g.nodes.size() == s.graphs[0].nodes.size();
    for (size_t i = 0; same && i < g.nodes.size(); ++i)
      same = g.nodes[i].op == s.graphs[0].nodes[i].op && g.nodes[i].saved.size() == s.graphs[0].nodes[i].saved.size();
    GF_CHECK_AS(std::logic_error, same, "lab graph: the graph's structure changed with the target length (T {} against T {})", s.T[j],
                s.T[0]);
  }
  return s;
}

// One saved tensor followed over the lengths.
struct Tracked {
  size_t node, index;  // in every graph of the sweep
  double slope;        // log-log slope of its bytes against T
  Kind kind;           // at the longest length
};

std::vector<Tracked> track(const Sweep& s) {
  const Graph& last = s.graphs.back();
  const auto kind = classify(last);
  std::vector<Tracked> out;
  for (size_t i = 0; i < last.nodes.size(); ++i)
    for (size_t k = 0; k < last.nodes[i].saved.size(); ++k) {
      std::vector<double> bytes;
      for (const Graph& g : s.graphs) bytes.push_back(static_cast<double>(g.nodes[i].saved[k].bytes));
      out.push_back({i, k, loglog_slope(s.T, bytes), kind.at(last.nodes[i].saved[k].storage)});
    }
  return out;
}

void largest_table(Report& r, const Sweep& s, const std::vector<Tracked>& tracked, size_t count) {
  const Graph& g = s.graphs.back();
  std::vector<Tracked> order = tracked;
  std::stable_sort(order.begin(), order.end(), [&](const Tracked& a, const Tracked& b) {
    return g.nodes[a.node].saved[a.index].bytes > g.nodes[b.node].saved[b.index].bytes;
  });
  std::unordered_map<const Storage*, int> uses;
  for (const auto& n : g.nodes)
    for (const auto& x : n.saved) ++uses[x.storage];
  Table t("largest", {"op", "scope", "saved", "shape", "dtype", "bytes", "slope in T", "kind", "buffer"});
  for (size_t i = 0; i < std::min(count, order.size()); ++i) {
    const GraphNode& n = g.nodes[order[i].node];
    const GraphSaved& x = n.saved[order[i].index];
    const std::string buffer = order[i].kind == Kind::Leaf ? "a leaf's" : uses.at(x.storage) > 1 ? "shared" : "own";
    t.row({n.op, n.scope, x.name, shape_str(x.shape), dtype_name(x.dtype), x.bytes, order[i].slope, kind_name(order[i].kind), buffer});
  }
  r.print(t);
}

// ---------------------------------------------------------------- backward

struct AfterBackward {
  size_t saved_before = 0, saved_after = 0;
  int64_t op_nodes = 0, released = 0;
  int64_t live_before_forward = 0, live_after_forward = 0, live_after_backward = 0, kept_bytes = 0;
};

// A forward and backward of a fresh pass, measuring what the graph holds before and after.
AfterBackward run_backward_pass(nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S, uint64_t seed,
                                bool retain_graph) {
  AfterBackward a;
  layer.zero_grad();
  a.live_before_forward = memory_stats().live_bytes;
  Pass p = forward(layer, B, T, S, seed);
  a.live_after_forward = memory_stats().live_bytes;
  a.saved_before = describe_graph(p.nodes).saved_bytes();
  p.loss.backward(retain_graph);
  const Graph after = describe_graph(p.nodes);
  a.saved_after = after.saved_bytes();
  for (const auto& n : after.nodes) a.op_nodes += !n.leaf, a.released += n.released;
  a.live_after_backward = memory_stats().live_bytes;
  // What must remain after backward: the gradients, the output and loss (still referenced here).
  for (const auto& v : layer.parameters()) a.kept_bytes += static_cast<int64_t>(v.grad().nbytes());
  for (const Variable* v : {&p.tgt, &p.memory}) a.kept_bytes += static_cast<int64_t>(v->grad().nbytes() + v->data().nbytes());
  for (const Variable* v : {&p.output, &p.loss}) a.kept_bytes += static_cast<int64_t>(v->data().nbytes());
  return a;
}

// ---------------------------------------------------------------- numbers, figure, claims

// Saved bytes (as listed) per scope, per length.
std::map<std::string, std::vector<double>> bytes_by_scope(const Sweep& s) {
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

// |gradient of the key bias| / |gradient of the query bias| of an attention's in_proj_bias (D K V).
double key_bias_ratio(const nn::MultiheadAttention& a) {
  const Tensor g = a.in_proj_bias.grad();  // (3D)
  const int64_t D = a.embed_dim;
  return l2_norm(g.narrow(0, D, D)) / l2_norm(g.narrow(0, 0, D));
}

void record(Report& r, const Sweep& s, const std::vector<Tracked>& tracked, const AfterBackward& freed, const AfterBackward& kept) {
  auto& d = r.data();
  d["lengths"] = s.T;
  for (Kind k : {Kind::SelfMaps, Kind::CrossMaps, Kind::Other, Kind::Leaf}) d["held_bytes"][kind_name(k)] = s.bytes.at(k);
  d["held_bytes"]["all"] = s.held;
  d["listed_bytes"] = s.listed;
  nlohmann::json tensors = nlohmann::json::array();
  const Graph& g = s.graphs.back();
  for (const auto& t : tracked) {
    const GraphNode& n = g.nodes[t.node];
    std::vector<double> bytes;
    for (const Graph& gi : s.graphs) bytes.push_back(static_cast<double>(gi.nodes[t.node].saved[t.index].bytes));
    tensors.push_back({{"op", n.op}, {"scope", n.scope}, {"saved", n.saved[t.index].name}, {"kind", kind_name(t.kind)}, {"bytes", bytes}, {"slope", t.slope}});
  }
  d["saved_tensors"] = tensors;
  for (const auto* a : {&freed, &kept})
    d["backward"][a == &freed ? "default" : "retain_graph"] = {
        {"saved_before", a->saved_before}, {"saved_after", a->saved_after}, {"op_nodes", a->op_nodes}, {"released", a->released},
        {"live_after_forward", a->live_after_forward - a->live_before_forward},
        {"live_after_backward", a->live_after_backward - a->live_before_forward}, {"gradients_and_output", a->kept_bytes}};
}

void figure(Report& r, const Sweep& s) {
  const auto& b = s.bytes;
  auto named = [&](const char* name, Kind k) { return fmt::format("{} (slope {:.2f})", name, loglog_slope(s.T, b.at(k))); };
  r.add_panel(Chart{"saved bytes against the target length", "target length T", "bytes (distinct buffers)", true, true,
                    {{named("self-attention maps", Kind::SelfMaps), s.T, b.at(Kind::SelfMaps), {}, {}, false, "#d62728"},
                     {named("other activations", Kind::Other), s.T, b.at(Kind::Other), {}, {}, false, "#1f77b4"},
                     {named("cross-attention maps", Kind::CrossMaps), s.T, b.at(Kind::CrossMaps), {}, {}, false, "#2ca02c"},
                     {"leaves' buffers (parameters, inputs)", s.T, b.at(Kind::Leaf), {}, {}, false, "#9467bd"}},
                    s.T});
  std::vector<double> share;
  for (size_t i = 0; i < s.T.size(); ++i) share.push_back(b.at(Kind::SelfMaps)[i] / (s.held[i] - b.at(Kind::Leaf)[i]));
  r.add_panel(Chart{"self-attention maps' share of the activation memory", "target length T", "share", true, false,
                    {{"self-attention maps / activations", s.T, share, {}, {}, false, "#d62728"}}, s.T});
  ValueMap m{"saved bytes per scope (as listed)", "target length T", "", {}, {}, {}, true, "bytes"};
  for (const auto& [scope, bytes] : bytes_by_scope(s)) {
    const std::string layer = std::string(kLayerScope) + "/";
    m.row_labels.push_back(scope == kLayerScope ? "residuals, dropouts" : scope.rfind(layer, 0) == 0 ? scope.substr(layer.size()) : scope);
    m.values.push_back(bytes);
  }
  for (double t : s.T) m.col_labels.push_back(fmt::format("{}", t));
  r.add_panel(m);
}

// The log-log slope of bytes on T between each pair of consecutive lengths: the replicates of a
// paper claim about growth (the byte counts do not depend on a seed).
std::vector<double> local_slopes(const std::vector<double>& T, const std::vector<double>& bytes) {
  std::vector<double> out;
  for (size_t i = 0; i + 1 < T.size(); ++i) out.push_back(std::log(bytes[i + 1] / bytes[i]) / std::log(T[i + 1] / T[i]));
  return out;
}

// The claims (lab/claims.cpp's rows for graph): the memory growth Dao et al. describe as paper
// claims, and what backward reaches and frees as exact checks of the autograd engine.
void claims(Report& r, const nn::TransformerDecoderLayer& layer, const Sweep& s, const std::vector<Tracked>& tracked,
            const AfterBackward& freed, const AfterBackward& kept, const Sweep& fused) {
  const auto& b = s.bytes;
  const std::string lo = fmt::format("{}", s.T.front()), hi = fmt::format("{}", s.T.back());
  r.check("self_maps_quadratic", local_slopes(s.T, b.at(Kind::SelfMaps)),
          fmt::format("slope per doubling of T: {:.3f}; {} at T {}, {} at T {}", fmt::join(local_slopes(s.T, b.at(Kind::SelfMaps)), ", "),
                      format_bytes(static_cast<size_t>(b.at(Kind::SelfMaps).front())), lo,
                      format_bytes(static_cast<size_t>(b.at(Kind::SelfMaps).back())), hi));
  const std::vector<double>& f = fused.bytes.at(Kind::SelfMaps);
  r.check("fused_linear", local_slopes(fused.T, f),
          fmt::format("slope per doubling of T: {:.3f}; {} at T {} against the maps' {}", fmt::join(local_slopes(fused.T, f), ", "),
                      format_bytes(static_cast<size_t>(f.back())), hi, format_bytes(static_cast<size_t>(b.at(Kind::SelfMaps).back()))));
  double steepest = -INFINITY;  // the steepest single tensor outside the self-attention maps
  for (const auto& t : tracked)
    if (t.kind != Kind::SelfMaps) steepest = std::max(steepest, t.slope);
  r.check("others_linear", steepest,
          fmt::format("slopes: other activations {:.3f}, cross-attention maps {:.3f}; steepest single tensor outside the self-attention maps {:.3f}",
                      loglog_slope(s.T, b.at(Kind::Other)), loglog_slope(s.T, b.at(Kind::CrossMaps)), steepest));

  // Every parameter: an accumulator in the graph, and a finite non-zero gradient after backward.
  std::unordered_set<const VariableImpl*> sinks;
  for (const auto& n : s.graphs.front().nodes)
    if (n.leaf) sinks.insert(n.variable);
  int reached = 0, total = 0;
  std::string missing;
  for (const auto& [name, v] : layer.named_parameters()) {
    ++total;
    const bool ok = sinks.count(v.impl().get()) && v.grad().defined() && count_nonfinite(v.grad()) == 0 && l2_norm(v.grad()) > 0;
    reached += ok;
    if (!ok) missing += " " + name;
  }
  r.check("backward_reaches_all", total - reached,
          fmt::format("{} of {} parameters have an accumulator in the graph and a finite non-zero gradient{}", reached, total,
                      missing.empty() ? "" : "; not:" + missing));

  const int64_t left = freed.live_after_backward - freed.live_before_forward;
  const int violations = (freed.saved_after != 0) + (freed.released != freed.op_nodes) + (freed.op_nodes == 0) + (left != freed.kept_bytes) +
                         (kept.saved_after != kept.saved_before) + (kept.released != 0);
  r.check("backward_frees", violations,
          fmt::format("saved {} -> {} B, {} of {} op nodes released; live bytes after backward {} beyond the start = gradients + output {}; "
                      "with retain_graph saved {} -> {} B",
                      freed.saved_before, freed.saved_after, freed.released, freed.op_nodes, left, freed.kept_bytes, kept.saved_before,
                      kept.saved_after));

  // Reached is not the same as moved: q . b_k is the same for every key of a row, and softmax ignores that.
  const double self_k = key_bias_ratio(*layer.self_attn), cross_k = key_bias_ratio(*layer.multihead_attn);
  r.check("key_bias_no_gradient", std::max(self_k, cross_k),
          fmt::format("|grad b_k| / |grad b_q|: self-attention {:.2g}, cross-attention {:.2g} (float32)", self_k, cross_k));
}

// ---------------------------------------------------------------- the lab

nn::TransformerLayerOptions layer_options(const Report& r) {
  nn::TransformerLayerOptions o;
  o.d_model = r.integer("d-model");
  o.nhead = r.integer("heads");
  o.dim_feedforward = r.integer("ff");
  o.dropout = r.real("dropout");
  o.norm_first = r.on("pre-ln");
  return o;
}

void picture_section(Report& r, const nn::TransformerDecoderLayer& layer, int64_t B, int64_t T, int64_t S) {
  r.section(fmt::format("the graph at target length {}", T));
  const Pass picture = forward(layer, B, T, S, r.seed(0));
  const Graph g = describe_graph(picture.nodes);
  size_t leaves = 0, saved = 0;
  for (const auto& n : g.nodes) leaves += n.leaf, saved += n.saved.size();
  r.say(fmt::format("{} nodes ({} leaves), {} edges; {} saved tensors, {} as listed, {} of distinct buffers ({} beyond the leaves')",
                    g.nodes.size(), leaves, g.edges(), saved, format_bytes(g.saved_bytes()), format_bytes(g.held_bytes()),
                    format_bytes(g.held_activation_bytes())));
  scope_table(r, g);
  draw(r, layer, picture, B, S);
}

void lengths_table(Report& r, const Sweep& s) {
  Table t("lengths", {"T", "nodes", "listed", "held", "self-attn maps", "cross-attn maps", "other activations", "leaves'", "self maps share"});
  auto bytes = [](double b) { return static_cast<int64_t>(b); };
  for (size_t i = 0; i < s.T.size(); ++i) {
    const double activations = s.held[i] - s.bytes.at(Kind::Leaf)[i];
    t.row({bytes(s.T[i]), s.graphs[i].nodes.size(), bytes(s.listed[i]), bytes(s.held[i]), bytes(s.bytes.at(Kind::SelfMaps)[i]),
           bytes(s.bytes.at(Kind::CrossMaps)[i]), bytes(s.bytes.at(Kind::Other)[i]), bytes(s.bytes.at(Kind::Leaf)[i]),
           s.bytes.at(Kind::SelfMaps)[i] / activations});
  }
  r.print(t);
  r.say("listed: every saved tensor's bytes (a buffer saved by two Nodes twice); held: the distinct buffers they keep alive;");
  r.say("maps: what the attention's softmax, masked_fill and dropout saved, and the weights the matmul with V saved;");
  r.say("leaves': parameters and the inputs, which exist anyway; share: self maps / all activations (held - leaves').");
}

void backward_tables(Report& r, const nn::TransformerDecoderLayer& layer, const AfterBackward& freed, const AfterBackward& kept) {
  Table bt("backward", {"backward", "saved before", "saved after", "op nodes", "released", "live bytes: forward adds",
                        "after backward, beyond start", "gradients + output"});
  for (const auto* a : {&freed, &kept})
    bt.row({a == &freed ? "default" : "retain_graph", a->saved_before, a->saved_after, a->op_nodes, a->released,
            a->live_after_forward - a->live_before_forward, a->live_after_backward - a->live_before_forward, a->kept_bytes});
  r.print(bt);
  r.say("live bytes: every tensor buffer alive (tensor/storage.h), with the graph's Nodes still held by this lab; after a default");
  r.say("backward only the gradients, the output and the loss remain (the last column): the saved tensors are gone.");

  Table pt("parameters", {"parameter", "shape", "|grad|"});
  for (const auto& [name, v] : layer.named_parameters()) pt.row({name, shape_str(v.shape()), v.grad().defined() ? l2_norm(v.grad()) : NAN});
  r.print(pt);
  Table bias("in_proj_bias", {"attention", "|grad b_q|", "|grad b_k|", "|grad b_v|"});
  for (const auto& [name, a] : {std::pair{"self_attn", layer.self_attn}, std::pair{"multihead_attn", layer.multihead_attn}}) {
    const Tensor g = a->in_proj_bias.grad();  // (3D): the q, k and v thirds
    const int64_t D = a->embed_dim;
    bias.row({name, l2_norm(g.narrow(0, 0, D)), l2_norm(g.narrow(0, D, D)), l2_norm(g.narrow(0, 2 * D, D))});
  }
  r.print(bias);
}

void run(Report& r) {
  const int64_t B = r.integer("batch"), S = r.integer("src-len"), T0 = r.integer("tgt-len");
  const std::vector<int64_t> lengths = parse_lengths(r.text("lengths"));
  Generator init(r.seed(0));
  nn::TransformerDecoderLayer layer(layer_options(r), init);
  layer.train();  // dropout on: the graph of a training step
  nn::make_causal_mask(std::max(T0, *std::max_element(lengths.begin(), lengths.end())));  // its cache, made before memory is counted
  r.say(fmt::format("one TransformerDecoderLayer ({}, d_model {}, {} heads, ff {}, dropout {}), batch {}, source length {}, float32",
                    layer.options.norm_first ? "Pre-LN" : "Post-LN", layer.options.d_model, layer.options.nhead,
                    layer.options.dim_feedforward, layer.options.dropout, B, S));

  // The graph as ops compose attention (scores, softmax, dropout, weights: all saved), the
  // standard attention the memory claims are about. The fused op is measured apart below. The lab
  // has no control: byte counts are fixed by the shapes, so its claims are exact checks.
  layer.self_attn->fused = layer.multihead_attn->fused = false;
  picture_section(r, layer, B, T0, S);

  r.section("saved bytes against the target length T (distinct buffers)");
  const Sweep s = sweep(r, layer, lengths, B, S);
  // FlashAttention's answer (docs/attention.md): the fused op saves one log-sum-exp per query row.
  layer.self_attn->fused = layer.multihead_attn->fused = true;
  const Sweep fused = sweep(r, layer, lengths, B, S);
  layer.self_attn->fused = layer.multihead_attn->fused = false;
  lengths_table(r, s);
  const std::vector<Tracked> tracked = track(s);
  r.section(fmt::format("the largest saved tensors at T = {} (slope: of its bytes against T, log-log)", static_cast<int64_t>(s.T.back())));
  largest_table(r, s, tracked, 14);

  // The default backward runs last, so that the layer's gradients below are its.
  r.section(fmt::format("backward at T = {}", T0));
  const AfterBackward kept = run_backward_pass(layer, B, T0, S, r.seed(0), true);
  const AfterBackward freed = run_backward_pass(layer, B, T0, S, r.seed(0), false);
  backward_tables(r, layer, freed, kept);

  record(r, s, tracked, freed, kept);
  figure(r, s);
  claims(r, layer, s, tracked, freed, kept, fused);
}

}  // namespace

Lab graph_lab() {
  Lab l;
  l.name = "graph";
  l.title = "the autograd graph of a decoder layer: ops, scopes, saved tensors";
  l.reference = "Paszke et al. 2019, arXiv:1912.01703 (autograd); Dao et al. 2022, arXiv:2205.14135 (attention memory); Namazifar et al. 2023, "
                "arXiv:2302.08626 (key bias)";
  l.question = "What does backward need from the forward pass of a Transformer decoder layer, how much memory is that, how does it grow with the "
               "target length, and what does backward reach and free?";
  l.default_seeds = 1;
  l.options = {{"d-model", Option::Int, "32", "model width"},
               {"heads", Option::Int, "4", "attention heads"},
               {"ff", Option::Int, "64", "feed-forward width"},
               {"dropout", Option::Real, "0.1", "dropout (the layer in training mode)"},
               {"pre-ln", Option::Switch, "", "Pre-LN instead of Post-LN"},
               {"batch", Option::Int, "2", "sequences per batch"},
               {"src-len", Option::Int, "6", "source (memory) length"},
               {"tgt-len", Option::Int, "8", "target length of the drawn graph"},
               {"lengths", Option::Text, "16,32,64,128,256", "target lengths of the memory sweep"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

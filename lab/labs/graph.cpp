// Lab `graph`: the autograd graph of one Transformer decoder layer, forward and backward.
//
// Reverse-mode autograd records, for every op of the forward pass, a Node that knows how to send
// the gradient of its output back to its inputs, and keeps the tensors that formula needs
// (softmax keeps its output, matmul both operands, layer norm its input and statistics). Those
// saved tensors are the activation memory of training. Here: one nn::TransformerDecoderLayer in
// training mode (dropout on), drawn as a Graphviz graph (nodes by op, output shape and module
// scope, saved tensors and their bytes); the saved bytes measured at several target lengths (the
// self-attention weights are T x T, so they grow quadratically while the rest grows linearly),
// with attention composed of ops and with the fused op; which parameters backward reaches; and what
// backward frees (Node::release). The lab has no control: byte counts are fixed by the shapes, so
// its claims are exact checks.
//
// Arms, measured in this order on one layer per seed (the live-byte counts are process-wide, so the
// runs go one at a time): picture (the drawn graph), composed and fused (levels: the target lengths),
// backward:retain and backward:default, last, so that the layer's gradients are the default's. The
// measurements are in lab/parts/graph_memory.cpp (lab/graph.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "lab/common.h"
#include "lab/graph.h"
#include "lab/runner.h"
#include "nn/masks.h"

namespace gf::lab {
namespace {

const char* const kPicture = "picture";
const char* const kComposed = "composed";
const char* const kFused = "fused";
const char* const kRetain = "backward:retain";
const char* const kDefault = "backward:default";

struct Settings {
  int64_t d_model = 32, heads = 4, ff = 64;
  double dropout = 0.1;
  bool pre_ln = false;
  int64_t batch = 2, src_len = 6, tgt_len = 8;
  std::vector<int64_t> lengths{16, 32, 64, 128, 256};
};

Fields<Settings> fields() {
  using S = Settings;
  return {{"d-model", &S::d_model, "model width"},
          {"heads", &S::heads, "attention heads"},
          {"ff", &S::ff, "feed-forward width"},
          {"dropout", &S::dropout, "dropout (the layer in training mode)"},
          {"pre-ln", &S::pre_ln, "Pre-LN instead of Post-LN"},
          {"batch", &S::batch, "sequences per batch"},
          {"src-len", &S::src_len, "source (memory) length"},
          {"tgt-len", &S::tgt_len, "target length of the drawn graph"},
          {"lengths", &S::lengths, "target lengths of the memory sweep"}};
}

void validate(const Settings& s) {
  const std::string text = fmt::format("{}", fmt::join(s.lengths, ","));
  for (int64_t T : s.lengths) GF_CHECK(T >= 1, "lab graph: --lengths expects positive integers separated by commas, got '{}'", text);
  GF_CHECK(s.lengths.size() >= 3, "lab graph: --lengths needs at least three lengths, got '{}'", text);
}

// The layer, drawn once per seed and kept across its runs.
struct Context {
  std::unique_ptr<nn::TransformerDecoderLayer> layer;
  uint64_t seed = 0;
};

Context prepare(const Settings& s, Report& r) {
  nn::make_causal_mask(std::max(s.tgt_len, *std::max_element(s.lengths.begin(), s.lengths.end())));  // its cache, made before memory is counted
  r.say(fmt::format("one TransformerDecoderLayer ({}, d_model {}, {} heads, ff {}, dropout {}), batch {}, source length {}, float32",
                    s.pre_ln ? "Pre-LN" : "Post-LN", s.d_model, s.heads, s.ff, s.dropout, s.batch, s.src_len));
  return {};
}

std::vector<ArmSpec> arms(const Settings& s) {
  const std::vector<double> T(s.lengths.begin(), s.lengths.end());
  return {{kPicture, {}}, {kComposed, T}, {kFused, T}, {kRetain, {}}, {kDefault, {}}};
}

// One run: the graph a forward pass recorded (picture, composed, fused; the picture's also as DOT),
// or a forward and backward (backward:*).
struct Measured {
  Graph graph;
  std::string dot;
  AfterBackward backward;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (m.graph.nodes.empty()) {
    const AfterBackward& a = m.backward;
    j = {{"saved_before", a.saved_before}, {"saved_after", a.saved_after}, {"op_nodes", a.op_nodes}, {"released", a.released},
         {"live_after_forward", a.live_after_forward - a.live_before_forward},
         {"live_after_backward", a.live_after_backward - a.live_before_forward}, {"gradients_and_output", a.kept_bytes}};
  } else {
    j = {{"nodes", m.graph.nodes.size()}, {"listed_bytes", m.graph.saved_bytes()}, {"held_bytes", m.graph.held_bytes()},
         {"held_activation_bytes", m.graph.held_activation_bytes()}};
  }
}

// The graph as ops compose attention (scores, softmax, dropout, weights: all saved), the standard
// attention the memory claims are about; the fused op (FlashAttention's answer, docs/attention.md)
// saves one log-sum-exp per query row.
Measured measure(const Settings& s, Context& c, const RunKey& k) {
  if (!c.layer || c.seed != k.seed) {
    nn::TransformerLayerOptions o;
    o.d_model = s.d_model, o.nhead = s.heads, o.dim_feedforward = s.ff, o.dropout = s.dropout, o.norm_first = s.pre_ln;
    Generator init(k.seed);
    c.layer = std::make_unique<nn::TransformerDecoderLayer>(o, init), c.seed = k.seed;
    c.layer->train();  // dropout on: the graph of a training step
  }
  nn::TransformerDecoderLayer& layer = *c.layer;
  layer.self_attn->fused = layer.multihead_attn->fused = k.cond.arm == kFused;
  Measured m;
  if (k.cond.arm == kRetain || k.cond.arm == kDefault) {
    m.backward = run_backward_pass(layer, s.batch, s.tgt_len, s.src_len, k.seed, k.cond.arm == kRetain);
  } else {
    const int64_t T = k.cond.arm == kPicture ? s.tgt_len : static_cast<int64_t>(k.cond.level);
    const GraphPass p = graph_forward(layer, s.batch, T, s.src_len, k.seed);
    m.graph = describe_graph(p.nodes);
    if (k.cond.arm == kPicture)
      m.dot = graph_pass_dot(layer, p, fmt::format("gradflow: one TransformerDecoderLayer (d_model {}, {} heads, ff {}, dropout {}), B {}, T {}, S {}, "
                                                   "loss = sum(output * r)", s.d_model, s.heads, s.ff, s.dropout, s.batch, T, s.src_len));
  }
  layer.self_attn->fused = layer.multihead_attn->fused = false;
  return m;
}

using V = SeedView<Measured>;

GraphSweep sweep_of(const Settings& s, const V& v, const std::string& arm) {
  std::vector<double> T;
  std::vector<Graph> graphs;
  for (int64_t t : s.lengths) T.push_back(static_cast<double>(t)), graphs.push_back(v(arm, static_cast<double>(t)).graph);
  return graph_sweep(T, graphs);
}

// ---------------------------------------------------------------- tables and panels

void describe_picture(const Settings& s, const Graph& g, const std::string& dot, Report& r) {
  r.section(fmt::format("the graph at target length {}", s.tgt_len));
  size_t leaves = 0, saved = 0;
  for (const auto& n : g.nodes) leaves += n.leaf, saved += n.saved.size();
  r.say(fmt::format("{} nodes ({} leaves), {} edges; {} saved tensors, {} as listed, {} of distinct buffers ({} beyond the leaves')", g.nodes.size(),
                    leaves, g.edges(), saved, format_bytes(g.saved_bytes()), format_bytes(g.held_bytes()), format_bytes(g.held_activation_bytes())));
  struct Row {
    int64_t nodes = 0, saved = 0;
    size_t bytes = 0;
  };
  std::map<std::string, Row> by;  // nodes and saved bytes per scope
  for (const auto& n : g.nodes) {
    Row& row = by[n.leaf ? "(leaves: parameters and inputs)" : n.scope.empty() ? "(top level: the loss)" : n.scope];
    row.nodes += 1, row.saved += static_cast<int64_t>(n.saved.size()), row.bytes += n.saved_bytes();
  }
  Table t("scopes", {"scope", "nodes", "saved tensors", "saved bytes (as listed)"});
  for (const auto& [scope, row] : by) t.row({scope, row.nodes, row.saved, row.bytes});
  r.print(t);
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

void describe_lengths(const GraphSweep& s, Report& r) {
  r.section("saved bytes against the target length T (distinct buffers)");
  Table t("lengths", {"T", "nodes", "listed", "held", "self-attn maps", "cross-attn maps", "other activations", "leaves'", "self maps share"});
  auto bytes = [](double b) { return static_cast<int64_t>(b); };
  const auto& b = s.bytes;
  for (size_t i = 0; i < s.T.size(); ++i)
    t.row({bytes(s.T[i]), s.graphs[i].nodes.size(), bytes(s.listed[i]), bytes(s.held[i]), bytes(b.at(SavedKind::SelfMaps)[i]),
           bytes(b.at(SavedKind::CrossMaps)[i]), bytes(b.at(SavedKind::Other)[i]), bytes(b.at(SavedKind::Leaf)[i]),
           b.at(SavedKind::SelfMaps)[i] / (s.held[i] - b.at(SavedKind::Leaf)[i])});
  r.print(t);
  r.say("listed: every saved tensor's bytes (a buffer saved by two Nodes twice); held: the distinct buffers they keep alive;");
  r.say("maps: what the attention's softmax, masked_fill and dropout saved, and the weights the matmul with V saved;");
  r.say("leaves': parameters and the inputs, which exist anyway; share: self maps / all activations (held - leaves').");
  const Graph& g = s.graphs.back();
  std::vector<TrackedSaved> order = track_saved(s);
  std::stable_sort(order.begin(), order.end(), [&](const TrackedSaved& a, const TrackedSaved& c) {
    return g.nodes[a.node].saved[a.index].bytes > g.nodes[c.node].saved[c.index].bytes;
  });
  std::unordered_map<const Storage*, int> uses;
  for (const auto& n : g.nodes)
    for (const auto& x : n.saved) ++uses[x.storage];
  r.section(fmt::format("the largest saved tensors at T = {} (slope: of its bytes against T, log-log)", bytes(s.T.back())));
  Table big("largest", {"op", "scope", "saved", "shape", "dtype", "bytes", "slope in T", "kind", "buffer"});
  for (size_t i = 0; i < std::min<size_t>(14, order.size()); ++i) {
    const GraphNode& n = g.nodes[order[i].node];
    const GraphSaved& x = n.saved[order[i].index];
    const std::string buffer = order[i].kind == SavedKind::Leaf ? "a leaf's" : uses.at(x.storage) > 1 ? "shared" : "own";
    big.row({n.op, n.scope, x.name, shape_str(x.shape), dtype_name(x.dtype), x.bytes, order[i].slope, saved_kind_name(order[i].kind), buffer});
  }
  r.print(big);
}

void describe_backward(const Settings& s, const AfterBackward& freed, const AfterBackward& kept, Report& r) {
  r.section(fmt::format("backward at T = {}", s.tgt_len));
  Table bt("backward", {"backward", "saved before", "saved after", "op nodes", "released", "live bytes: forward adds", "after backward, beyond start",
                        "gradients + output"});
  for (const auto* a : {&freed, &kept})
    bt.row({a == &freed ? "default" : "retain_graph", a->saved_before, a->saved_after, a->op_nodes, a->released,
            a->live_after_forward - a->live_before_forward, a->live_after_backward - a->live_before_forward, a->kept_bytes});
  r.print(bt);
  r.say("live bytes: every tensor buffer alive (tensor/storage.h), with the graph's Nodes still held by this lab; after a default");
  r.say("backward only the gradients, the output and the loss remain (the last column): the saved tensors are gone.");
  Table pt("parameters", {"parameter", "shape", "|grad|"});
  for (const auto& p : freed.params) pt.row({p.name, p.shape, p.grad_norm});
  r.print(pt);
  Table bias("in_proj_bias", {"attention", "|grad b_q|", "|grad b_k|", "|grad b_v|"});
  for (int cross = 0; cross < 2; ++cross) bias.row({cross ? "multihead_attn" : "self_attn", freed.bias[cross][0], freed.bias[cross][1], freed.bias[cross][2]});
  r.print(bias);
}

void figure(const GraphSweep& s, Report& r) {
  const auto& b = s.bytes;
  auto named = [&](const char* name, SavedKind k) { return fmt::format("{} (slope {:.2f})", name, loglog_slope(s.T, b.at(k))); };
  r.add_panel(Chart{"saved bytes against the target length", "target length T", "bytes (distinct buffers)", true, true,
                    {{named("self-attention maps", SavedKind::SelfMaps), s.T, b.at(SavedKind::SelfMaps), {}, {}, false, "#d62728"},
                     {named("other activations", SavedKind::Other), s.T, b.at(SavedKind::Other), {}, {}, false, "#1f77b4"},
                     {named("cross-attention maps", SavedKind::CrossMaps), s.T, b.at(SavedKind::CrossMaps), {}, {}, false, "#2ca02c"},
                     {"leaves' buffers (parameters, inputs)", s.T, b.at(SavedKind::Leaf), {}, {}, false, "#9467bd"}},
                    s.T});
  std::vector<double> share;
  for (size_t i = 0; i < s.T.size(); ++i) share.push_back(b.at(SavedKind::SelfMaps)[i] / (s.held[i] - b.at(SavedKind::Leaf)[i]));
  r.add_panel(Chart{"self-attention maps' share of the activation memory", "target length T", "share", true, false,
                    {{"self-attention maps / activations", s.T, share, {}, {}, false, "#d62728"}}, s.T});
  ValueMap m{"saved bytes per scope (as listed)", "target length T", "", {}, {}, {}, true, "bytes"};
  for (const auto& [scope, bytes] : bytes_by_scope(s)) {
    const std::string layer = std::string(kGraphLayerScope) + "/";
    m.row_labels.push_back(scope == kGraphLayerScope ? "residuals, dropouts" : scope.rfind(layer, 0) == 0 ? scope.substr(layer.size()) : scope);
    m.values.push_back(bytes);
  }
  for (double t : s.T) m.col_labels.push_back(fmt::format("{}", t));
  r.add_panel(m);
}

// The first seed's runs (byte counts do not depend on the seed).
void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  const V v = g.seed(0);
  describe_picture(s, v(kPicture).graph, v(kPicture).dot, r);
  const GraphSweep sweep = sweep_of(s, v, kComposed);
  describe_lengths(sweep, r);
  describe_backward(s, v(kDefault).backward, v(kRetain).backward, r);
  figure(sweep, r);
}

// ---------------------------------------------------------------- claims

double steepest_other(const Settings& s, const V& v) {  // the steepest single tensor outside the self-attention maps
  double steepest = -INFINITY;
  for (const auto& t : track_saved(sweep_of(s, v, kComposed)))
    if (t.kind != SavedKind::SelfMaps) steepest = std::max(steepest, t.slope);
  return steepest;
}

int frees_violations(const V& v) {
  const AfterBackward &freed = v(kDefault).backward, &kept = v(kRetain).backward;
  const int64_t left = freed.live_after_backward - freed.live_before_forward;
  return (freed.saved_after != 0) + (freed.released != freed.op_nodes) + (freed.op_nodes == 0) + (left != freed.kept_bytes) +
         (kept.saved_after != kept.saved_before) + (kept.released != 0);
}

// Reached is not the same as moved: q . b_k is the same for every key of a row, and softmax ignores that.
double key_bias_ratio(const AfterBackward& a, int cross) { return a.bias[cross][1] / a.bias[cross][0]; }

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  const auto self_bytes = [s](const V& v, const char* arm) {
    const GraphSweep w = sweep_of(s, v, arm);
    return std::make_pair(w.T, w.bytes.at(SavedKind::SelfMaps));
  };
  return {
      {.spec = {.id = "self_maps_quadratic", .kind = ClaimKind::Check,
                .statement = "standard attention saves its T x T maps for backward: the self-attention weights and masks saved grow quadratically "
                             "with the target length (log-log slope per doubling of T above 1.5)",
                .side = Compare::Above, .threshold = 1.5,
                .source = "Dao et al. 2022, section 2.2 (standard attention materialises the N x N matrices, O(N^2) memory); 1.5: midway between "
                          "linear and quadratic. A check, not evidence: the byte counts are fixed by the shapes, the same on every seed (issue 35)",
                .control_targets = false},
       .per_seed_each = [=](const V& v) { const auto [T, b] = self_bytes(v, kComposed); return local_slopes(T, b); },
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         const auto [T, b] = self_bytes(g.seed(0), kComposed);
         return fmt::format("slope per doubling of T: {:.3f}; {} at T {}, {} at T {}", fmt::join(x, ", "), format_bytes(static_cast<size_t>(b.front())),
                            T.front(), format_bytes(static_cast<size_t>(b.back())), T.back());
       }},
      {.spec = {.id = "fused_linear", .kind = ClaimKind::Check,
                .statement = "the fused attention op saves only a row statistic: its self-attention saves grow linearly (slope per doubling of T "
                             "below 1.5)",
                .side = Compare::Below, .threshold = 1.5,
                .source = "Dao et al. 2022, section 3 (FlashAttention keeps O(N) extra memory: the softmax's log-sum-exp per row); 1.5: the same "
                          "midpoint. A check, not evidence: the byte counts are fixed by the shapes (issue 35)",
                .control_targets = false},
       .per_seed_each = [=](const V& v) { const auto [T, b] = self_bytes(v, kFused); return local_slopes(T, b); },
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         const auto [T, f] = self_bytes(g.seed(0), kFused);
         return fmt::format("slope per doubling of T: {:.3f}; {} at T {} against the maps' {}", fmt::join(x, ", "),
                            format_bytes(static_cast<size_t>(f.back())), T.back(),
                            format_bytes(static_cast<size_t>(self_bytes(g.seed(0), kComposed).second.back())));
       }},
      {.spec = {.id = "others_linear", .kind = ClaimKind::Check,
                .statement = "everything else the graph saves grows at most linearly (the steepest single saved tensor outside the self-attention "
                             "maps: log-log slope below 1.1)",
                .side = Compare::Below, .threshold = 1.1,
                .source = "every other op's saved tensor is (B, T, width) or (B, T, S) with S fixed: linear in T", .control_targets = false},
       .per_seed = [s](const V& v) { return steepest_other(s, v); },
       .evidence = [s](const Grid<Measured>& g, const std::vector<double>& x) {
         const GraphSweep w = sweep_of(s, g.seed(0), kComposed);
         return fmt::format("slopes: other activations {:.3f}, cross-attention maps {:.3f}; steepest single tensor outside the self-attention maps {:.3f}",
                            loglog_slope(w.T, w.bytes.at(SavedKind::Other)), loglog_slope(w.T, w.bytes.at(SavedKind::CrossMaps)), x.front());
       }},
      {.spec = {.id = "backward_reaches_all", .kind = ClaimKind::Check,
                .statement = "backward reaches every parameter tensor of the layer (count of parameters without an accumulator or a finite, non-zero "
                             "gradient)",
                .side = Compare::Below, .threshold = 0.5, .source = "every parameter is used in the forward pass, so the engine must reach it",
                .control_targets = false},
       .per_seed = [](const V& v) {
         const auto& p = v(kDefault).backward.params;
         return static_cast<double>(std::count_if(p.begin(), p.end(), [](const AfterBackward::Param& x) { return !x.reached; }));
       },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         const auto& p = g.at(kDefault, 0, 0).backward.params;
         std::string missing;
         for (const auto& x : p) missing += x.reached ? "" : " " + x.name;
         const auto reached = std::count_if(p.begin(), p.end(), [](const AfterBackward::Param& x) { return x.reached; });
         return fmt::format("{} of {} parameters have an accumulator in the graph and a finite non-zero gradient{}", reached, p.size(),
                            missing.empty() ? "" : "; not:" + missing);
       }},
      {.spec = {.id = "backward_frees", .kind = ClaimKind::Check,
                .statement = "backward frees what the graph saved (Node::release): only the gradients and the output remain, unless retain_graph "
                             "(count of violations)",
                .side = Compare::Below, .threshold = 0.5,
                .source = "the engine releases each node's saved tensors once its gradient has been sent back", .control_targets = false},
       .per_seed = [](const V& v) { return static_cast<double>(frees_violations(v)); },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         const AfterBackward &freed = g.at(kDefault, 0, 0).backward, &kept = g.at(kRetain, 0, 0).backward;
         return fmt::format("saved {} -> {} B, {} of {} op nodes released; live bytes after backward {} beyond the start = gradients + output {}; "
                            "with retain_graph saved {} -> {} B",
                            freed.saved_before, freed.saved_after, freed.released, freed.op_nodes, freed.live_after_backward - freed.live_before_forward,
                            freed.kept_bytes, kept.saved_before, kept.saved_after);
       }},
      {.spec = {.id = "key_bias_no_gradient", .kind = ClaimKind::Check,
                .statement = "the key third of in_proj_bias gets no gradient beyond float32 rounding: |grad b_k| / |grad b_q| below 1e-4",
                .side = Compare::Below, .threshold = 1e-4,
                .source = "softmax's shift invariance (q . b_k is the same for every key of a row); Namazifar et al. 2023", .control_targets = false},
       .per_seed = [](const V& v) { return std::max(key_bias_ratio(v(kDefault).backward, 0), key_bias_ratio(v(kDefault).backward, 1)); },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         const AfterBackward& a = g.at(kDefault, 0, 0).backward;
         return fmt::format("|grad b_k| / |grad b_q|: self-attention {:.2g}, cross-attention {:.2g} (float32)", key_bias_ratio(a, 0), key_bias_ratio(a, 1));
       }},
  };
}

}  // namespace

Lab graph_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "graph",
               .title = "the autograd graph of a decoder layer: ops, scopes, saved tensors",
               .reference = "Paszke et al. 2019, arXiv:1912.01703 (autograd); Dao et al. 2022, arXiv:2205.14135 (attention memory); Namazifar et "
                            "al. 2023, arXiv:2302.08626 (key bias)",
               .question = "What does backward need from the forward pass of a Transformer decoder layer, how much memory is that, how does it "
                           "grow with the target length, and what does backward reach and free?",
               .default_seeds = 1},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

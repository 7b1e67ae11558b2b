// autograd/graph_dot: the backward graph as data (nodes, edges, saved tensors and their bytes) and
// as Graphviz DOT; scopes as nested clusters; what backward frees; and a 100,000-op chain walked
// and drawn without recursion.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/graph_dot.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "xml_check.h"

using namespace gf;
using gf::testing::count_of;

namespace {

// loss = sum(softmax(x @ w)): x (2, 3) and w (3, 4) leaves; matmul saves both (leaf buffers),
// softmax its output (2, 4) float32 = 32 bytes.
struct Small {
  Variable x{Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}), true};                        // (2, 3)
  Variable w{Tensor::of({1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1}, {3, 4}), true};      // (3, 4)
  Variable loss;                                                                   // ()
  Small() {
    x.set_name("x");
    w.set_name("w");
    loss = sum(softmax(matmul(x, w)));
  }
};

const GraphNode& find_op(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.op == op) return n;
  FAIL("no node " << op);
  return g.nodes.front();
}

// The DOT's structure: every node statement's id, and every edge's two ends.
struct Parsed {
  std::set<std::string> nodes;
  std::vector<std::pair<std::string, std::string>> edges;
  int open = 0, close = 0;  // braces outside quoted strings
};

Parsed parse(const std::string& dot) {
  Parsed p;
  bool quoted = false;
  for (size_t i = 0; i < dot.size(); ++i) {
    if (dot[i] == '\\' && quoted) ++i;
    else if (dot[i] == '"') quoted = !quoted;
    else if (!quoted && dot[i] == '{') ++p.open;
    else if (!quoted && dot[i] == '}') ++p.close;
  }
  static const std::regex node(R"(^(n\d+) \[)"), edge(R"(^(n\d+) -> (n\d+);$)");
  size_t start = 0;
  while (start < dot.size()) {
    const size_t end = dot.find('\n', start);
    const std::string line = dot.substr(start, end - start);
    std::smatch m;
    if (std::regex_search(line, m, node)) p.nodes.insert(m[1]);
    if (std::regex_match(line, m, edge)) p.edges.push_back({m[1], m[2]});
    start = end == std::string::npos ? dot.size() : end + 1;
  }
  return p;
}

}  // namespace

TEST_CASE("capture_graph: nodes, edges and saved bytes of a small graph") {
  Small s;
  const Graph g = capture_graph(s.loss);
  REQUIRE(g.nodes.size() == 5);  // sum, softmax, matmul, and the two leaves' accumulators
  CHECK(g.nodes[0].op == "sum");  // the root first
  CHECK(g.edges() == 4);
  const GraphNode& mm = find_op(g, "matmul");
  CHECK(mm.shape == Shape{2, 4});
  REQUIRE(mm.saved.size() == 2);
  CHECK(mm.saved[0].name == std::string("a"));
  CHECK(mm.saved[0].shape == Shape{2, 3});
  CHECK(mm.saved[0].bytes == 24);
  CHECK(mm.saved[1].bytes == 48);
  const GraphNode& sm = find_op(g, "softmax");
  REQUIRE(sm.saved.size() == 1);
  CHECK(sm.saved[0].name == std::string("y"));
  CHECK(sm.saved[0].bytes == 32);
  CHECK(g.saved_bytes() == 24 + 48 + 32);
  CHECK(g.held_bytes() == 24 + 48 + 32);
  CHECK(g.held_activation_bytes() == 32);  // x and w exist anyway
  std::set<std::string> leaves;
  for (const auto& n : g.nodes)
    if (n.leaf) {
      leaves.insert(n.leaf_name);
      CHECK(n.op == "AccumulateGrad");
      CHECK(n.saved.empty());
    }
  CHECK(leaves == std::set<std::string>{"x", "w"});
  // Edges point from a node to the nodes of its inputs, slot by slot.
  CHECK(g.nodes[mm.inputs[0]].leaf_name == "x");
  CHECK(g.nodes[mm.inputs[1]].leaf_name == "w");
}

TEST_CASE("capture_graph: inputs without gradient, an input used twice, a buffer saved twice") {
  Variable x(Tensor::of({1, 2, 3}, {3}), true);  // (3)
  Variable c(Tensor::of({4, 5, 6}, {3}));        // (3): a constant, no gradient
  Variable e = exp(x);                            // (3): saves its output y
  Variable loss = sum(e * e + x * c);             // ()
  const Graph g = capture_graph(loss);
  std::vector<const GraphNode*> muls;
  for (const auto& n : g.nodes)
    if (n.op == "mul") muls.push_back(&n);
  REQUIRE(muls.size() == 2);
  const GraphNode* sq = muls[0]->inputs[0] == muls[0]->inputs[1] ? muls[0] : muls[1];
  const GraphNode* xc = sq == muls[0] ? muls[1] : muls[0];
  CHECK(sq->inputs[0] == sq->inputs[1]);  // e * e: both slots lead to exp
  CHECK(g.nodes[sq->inputs[0]].op == "exp");
  REQUIRE(xc->inputs.size() == 2);
  CHECK(xc->inputs[1] == GraphNode::kNone);  // c takes no gradient
  // exp's y, and e * e's a and b: one 12-byte buffer listed three times, held once.
  const GraphNode& ex = find_op(g, "exp");
  REQUIRE(ex.saved.size() == 1);
  CHECK(sq->saved[0].storage == ex.saved[0].storage);
  CHECK(sq->saved[1].storage == ex.saved[0].storage);
  // x * c keeps only c: x's gradient needs it, and no gradient needs x.
  REQUIRE(xc->saved.size() == 1);
  CHECK(xc->saved[0].name == std::string("b"));
  CHECK(g.saved_bytes() == 12 * 3 + 12);
  CHECK(g.held_bytes() == 12 * 2);  // e's buffer and c's
  const std::string dot = graph_dot(g);
  CHECK(count_of(dot, "(shared)") == 3);
  CHECK(parse(dot).edges.size() == g.edges());
}

TEST_CASE("graph_dot: one statement per node, edges between declared nodes, labels with op, shape, scope and bytes") {
  AnomalyGuard scopes;  // scopes are recorded in anomaly mode
  Small s;
  Variable y;
  {
    NameScope outer("model");
    NameScope inner("block");
    y = softmax(matmul(s.x, s.w));  // (2, 4)
  }
  Variable loss = sum(y);
  DotOptions o;
  o.title = "a \"quoted\" title";
  o.leaf_names[s.w.impl().get()] = "model.block.weight";
  const Graph g = capture_graph(loss);
  CHECK(find_op(g, "softmax").scope == "model/block");
  CHECK(find_op(g, "sum").scope == "");
  const std::string dot = graph_dot(g, o);
  const Parsed p = parse(dot);
  CHECK(p.open == p.close);
  CHECK(p.nodes.size() == g.nodes.size());
  CHECK(p.edges.size() == 4);
  for (const auto& [from, to] : p.edges) {
    CHECK(p.nodes.count(from) == 1);
    CHECK(p.nodes.count(to) == 1);
  }
  CHECK(dot.rfind("digraph autograd {", 0) == 0);
  CHECK(count_of(dot, "subgraph cluster_") == 2);  // model, and block inside it
  CHECK(dot.find("label=\"block\"") != std::string::npos);
  CHECK(dot.find("softmax (2, 4)\\nmodel/block\\ny (2, 4) float32 32 B") != std::string::npos);
  CHECK(dot.find("model.block.weight (3, 4)") != std::string::npos);  // the given name wins
  CHECK(dot.find("x (2, 3)") != std::string::npos);  // the Variable's own name otherwise
  CHECK(dot.find("a \\\"quoted\\\" title") != std::string::npos);
  CHECK(count_of(dot, "peripheries=2") == 1);  // the root
  CHECK(count_of(dot, "(a leaf's)") == 2);     // matmul keeps x and w themselves
  CHECK(dot.find("5 nodes, 4 edges") != std::string::npos);
  DotOptions flat;
  flat.clusters = false;
  CHECK(count_of(graph_dot(g, flat), "subgraph") == 0);
}

TEST_CASE("graph_dot: without anomaly mode no scope is recorded") {
  Small s;
  Variable y;
  {
    NameScope scope("model");
    y = softmax(matmul(s.x, s.w));
  }
  const Graph g = capture_graph(sum(y));
  for (const auto& n : g.nodes) CHECK(n.scope.empty());
  CHECK(count_of(graph_dot(g), "subgraph") == 0);
}

TEST_CASE("reachable_nodes across backward: saved tensors freed and nodes released, unless retain_graph") {
  for (bool retain : {false, true}) {
    CAPTURE(retain);
    Small s;
    const auto nodes = reachable_nodes(s.loss.grad_fn());
    REQUIRE(nodes.size() == 5);
    CHECK(describe_graph(nodes).saved_bytes() == 104);
    s.loss.backward(retain);
    const Graph after = describe_graph(nodes);
    int released = 0;
    for (const auto& n : after.nodes) released += n.released;
    if (retain) {
      CHECK(after.saved_bytes() == 104);
      CHECK(released == 0);
      CHECK(after.edges() == 4);
    } else {
      CHECK(after.saved_bytes() == 0);
      CHECK(released == 3);  // the ops; accumulators persist
      CHECK(after.edges() == 0);
    }
    CHECK(s.x.grad().defined());
    CHECK(s.w.grad().defined());
  }
}

TEST_CASE("capture_graph: a leaf, a tensor without gradient, and the empty cases") {
  Variable leaf(Tensor::of({1, 2}, {2}), true);
  const Graph g = capture_graph(leaf);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].leaf);
  CHECK(g.nodes[0].shape == Shape{2});
  CHECK(capture_graph(Variable(Tensor::of({1}, {1}))).nodes.empty());
  CHECK(capture_graph(Variable()).nodes.empty());
  CHECK(reachable_nodes(nullptr).empty());
  CHECK(parse(graph_dot(Graph{})).nodes.empty());
}

TEST_CASE("format_bytes") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.0 KiB");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(3 * 1024 * 1024 / 2) == "1.50 MiB");
}

TEST_CASE("a 100,000-op chain is walked and drawn without recursion") {
  constexpr int kOps = 100000;
  Variable x(Tensor::of({1, 2, 3}, {3}), true);  // (3)
  Variable y = x;
  for (int i = 0; i < kOps; ++i) y = y * 1.0;  // mul_scalar: saves nothing
  const auto nodes = reachable_nodes(y.grad_fn());
  CHECK(nodes.size() == kOps + 1);  // and x's accumulator
  const Graph g = describe_graph(nodes);
  CHECK(g.edges() == kOps);
  CHECK(g.saved_bytes() == 0);
  const std::string dot = graph_dot(g);
  CHECK(count_of(dot, " -> ") == kOps);
  CHECK(dot.find("n100000 [") != std::string::npos);
}

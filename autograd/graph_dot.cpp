#include "autograd/graph_dot.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_set>

namespace gf {

// ---------------------------------------------------------------- the graph as data

size_t GraphNode::saved_bytes() const {
  size_t n = 0;
  for (const auto& s : saved) n += s.bytes;
  return n;
}

size_t Graph::edges() const {
  size_t n = 0;
  for (const auto& node : nodes) n += static_cast<size_t>(std::count_if(node.inputs.begin(), node.inputs.end(), [](size_t i) { return i != GraphNode::kNone; }));
  return n;
}

size_t Graph::saved_bytes() const {
  size_t n = 0;
  for (const auto& node : nodes) n += node.saved_bytes();
  return n;
}

namespace {

size_t distinct_buffer_bytes(const Graph& g, bool skip_leaves) {
  std::unordered_set<const Storage*> leaves, seen;
  if (skip_leaves)
    for (const auto& node : g.nodes)
      if (node.leaf_storage) leaves.insert(node.leaf_storage);
  size_t n = 0;
  for (const auto& node : g.nodes)
    for (const auto& s : node.saved)
      if (s.storage && !leaves.count(s.storage) && seen.insert(s.storage).second) n += s.storage_bytes;
  return n;
}

}  // namespace

size_t Graph::held_bytes() const { return distinct_buffer_bytes(*this, false); }
size_t Graph::held_activation_bytes() const { return distinct_buffer_bytes(*this, true); }

std::vector<std::shared_ptr<Node>> reachable_nodes(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> out;
  if (!root) return out;
  std::unordered_set<const Node*> seen{root.get()};
  std::vector<std::shared_ptr<Node>> stack{root};
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    // Push inputs in reverse so that input 0 is visited first.
    for (auto it = n->next.rbegin(); it != n->next.rend(); ++it)
      if (*it && seen.insert(it->get()).second) stack.push_back(*it);
    out.push_back(std::move(n));
  }
  return out;
}

namespace {

GraphNode describe_node(Node& n) {
  GraphNode g;
  g.op = n.name();
  g.shape = n.output_shape;
  g.scope = n.created_in;
  g.sequence = n.sequence;
  g.released = n.released;
  if (auto* acc = dynamic_cast<AccumulateGrad*>(&n)) {
    g.leaf = true;
    if (auto v = acc->variable.lock()) {
      g.variable = v.get();
      g.leaf_name = v->name;
      g.shape = v->data.shape();
      g.leaf_storage = v->data.defined() ? v->data.storage().get() : nullptr;
    }
  }
  for (const auto& [name, t] : n.saved()) {
    if (!t || !t->defined()) continue;
    g.saved.push_back({name, t->shape(), t->dtype(), t->nbytes(), t->storage().get(), t->storage()->nbytes()});
  }
  return g;
}

}  // namespace

Graph describe_graph(const std::vector<std::shared_ptr<Node>>& nodes) {
  Graph g;
  std::unordered_map<const Node*, size_t> index;
  std::vector<Node*> unique;
  for (const auto& n : nodes)
    if (n && index.emplace(n.get(), unique.size()).second) unique.push_back(n.get());
  for (Node* n : unique) {
    GraphNode d = describe_node(*n);
    for (const auto& e : n->next) {
      const auto it = e ? index.find(e.get()) : index.end();
      d.inputs.push_back(it != index.end() ? it->second : GraphNode::kNone);
    }
    g.nodes.push_back(std::move(d));
  }
  return g;
}

Graph capture_graph(const Variable& v) { return describe_graph(reachable_nodes(v.defined() ? v.gradient_edge() : nullptr)); }

// ---------------------------------------------------------------- DOT

std::string format_bytes(size_t bytes) {
  char buf[32];
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else if (bytes < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

namespace {

// The text of a DOT quoted string: quotes and backslashes escaped, newlines as the \n escape.
std::string dot_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::vector<std::string> split_scope(const std::string& scope) {
  std::vector<std::string> parts;
  if (scope.empty()) return parts;
  for (size_t start = 0;;) {
    const size_t slash = scope.find('/', start);
    parts.push_back(scope.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) return parts;
    start = slash + 1;
  }
}

std::string saved_line(const GraphSaved& s, const std::unordered_set<const Storage*>& leaf_buffers,
                       const std::unordered_map<const Storage*, int>& uses) {
  std::string line = s.name + " " + shape_str(s.shape) + " " + dtype_name(s.dtype) + " " + format_bytes(s.bytes);
  if (leaf_buffers.count(s.storage)) line += " (a leaf's)";
  else if (uses.at(s.storage) > 1) line += " (shared)";
  return line;
}

std::string node_label(const GraphNode& n, const DotOptions& o, const std::unordered_set<const Storage*>& leaf_buffers,
                       const std::unordered_map<const Storage*, int>& uses) {
  std::string name = n.op;
  if (n.leaf) {
    auto it = n.variable ? o.leaf_names.find(n.variable) : o.leaf_names.end();
    const std::string leaf = it != o.leaf_names.end() ? it->second : n.leaf_name;
    name = leaf.empty() ? "leaf" : leaf;
  }
  std::string label = name + " " + shape_str(n.shape);
  if (n.leaf) label += "\n(gradient sink)";
  else if (!n.scope.empty()) label.append("\n").append(n.scope);
  if (n.released) label += "\nreleased";
  const size_t shown = std::min(n.saved.size(), o.max_saved_lines);
  for (size_t i = 0; i < shown; ++i) label.append("\n").append(saved_line(n.saved[i], leaf_buffers, uses));
  if (n.saved.size() > shown) {
    size_t rest = 0;
    for (size_t i = shown; i < n.saved.size(); ++i) rest += n.saved[i].bytes;
    label += "\n+";
    label += std::to_string(n.saved.size() - shown);
    label += " more, ";
    label += format_bytes(rest);
  }
  return label;
}

std::string node_statement(size_t i, const GraphNode& n, const std::string& label) {
  std::string attrs = "label=" + dot_quote(label);
  if (n.leaf) attrs += ", style=filled, fillcolor=\"#cfe2f3\"";  // leaves: square boxes
  else attrs += n.saved.empty() ? ", style=rounded" : ", style=\"rounded,filled\", fillcolor=\"#fce5cd\"";
  if (i == 0) attrs += ", peripheries=2";
  std::string tip = n.op;
  tip += " #";
  tip += std::to_string(n.sequence);
  if (!n.scope.empty()) tip += " in " + n.scope;
  attrs += ", tooltip=" + dot_quote(tip);
  std::string statement = "n";
  statement += std::to_string(i);
  statement += " [";
  statement += attrs;
  statement += "];\n";
  return statement;
}

}  // namespace

std::string graph_dot(const Graph& g, const DotOptions& o) {
  std::unordered_set<const Storage*> leaf_buffers;
  std::unordered_map<const Storage*, int> uses;
  for (const auto& n : g.nodes) {
    if (n.leaf_storage) leaf_buffers.insert(n.leaf_storage);
    for (const auto& s : n.saved) ++uses[s.storage];
  }
  std::string caption = o.title.empty() ? "" : o.title + "\n";
  caption += std::to_string(g.nodes.size()) + " nodes, " + std::to_string(g.edges()) + " edges; saved tensors " +
             format_bytes(g.saved_bytes()) + " as listed, holding " + format_bytes(g.held_bytes()) + " of buffers (" +
             format_bytes(g.held_activation_bytes()) + " beyond the leaves')\narrows: the forward pass; backward runs against them from the root (double border)";

  std::string out = "digraph autograd {\n";
  out += "graph [fontname=\"Helvetica\", fontsize=11, labelloc=t, label=" + dot_quote(caption) + "];\n";
  out += "node [shape=box, fontname=\"Helvetica\", fontsize=9];\nedge [color=\"#555555\", arrowsize=0.6];\n";

  // Nodes grouped by scope, scopes sorted as paths so that nested clusters open and close in order.
  std::map<std::vector<std::string>, std::vector<size_t>> by_scope;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    by_scope[o.clusters && !g.nodes[i].leaf ? split_scope(g.nodes[i].scope) : std::vector<std::string>{}].push_back(i);
  std::vector<std::string> open;  // the clusters open now, outermost first
  int cluster_id = 0;
  for (const auto& [path, members] : by_scope) {
    size_t common = 0;
    while (common < open.size() && common < path.size() && open[common] == path[common]) ++common;
    for (; open.size() > common; open.pop_back()) out += "}\n";
    for (; open.size() < path.size(); open.push_back(path[open.size()]))
      out += "subgraph cluster_" + std::to_string(cluster_id++) + " {\nlabel=" + dot_quote(path[open.size()]) +
             "; style=rounded; color=\"#999999\"; fontsize=10;\n";
    for (size_t i : members) out += node_statement(i, g.nodes[i], node_label(g.nodes[i], o, leaf_buffers, uses));
  }
  for (; !open.empty(); open.pop_back()) out += "}\n";

  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (size_t j : g.nodes[i].inputs) {
      if (j == GraphNode::kNone) continue;
      out += "n";
      out += std::to_string(j);
      out += " -> n";
      out += std::to_string(i);
      out += ";\n";
    }
  out += "}\n";
  return out;
}

}  // namespace gf

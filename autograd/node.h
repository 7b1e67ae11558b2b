#pragma once
// A Node is one recorded op in the backward graph: it turns the gradient of its output into
// gradients of its inputs. Edges point at the Nodes that produced the inputs (or at a leaf's
// AccumulateGrad), never at tensors, so the graph keeps alive only what backward needs: the
// tensors each Node saved.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/op_names.h"
#include "tensor/tensor.h"

namespace gf {

struct VariableImpl;

// A tensor a Node keeps for its backward, with the name the formula gives it ("x", "weight").
using SavedTensor = std::pair<const char*, Tensor*>;

// Called with the gradient flowing into a tensor; may return a replacement (or an undefined
// Tensor to keep the gradient as it is).
using GradHook = std::function<Tensor(const Tensor&)>;

struct Node {
  virtual ~Node();

  // One gradient per input, in order; an undefined Tensor means "no gradient for that input".
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // The tensors this Node keeps for backward: all that the graph holds alive between forward and
  // backward, and all that release() frees once backward has run (the graph is not kept).
  virtual std::vector<SavedTensor> saved() { return {}; }
  void release() {
    for (auto& [name, t] : saved()) *t = Tensor();
  }
  // Which op this Node is; its name is op_name(kind()) (op_names.h: every op named once).
  virtual Op kind() const = 0;
  const char* name() const { return op_name(kind()); }

  // next[i]: the Node that takes input i's gradient; null when input i needs none.
  std::vector<std::shared_ptr<Node>> next;
  bool needs_grad(size_t i) const { return i < next.size() && next[i] != nullptr; }

  // Hooks and retain_grad() of the tensor this Node produced.
  std::vector<std::pair<int, GradHook>> hooks;
  std::weak_ptr<VariableImpl> retained;  // receives .grad when retain_grad() was called

  // For anomaly reports and graph pictures.
  std::vector<Shape> input_shapes;
  Shape output_shape;
  std::string created_in;  // NameScope::current() when made; recorded only in anomaly mode
  uint64_t sequence = 0;
  bool released = false;
  // Set by the engine just before backward(): true when this is the last backward through the
  // Node (no retain_graph), so backward may write into a saved tensor that nothing else holds.
  bool last_backward = false;
  bool persistent = false;  // leaf accumulators outlive every backward
};

// The sink of a leaf tensor's gradient: adds it into the leaf's .grad.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::weak_ptr<VariableImpl> v) : variable(std::move(v)) { persistent = true; }
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  Op kind() const override { return Op::AccumulateGrad; }
  std::weak_ptr<VariableImpl> variable;
};

}  // namespace gf

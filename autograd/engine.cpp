#include "autograd/engine.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/profile.h"
#include "autograd/variable.h"
#include "tensor/check.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/reduce.h"
#include "tensor/parallel.h"

namespace gf {
namespace {

// "div (inputs (2,) (2,), op #7, created in encoder.layers.0)".
std::string describe(const Node& node) {
  std::string inputs;
  for (const auto& sh : node.input_shapes) inputs += fmt::format(" {}", shape_str(sh));
  const char* where = node.created_in.empty() ? "created at top level" : "created in ";
  return fmt::format("{} (inputs{}, op #{}, {}{})", node.name(), inputs, node.sequence, where, node.created_in);
}

}  // namespace

void check_forward_anomaly(const Node& node, const Tensor& output) {
  // Forward outputs may hold -inf on purpose (masked scores), so forward checks NaN only.
  int64_t i = kernels::first_nonfinite(output, false);
  GF_CHECK_AS(std::runtime_error, i < 0, "anomaly: forward of {} produced NaN at element {} of its output {}", describe(node),
              i, shape_str(output.shape()));
}

void run_backward(const std::shared_ptr<Node>& root, const Tensor& grad_output, bool retain_graph) {
  GF_CHECK(root, "backward: tensor of shape {} does not require grad", shape_str(grad_output.shape()));
  // 1. Count, for every reachable Node, how many edges point at it (iterative DFS).
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.get()};
  deps[root.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    GF_CHECK_AS(std::runtime_error, !n->released,
                "backward: the graph through {} was already freed by an earlier backward; pass retain_graph=true to "
                "backward twice",
                n->name());
    for (const auto& e : n->next) {
      if (!e) continue;
      auto [it, fresh] = deps.try_emplace(e.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.get());
    }
  }
  // 2. Run Nodes once all their consumers have delivered gradients.
  std::unordered_map<Node*, Tensor> pending;
  pending[root.get()] = grad_output;
  std::vector<std::shared_ptr<Node>> ready{root};
  const bool anomaly = AnomalyMode::enabled();
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor grad = std::move(pending[node.get()]);
    pending.erase(node.get());
    for (auto& [handle, hook] : node->hooks) {
      Tensor replaced = hook(grad);
      if (replaced.defined()) {
        GF_CHECK(replaced.shape() == grad.shape(), "backward: a gradient hook on the output of {} returned {} for a gradient of {}",
                 node->name(), shape_str(replaced.shape()), shape_str(grad.shape()));
        grad = replaced;
      }
    }
    if (auto kept = node->retained.lock()) {
      if (!kept->grad.defined()) kept->grad = grad.clone();
      else kernels::add_(kept->grad, grad);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t flops0 = profile::enabled() ? profile::flops_now() : 0;
    node->last_backward = !retain_graph && !node->persistent;
    std::vector<Tensor> grads = grad.defined() ? node->backward(grad) : std::vector<Tensor>{};
    if (profile::enabled())
      profile::backward_done(node->name(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                             profile::flops_now() - flops0, grads);
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& target = node->next[i];
      if (!target) continue;
      if (i < grads.size() && grads[i].defined()) {
        Tensor& g = grads[i];
        GF_CHECK_AS(std::logic_error, i >= node->input_shapes.size() || g.shape() == node->input_shapes[i],
                    "backward of {} gave a gradient of {} for input {} of shape {}", node->name(), shape_str(g.shape()), i,
                    shape_str(node->input_shapes[i]));
        if (anomaly) {
          int64_t bad = kernels::first_nonfinite(g, true);
          GF_CHECK_AS(std::runtime_error, bad < 0, "anomaly: backward of {} produced a non-finite gradient for input {} at element {}",
                      describe(*node), i, bad);
        }
        Tensor& slot = pending[target.get()];
        slot = slot.defined() ? kernels::add(slot, g) : std::move(g);
      }
      if (--deps[target.get()] == 0) ready.push_back(target);
    }
    if (!retain_graph && !node->persistent) {
      node->release();
      node->released = true;
      node->next.clear();
    }
  }
}

}  // namespace gf

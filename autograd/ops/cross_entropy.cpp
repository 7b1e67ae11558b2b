// cross_entropy fused with log_softmax: the forward keeps the logits and one log-sum-exp per row
// (no (N, C) probability tensor); the backward writes (softmax - smoothed one-hot) * g / count
// in one pass, over the logits themselves when nothing else can see them.
#include "autograd/ops/cross_entropy.h"

#include "autograd/function.h"
#include "tensor/kernels/cross_entropy.h"

namespace gf {

struct CrossEntropyBackward : Node {
  Tensor logits;  // (N, C)
  Tensor lse;     // (N,)
  Tensor target;  // (N,) int64
  int64_t ignore_index = -100;
  int64_t count = 0;
  double label_smoothing = 0.0;
  const char* name() const override { return "cross_entropy"; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: ()
    const double scale = count > 0 ? g.item() / static_cast<double>(count) : 0.0;
    // The logits are (N, V), the step's largest tensor. On the last backward, when no other
    // tensor or view shares their buffer (no user variable, hook or retain_grad holds them), the
    // gradient is written over them instead of into a second (N, V) buffer.
    const bool in_place = last_backward && logits.is_contiguous() && logits.storage().use_count() == 1;
    return {kernels::cross_entropy_backward(logits, lse, target, ignore_index, label_smoothing, scale, in_place)};  // (N, C)
  }
  std::vector<SavedTensor> saved() override { return {{"logits", &logits}, {"lse", &lse}, {"target", &target}}; }
};

Variable cross_entropy(const Variable& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  kernels::CrossEntropyResult r = kernels::cross_entropy(logits.data(), target, ignore_index, label_smoothing);
  auto node = make_node<CrossEntropyBackward>({&logits});
  if (node) {
    node->logits = logits.data();
    node->lse = std::move(r.lse);
    node->target = target;
    node->ignore_index = ignore_index;
    node->count = r.count;
    node->label_smoothing = label_smoothing;
  }
  return Variable::from_op(std::move(r.loss), node);
}

Variable cross_entropy(const Variable& logits, const Variable& target, int64_t ignore_index, double label_smoothing) {
  return cross_entropy(logits, target.data(), ignore_index, label_smoothing);
}

}  // namespace gf

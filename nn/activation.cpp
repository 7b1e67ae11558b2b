#include "nn/activation.h"

#include "autograd/ops/dropout.h"
#include "autograd/ops/unary.h"
#include "nn/registry.h"

namespace gf::nn {

namespace {

std::deque<ActivationKind>& mutable_activation_kinds() {
  static std::deque<ActivationKind> kinds = {
      // ReLU and dropout fused: only the hidden output is kept, not relu's output and a mask.
      {"relu", "max(0, x), the Transformer paper's", relu, relu_dropout},
      {"gelu", "x * Phi(x) (exact erf form, PyTorch's default GELU)", gelu},
  };
  return kinds;
}

}  // namespace

const std::deque<ActivationKind>& activation_kinds() { return mutable_activation_kinds(); }

void register_activation(ActivationKind kind) { registry_add(mutable_activation_kinds(), std::move(kind), "activation"); }

const ActivationKind& find_activation(const std::string& name) { return registry_find(activation_kinds(), name, "activation"); }

std::string activation_names() { return registry_names(activation_kinds()); }

}  // namespace gf::nn

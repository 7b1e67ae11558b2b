#include "nn/activation.h"

#include "autograd/ops/unary.h"
#include "nn/registry.h"

namespace gf::nn {

const std::vector<ActivationKind>& activation_kinds() {
  static const std::vector<ActivationKind> kinds = {
      {"relu", "max(0, x), the Transformer paper's", relu},
      {"gelu", "x * Phi(x) (exact erf form, PyTorch's default GELU)", gelu},
  };
  return kinds;
}

ActivationFn find_activation(const std::string& name) { return registry_find(activation_kinds(), name, "activation").fn; }

std::string activation_names() { return registry_names(activation_kinds()); }

}  // namespace gf::nn

#include "nn/activation.h"

#include <stdexcept>

#include "autograd/ops/unary.h"

namespace gf::nn {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  throw std::invalid_argument("activation: expected relu or gelu, got '" + name + "'");
}

const char* activation_name(Activation a) { return a == Activation::ReLU ? "relu" : "gelu"; }

Variable activate(const Variable& x, Activation a) { return a == Activation::ReLU ? relu(x) : gelu(x); }

}  // namespace gf::nn

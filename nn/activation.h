#pragma once
#include <string>

#include "autograd/variable.h"

namespace gf::nn {

enum class Activation { ReLU, GELU };
Activation parse_activation(const std::string& name);  // "relu" | "gelu"
const char* activation_name(Activation a);
Variable activate(const Variable& x, Activation a);

}  // namespace gf::nn

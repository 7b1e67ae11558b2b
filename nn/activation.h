#pragma once
// The FFN's activation, chosen by name from one list (activation.cpp). Adding one: write its
// autograd function (or compose it from ops), add a line to the list, test it.
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace gf::nn {

using ActivationFn = Variable (*)(const Variable&);

struct ActivationKind {
  const char* name;  // "relu"
  const char* help;  // one line for --help
  ActivationFn fn;
};

const std::vector<ActivationKind>& activation_kinds();
// Throws std::invalid_argument naming the known activations.
ActivationFn find_activation(const std::string& name);
std::string activation_names();  // "relu, gelu"

}  // namespace gf::nn

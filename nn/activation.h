#pragma once
// The FFN's activation, chosen by name from one list (activation.cpp). Adding one: write its
// autograd function (or compose it from ops), add a line to the list, test it. An entry may also
// name the activation and dropout fused into one op, which the FFN then uses. A program built on
// the installed library adds its own with register_activation (nn/registry.h says when).
#include <deque>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

using ActivationFn = Variable (*)(const Variable&);
// fn then dropout(p) as one op: the same numbers and draws as the two, keeping less for backward.
using ActivationDropoutFn = Variable (*)(const Variable& x, double p, bool training, Generator& gen);

struct ActivationKind {
  const char* name;  // "relu"
  const char* help;  // one line for --help
  ActivationFn fn;
  ActivationDropoutFn with_dropout = nullptr;  // none: fn, then the Dropout module
};

const std::deque<ActivationKind>& activation_kinds();
// The entry, which lives as long as the program. Throws std::invalid_argument naming the known
// activations.
const ActivationKind& find_activation(const std::string& name);
std::string activation_names();  // "relu, gelu"
// Adds a kind to the list; throws std::invalid_argument when the name is taken or not a word.
void register_activation(ActivationKind kind);

}  // namespace gf::nn

#pragma once
// The normalisation layers of a Transformer, chosen by name (TransformerLayerOptions::norm) from
// one list (norm.cpp). Adding one is three files: its header and source (a Norm), and its line in
// the list; docs/extending.md walks through ScaleNorm. A program built on the installed library
// adds its own with register_norm (nn/registry.h says when).
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace gf::nn {

// Normalises over the last dim: (..., d) -> (..., d).
class Dropout;

class Norm : public Module {
 public:
  virtual Variable forward(const Variable& x) const = 0;
  // forward(x + dropout.forward(y)): a post-norm sub-layer's residual add, the dropout on its output
  // y, and the norm. This composes the ops; LayerNorm runs them as one (add_layer_norm).
  virtual Variable forward_residual(const Variable& x, const Variable& y, const Dropout& dropout) const;
};

struct NormKind {
  const char* name;  // "layernorm"
  const char* help;  // one line for --help
  std::shared_ptr<Norm> (*make)(int64_t d, double eps);
};

const std::deque<NormKind>& norm_kinds();
// A new norm of that kind over d features; throws std::invalid_argument naming the known kinds.
std::shared_ptr<Norm> make_norm(const std::string& name, int64_t d, double eps);
std::string norm_names();  // "layernorm, rmsnorm"
// Adds a kind to the list; throws std::invalid_argument when the name is taken or not a word.
void register_norm(NormKind kind);

}  // namespace gf::nn

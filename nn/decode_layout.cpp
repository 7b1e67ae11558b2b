#include "nn/decode_layout.h"

#include <set>
#include <vector>

#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"

namespace gf::nn {
namespace {

// The module and its descendants, iteratively.
std::vector<Module*> all_modules(Module& root) {
  std::vector<Module*> out, todo{&root};
  while (!todo.empty()) {
    Module* m = todo.back();
    todo.pop_back();
    out.push_back(m);
    for (const auto& [name, child] : m->children()) todo.push_back(child.get());
  }
  return out;
}

}  // namespace

bool is_column_major(const Tensor& w) { return w.ndim() == 2 && w.strides()[0] == 1 && w.strides()[1] == w.size(0); }

void lay_out_for_decoding(Module& root) {
  std::set<const void*> embedded;  // storage of embedding tables
  std::vector<Variable> weights;
  for (Module* m : all_modules(root)) {
    if (auto* e = dynamic_cast<Embedding*>(m)) embedded.insert(e->weight.data().storage().get());
    if (auto* l = dynamic_cast<Linear*>(m)) weights.push_back(l->weight);
    if (auto* a = dynamic_cast<MultiheadAttention*>(m); a && a->in_proj_weight.defined()) weights.push_back(a->in_proj_weight);
  }
  for (Variable& w : weights) {
    const Tensor& t = w.data();  // (out, in)
    if (t.ndim() != 2 || is_column_major(t) || embedded.count(t.storage().get())) continue;
    w.set_data(t.transpose(0, 1).contiguous().transpose(0, 1));  // (out, in), strides (1, out)
  }
}

}  // namespace gf::nn

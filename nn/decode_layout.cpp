#include "nn/decode_layout.h"

#include <set>
#include <vector>

#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"

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

void lay_out_for_decoding(Module& root, DType weights) {
  GF_CHECK(weights == DType::Float32 || weights == DType::BFloat16, "lay_out_for_decoding: weights in float32 or bfloat16, not {}",
           dtype_name(weights));
  std::set<const void*> embedded;  // storage of embedding tables: left as they are
  std::set<const void*> reparam;   // storage of σReparam weights (computed from at each call): float32
  std::vector<Variable> found;     // the weights linear() reads
  auto storage = [](const Variable& v) { return static_cast<const void*>(v.data().storage().get()); };
  for (Module* m : all_modules(root)) {
    if (auto* e = dynamic_cast<Embedding*>(m)) embedded.insert(storage(e->weight));
    if (auto* l = dynamic_cast<Linear*>(m)) {
      found.push_back(l->weight);
      if (l->sigma_reparam()) reparam.insert(storage(l->weight));
    }
    if (auto* a = dynamic_cast<MultiheadAttention*>(m)) {
      if (a->in_proj_weight.defined()) found.push_back(a->in_proj_weight);
      if (a->sigma_reparam())
        for (const auto& p : {a->in_proj_weight, a->q_proj ? a->q_proj->weight : Variable(), a->k_proj ? a->k_proj->weight : Variable(),
                              a->v_proj ? a->v_proj->weight : Variable()})
          if (p.defined()) reparam.insert(storage(p));
    }
  }
  for (Variable& w : found) {
    const Tensor& t = w.data();  // (out, in)
    if (t.ndim() != 2 || !is_floating(t.dtype()) || embedded.count(t.storage().get())) continue;
    Tensor laid = is_column_major(t) ? t : t.transpose(0, 1).contiguous().transpose(0, 1);  // (out, in), strides (1, out)
    // One weight at a time, the float32 one freed as its bf16 copy replaces it: the peak is the
    // float32 model and one bf16 matrix.
    if (weights == DType::BFloat16 && t.dtype() == DType::Float32 && !reparam.count(t.storage().get())) {
      w.set_data_any_dtype(kernels::to_bf16(laid));  // (out, in) bf16, column-major
      w.requires_grad_(false);                       // no float32 values to train
    } else {
      w.set_data(laid);
    }
  }
}

}  // namespace gf::nn

#pragma once
// y = x W^T + b, as nn.Linear: weight (out, in), bias (out).
#include "nn/module.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Variable forward(const Variable& x) const;  // (..., in) -> (..., out)

  Variable weight;  // (out, in)
  Variable bias;    // (out) or undefined
  int64_t in_features, out_features;
};

}  // namespace gf::nn

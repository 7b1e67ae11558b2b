#pragma once
// LayerNorm over the last dim, as nn.LayerNorm(d, eps): weight starts at 1, bias at 0.
#include "nn/module.h"

namespace gf::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t d, double eps = 1e-5);
  Variable forward(const Variable& x) const;  // (..., d) -> (..., d)

  Variable weight, bias;  // (d), (d)
  double eps;
};

}  // namespace gf::nn

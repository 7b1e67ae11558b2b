#pragma once
// LayerNorm over the last dim, as nn.LayerNorm(d, eps): weight starts at 1, bias at 0.
#include "nn/norm.h"

namespace gf::nn {

class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t d, double eps = 1e-5);
  Variable forward(const Variable& x) const override;  // (..., d) -> (..., d)
  // The residual add, dropout and norm as one op (add_layer_norm), with the same numbers and draws.
  Variable forward_residual(const Variable& x, const Variable& y, const Dropout& dropout) const override;

  Variable weight, bias;  // (d), (d)
  double eps;
};

}  // namespace gf::nn

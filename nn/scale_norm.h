#pragma once
// ScaleNorm over the last dim (Nguyen and Salazar 2019, "Transformers without Tears",
// arXiv:1910.05895): x * scale / sqrt(sum(x^2) + eps), one learned scalar for the whole vector,
// started at sqrt(d) so that the output has the size LayerNorm's would.
#include "nn/norm.h"

namespace gf::nn {

class ScaleNorm : public Norm {
 public:
  explicit ScaleNorm(int64_t d, double eps = 1e-5);
  Variable forward(const Variable& x) const override;  // (..., d) -> (..., d)

  Variable scale;  // (1)
  double eps;
};

}  // namespace gf::nn

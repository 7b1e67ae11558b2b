#pragma once
// RMSNorm over the last dim (Zhang and Sennrich 2019, arXiv:1910.07467): x / sqrt(mean(x^2) + eps)
// * weight, with no centring and no bias; weight starts at 1. Its parameter is "weight", as
// PyTorch's nn.RMSNorm (2.4+) and Hugging Face's LlamaRMSNorm name it.
#include "nn/norm.h"

namespace gf::nn {

class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t d, double eps = 1e-5);
  Variable forward(const Variable& x) const override;  // (..., d) -> (..., d)

  Variable weight;  // (d)
  double eps;
};

}  // namespace gf::nn

#include "nn/rms_norm.h"

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"

namespace gf::nn {

RMSNorm::RMSNorm(int64_t d, double eps_) : eps(eps_) { weight = register_parameter("weight", Tensor::ones({d})); }

// Composed from ops, so its backward is theirs: no new kernel to check beyond the gradcheck.
Variable RMSNorm::forward(const Variable& x) const {
  Variable inv_rms = pow(mean(x * x, {-1}, /*keepdim=*/true) + eps, -0.5);  // (..., 1)
  return x * inv_rms * weight;                                             // (..., d)
}

}  // namespace gf::nn

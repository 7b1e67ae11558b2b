#include "nn/scale_norm.h"

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"

namespace gf::nn {

ScaleNorm::ScaleNorm(int64_t d, double eps_) : eps(eps_) {
  scale = register_parameter("scale", Tensor::full({1}, std::sqrt(static_cast<double>(d))));
}

// Composed from ops, so its backward is theirs.
Variable ScaleNorm::forward(const Variable& x) const {
  Variable inv_norm = pow(sum(x * x, {-1}, /*keepdim=*/true) + eps, -0.5);  // (..., 1)
  return x * inv_norm * scale;                                            // (..., d)
}

}  // namespace gf::nn

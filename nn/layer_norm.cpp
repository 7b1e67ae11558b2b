#include "nn/layer_norm.h"

#include "autograd/ops/layer_norm.h"
#include "nn/dropout.h"

namespace gf::nn {

LayerNorm::LayerNorm(int64_t d, double eps_) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({d}));
  bias = register_parameter("bias", Tensor::zeros({d}));
}

Variable LayerNorm::forward(const Variable& x) const { return layer_norm(x, weight, bias, eps); }

Variable LayerNorm::forward_residual(const Variable& x, const Variable& y, const Dropout& dropout) const {
  return add_layer_norm(x, y, dropout.p, dropout.is_training(), default_generator(), weight, bias, eps);  // (..., d)
}

}  // namespace gf::nn

#include "nn/layer_norm.h"

#include "autograd/ops/layer_norm.h"

namespace gf::nn {

LayerNorm::LayerNorm(int64_t d, double eps_) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({d}));
  bias = register_parameter("bias", Tensor::zeros({d}));
}

Variable LayerNorm::forward(const Variable& x) const { return layer_norm(x, weight, bias, eps); }

}  // namespace gf::nn

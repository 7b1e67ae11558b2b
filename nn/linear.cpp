#include "nn/linear.h"

#include "autograd/ops/matmul.h"
#include "nn/init.h"

namespace gf::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator& gen) : in_features(in), out_features(out) {
  Tensor w = Tensor::empty({out, in});  // (out, in)
  init::linear_default_(w, in, gen);
  weight = register_parameter("weight", w);
  if (has_bias) {
    Tensor b = Tensor::empty({out});  // (out)
    init::linear_default_(b, in, gen);
    bias = register_parameter("bias", b);
  }
}

Variable Linear::forward(const Variable& x) const { return linear(x, weight, bias); }

}  // namespace gf::nn

#include "nn/linear.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/matmul.h"
#include "nn/init.h"
#include "nn/sigma_reparam.h"
#include "tensor/check.h"

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

Variable Linear::forward(const Variable& x) const { return linear(x, sigma_reparam_ ? effective_weight() : weight, bias); }

void Linear::use_sigma_reparam() {
  GF_CHECK(!sigma_reparam_, "Linear::use_sigma_reparam: σReparam is already on");
  std::vector<double> u;
  const double sigma = sigma_reparam::initial_sigma(weight.data(), u);
  register_buffer("sigma_u", Tensor::from_vector(u, {in_features}).to(weight.dtype()));  // (in)
  register_parameter("sigma_gamma", Tensor::full({1}, sigma, weight.dtype()));            // (1)
  sigma_reparam_ = true;
}

Variable Linear::effective_weight() const {
  if (!sigma_reparam_) return weight;
  return sigma_reparam::reparametrise(weight, buffer("sigma_u"), parameter("sigma_gamma"), is_training() && GradMode::enabled());  // (out, in)
}

}  // namespace gf::nn

#include "nn/init.h"

#include <cmath>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::nn::init {

void xavier_uniform_(Tensor& t, Generator& gen) {
  GF_CHECK(t.ndim() >= 2, "xavier_uniform_: needs at least 2 dims, got {}", shape_str(t.shape()));
  int64_t receptive = t.numel() / (t.size(0) * t.size(1));
  double fan_in = static_cast<double>(t.size(1) * receptive), fan_out = static_cast<double>(t.size(0) * receptive);
  double a = std::sqrt(6.0 / (fan_in + fan_out));
  kernels::uniform_(t, -a, a, gen);
}

void linear_default_(Tensor& t, int64_t fan_in, Generator& gen) {
  double a = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  kernels::uniform_(t, -a, a, gen);
}

}  // namespace gf::nn::init

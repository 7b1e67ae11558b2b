#include "nn/dropout.h"

#include <stdexcept>

#include "autograd/ops/dropout.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

Dropout::Dropout(double p_) : p(p_) {
  if (p < 0 || p >= 1) throw std::invalid_argument("Dropout: p must be in [0, 1), got " + std::to_string(p));
}

Variable Dropout::forward(const Variable& x) const { return dropout(x, p, is_training(), default_generator()); }

}  // namespace gf::nn

#include "nn/dropout.h"

#include <stdexcept>

#include "autograd/ops/dropout.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

Dropout::Dropout(double p_) : p(p_) {
  GF_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got {}", p);
}

Variable Dropout::forward(const Variable& x) const { return dropout(x, p, is_training(), default_generator()); }

}  // namespace gf::nn

#pragma once
// Parameter initialisers, as PyTorch's nn.init defines them.
#include "tensor/kernels/random.h"
#include "tensor/tensor.h"

namespace gf::nn::init {

// U(-a, a) with a = sqrt(6 / (fan_in + fan_out)); fan_in = shape[1], fan_out = shape[0] for 2-D.
void xavier_uniform_(Tensor& t, Generator& gen);
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear's default (kaiming_uniform with a = sqrt(5)).
void linear_default_(Tensor& t, int64_t fan_in, Generator& gen);

}  // namespace gf::nn::init

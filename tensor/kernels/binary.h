#pragma once
// Elementwise binary kernels with NumPy broadcasting, and sum_to: the reduction that takes a
// broadcast result's gradient back to an input's shape.
#include "tensor/tensor.h"

namespace gf::kernels {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

// alpha * a + beta * b, one pass (used by backward passes and optimizers).
Tensor axpby(double alpha, const Tensor& a, double beta, const Tensor& b);
// dst += src (same shape, dst contiguous); the in-place gradient accumulation.
void add_(Tensor& dst, const Tensor& src);
// dst *= s in place.
void scale_(Tensor& dst, double s);

Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);

// Sums a tensor down to `shape`, which it must broadcast from.
Tensor sum_to(const Tensor& t, const Shape& shape);

}  // namespace gf::kernels

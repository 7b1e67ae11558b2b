#pragma once
// Layer normalisation over the last dim, as PyTorch's F.layer_norm(x, (D,), weight, bias, eps).
#include "autograd/variable.h"
#include "tensor/kernels/random.h"

namespace gf {

// x (..., D); weight and bias (D,) or undefined Variables (no affine transform).
Variable layer_norm(const Variable& x, const Variable& weight = Variable(), const Variable& bias = Variable(),
                    double eps = 1e-5);

// layer_norm(x + dropout(y, p, training, gen), weight, bias, eps) as one op: a post-norm
// sub-layer's residual add, the dropout on its output and the norm, in one pass over the rows
// (kernels::add_layer_norm), with the same numbers and the same draws from gen as the three ops.
// Keeps the norm's output (and the dropout's keep mask), never the sum; the backward gives the
// residual's and the sub-layer's gradients in the norm's own pass. A weight with a zero element
// (whose output cannot be undone) runs the three ops instead.
Variable add_layer_norm(const Variable& x, const Variable& y, double p, bool training, Generator& gen, const Variable& weight = Variable(),
                        const Variable& bias = Variable(), double eps = 1e-5);

}  // namespace gf

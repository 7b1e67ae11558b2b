#pragma once
// Inverted dropout: in training each element is zeroed with probability p and the survivors are
// scaled by 1 / (1 - p), so evaluation needs no rescaling. Masks come from gen and are the same
// for a given seed whatever the thread count.
#include "autograd/variable.h"
#include "tensor/kernels/random.h"

namespace gf {

// Identity (the input itself) when !training or p == 0; zeros when p == 1. p must be in [0, 1].
Variable dropout(const Variable& x, double p, bool training, Generator& gen);

// dropout(relu(x), p, training, gen) as one op, with the same numbers and the same draws from
// gen; it keeps only its output for backward (see kernels::relu_dropout_forward). relu(x) when
// !training or p == 0.
Variable relu_dropout(const Variable& x, double p, bool training, Generator& gen);

}  // namespace gf

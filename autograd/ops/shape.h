#pragma once
// Shape ops on Variables. reshape (of contiguous data), transpose, permute, narrow, unsqueeze,
// squeeze and expand return views that share the input's storage; concat and contiguous copy.
#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace gf {

Variable reshape(const Variable& x, const Shape& shape);  // one dim may be -1
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable permute(const Variable& x, const std::vector<int64_t>& dims);  // out dim i = x dim dims[i]
Variable contiguous(const Variable& x);  // x itself when already row-major
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable concat(const std::vector<Variable>& xs, int64_t dim);
Variable unsqueeze(const Variable& x, int64_t dim);
Variable squeeze(const Variable& x, int64_t dim);  // dim must have size 1
Variable expand(const Variable& x, const Shape& shape);  // broadcast view; gradient summed back

}  // namespace gf

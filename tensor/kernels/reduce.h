#pragma once
// Reductions over any set of dims.
#include <vector>

#include "tensor/tensor.h"

namespace gf::kernels {

// Sum over `dims` (empty = all dims). keepdim leaves size-1 dims in place.
Tensor sum(const Tensor& t, std::vector<int64_t> dims, bool keepdim);
Tensor mean(const Tensor& t, std::vector<int64_t> dims, bool keepdim);

struct MaxResult {
  Tensor values;   // the input's shape with `dim` reduced
  Tensor indices;  // int64, same shape: where each max was (first one on ties)
};
MaxResult max(const Tensor& t, int64_t dim, bool keepdim);

// Index (row-major) of the first NaN, or with inf_too also ±Inf, in t; -1 when there is none or t
// is not floating point. For anomaly mode and the trainer's checks before it writes weights.
int64_t first_nonfinite(const Tensor& t, bool inf_too);

}  // namespace gf::kernels

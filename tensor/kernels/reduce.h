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

}  // namespace gf::kernels

#pragma once
// Reductions on Variables.
#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace gf {

// Sum over `dims` (empty = every dim); keepdim leaves the reduced dims as size 1.
Variable sum(const Variable& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Variable mean(const Variable& x, std::vector<int64_t> dims = {}, bool keepdim = false);
// The largest value along `dim`. Its gradient goes to the position of the maximum (the first one
// on ties), like PyTorch's max(dim).
Variable max(const Variable& x, int64_t dim, bool keepdim = false);

}  // namespace gf

#pragma once
// Shapes, strides and the broadcasting rule, shared by every tensor op.
#include <cstdint>
#include <string>
#include <vector>

namespace gf {

using Shape = std::vector<int64_t>;

// "(2, 5, 16)"
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Row-major strides, in elements.
Shape contiguous_strides(const Shape& shape);
// NumPy broadcasting; throws "<op>: (a) and (b) cannot be broadcast: dim i is x vs y".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a negative dim (-1 = last) and checks the range, naming op and shape on error.
int normalize_dim(int64_t dim, size_t ndim, const char* op, const Shape& shape);
// Replaces a single -1 entry so that the element count matches numel.
Shape infer_shape(Shape shape, int64_t numel, const char* op, const Shape& from);

}  // namespace gf

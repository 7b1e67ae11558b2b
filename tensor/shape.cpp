#include "tensor/shape.h"

#include <stdexcept>

#include "tensor/check.h"

namespace gf {

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  bool empty = false;  // a zero dimension: no elements, however large the others
  for (int64_t d : shape) {
    GF_CHECK(d >= 0, "shape {} has a negative dimension", shape_str(shape));
    empty = empty || d == 0;
    if (!empty) GF_CHECK_AS(std::length_error, !__builtin_mul_overflow(n, d, &n), "shape {} has more than 2^63 elements", shape_str(shape));
  }
  return empty ? 0 : n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    GF_CHECK(da == db || da == 1 || db == 1, "{}: {} and {} cannot be broadcast: dim {} is {} vs {}", op, shape_str(a),
             shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(int64_t dim, size_t ndim, const char* op, const Shape& shape) {
  int64_t n = static_cast<int64_t>(ndim);
  int64_t d = dim < 0 ? dim + n : dim;
  GF_CHECK_AS(std::out_of_range, d >= 0 && d < n, "{}: dim {} is out of range for shape {}", op, dim, shape_str(shape));
  return static_cast<int>(d);
}

Shape infer_shape(Shape shape, int64_t numel, const char* op, const Shape& from) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      GF_CHECK(infer < 0, "{}: only one -1 allowed in {} (viewing {})", op, shape_str(shape), shape_str(from));
      infer = static_cast<int>(i);
    } else {
      GF_CHECK(shape[i] >= 0, "{}: negative size in {} (viewing {})", op, shape_str(shape), shape_str(from));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    GF_CHECK(known != 0 && numel % known == 0, "{}: cannot view {} as {}", op, shape_str(from), shape_str(shape));
    shape[infer] = numel / known;
  } else {
    GF_CHECK(known == numel, "{}: cannot view {} ({} elements) as {}", op, shape_str(from), numel, shape_str(shape));
  }
  return shape;
}

}  // namespace gf

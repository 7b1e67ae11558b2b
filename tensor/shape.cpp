#include "tensor/shape.h"

#include <stdexcept>

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
  for (int64_t d : shape) n *= d;
  return n;
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
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": " + shape_str(a) + " and " + shape_str(b) +
                                  " cannot be broadcast: dim " + std::to_string(i) + " is " +
                                  std::to_string(da) + " vs " + std::to_string(db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int normalize_dim(int64_t dim, size_t ndim, const char* op, const Shape& shape) {
  int64_t n = static_cast<int64_t>(ndim);
  int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n)
    throw std::out_of_range(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for shape " +
                            shape_str(shape));
  return static_cast<int>(d);
}

Shape infer_shape(Shape shape, int64_t numel, const char* op, const Shape& from) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument(std::string(op) + ": only one -1 allowed in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument(std::string(op) + ": negative size in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw std::invalid_argument(std::string(op) + ": cannot view " + shape_str(from) + " as " + shape_str(shape));
    shape[infer] = numel / known;
  } else if (known != numel) {
    throw std::invalid_argument(std::string(op) + ": cannot view " + shape_str(from) + " (" + std::to_string(numel) +
                                " elements) as " + shape_str(shape));
  }
  return shape;
}

}  // namespace gf

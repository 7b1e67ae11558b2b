#pragma once
// Tensor: an N-d view (shape, strides, offset) of a reference-counted Storage.
// It knows nothing of autograd: autograd/Variable wraps it. Views are free where they can be
// (reshape of contiguous data, transpose/permute/narrow as strided views); kernels that need
// dense rows call contiguous(), which copies only when the layout is not already row-major.
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/check.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace gf {

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no storage

  // ---- creation ----
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
  static Tensor scalar(double value, DType dtype = DType::Float32);  // 0-d
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Doubles converted to dtype (handy in tests): Tensor::of({1, 2, 3}, {3}).
  static Tensor of(std::initializer_list<double> values, const Shape& shape, DType dtype = DType::Float32);
  static Tensor arange(int64_t n, DType dtype = DType::Int64);

  // ---- layout ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int64_t dim) const;
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  int64_t offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Pointer to the first element; T must match dtype.
  template <class T>
  T* data() const;
  void* raw_data() const;

  // ---- views and copies ----
  Tensor contiguous() const;  // itself when already row-major, else a dense copy
  Tensor clone() const;       // always a dense copy
  Tensor reshape(const Shape& shape) const;  // a view when contiguous; one dim may be -1
  Tensor view(const Shape& shape) const;     // must be contiguous
  Tensor transpose(int64_t d0, int64_t d1) const;  // strided view
  Tensor permute(const std::vector<int64_t>& dims) const;  // strided view
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;  // strided view
  Tensor select(int64_t dim, int64_t index) const;  // drops dim; strided view
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // broadcast view with zero strides (read-only use)
  Tensor to(DType dtype) const;

  // ---- element access (slow; for tests, checks and small code) ----
  double item() const;  // numel must be 1
  double at(std::initializer_list<int64_t> index) const;
  double flat_get(int64_t i) const;  // i-th element in row-major order, any layout
  void flat_set(int64_t i, double v);
  template <class T>
  std::vector<T> to_vector() const;

  // ---- in place ----
  void fill_(double value);
  void copy_(const Tensor& src);  // same shape; any layouts
  void zero_() { fill_(0.0); }

  std::string str(int max_elems = 64) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype);
  int64_t storage_index(int64_t flat) const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_, strides_;
  DType dtype_ = DType::Float32;
};

// Throw "<op>: expected float32, got int64 for shape (2, 3)", "<op>: dtypes differ: ..." and
// "<op>: tensor is undefined".
void check_dtype(const Tensor& t, DType dtype, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_defined(const Tensor& t, const char* op);

template <class T>
T* Tensor::data() const {
  GF_CHECK(dtype_of<T>() == dtype_, "Tensor::data: requested {} from a {} tensor of shape {}", dtype_name(dtype_of<T>()),
           dtype_name(dtype_), shape_str(shape_));
  return static_cast<T*>(storage_->data()) + offset_;
}

}  // namespace gf

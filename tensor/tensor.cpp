#include "tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "tensor/parallel.h"

namespace gf {

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), strides_(std::move(strides)), dtype_(dtype) {}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape)
    GF_CHECK(d >= 0, "Tensor::empty: negative size in {}", shape_str(shape));
  int64_t bytes = 0;
  GF_CHECK_AS(std::length_error, !__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes),
              "Tensor::empty: {} of {} has more than 2^63 bytes", shape_str(shape), dtype_name(dtype));
  auto st = std::make_shared<Storage>(static_cast<size_t>(bytes));
  return Tensor(std::move(st), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  // In 64 KiB pieces on the threads: a gradient buffer of several MiB (an embedding's, the
  // output projection's) zeroed on one thread held up the other in every training step.
  constexpr int64_t kPiece = int64_t{1} << 16;
  const int64_t n = static_cast<int64_t>(t.nbytes());
  char* p = static_cast<char*>(t.raw_data());
  parallel_for((n + kPiece - 1) / kPiece, 16, [&](int64_t lo, int64_t hi) {
    std::memset(p + lo * kPiece, 0, static_cast<size_t>(std::min(n, hi * kPiece) - lo * kPiece));
  });
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  GF_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "Tensor::from_vector: {} values do not fill shape {}",
           values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}
template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template <>
Tensor Tensor::from_vector<bool>(const std::vector<bool>& values, const Shape& shape) {
  GF_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "Tensor::from_vector: {} values do not fill shape {}",
           values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::Bool);
  bool* p = t.data<bool>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

Tensor Tensor::of(std::initializer_list<double> values, const Shape& shape, DType dtype) {
  GF_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "Tensor::of: {} values do not fill shape {}",
           values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype);
  int64_t i = 0;
  for (double v : values) t.flat_set(i++, v);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.flat_set(i, static_cast<double>(i));
  return t;
}

int64_t Tensor::size(int64_t dim) const { return shape_[normalize_dim(dim, shape_.size(), "size", shape_)]; }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  check_defined(*this, "raw_data");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

int64_t Tensor::storage_index(int64_t flat) const {
  int64_t idx = offset_;
  for (size_t i = shape_.size(); i-- > 0;) {
    int64_t d = shape_[i];
    idx += (flat % d) * strides_[i];
    flat /= d;
  }
  return idx;
}

namespace {
// Copies src (any layout) into dst (any layout) of the same shape and dtype.
template <class T>
void strided_copy(const Tensor& src, const Tensor& dst) {
  const Shape& shape = src.shape();
  const int nd = static_cast<int>(shape.size());
  const T* s = static_cast<const T*>(src.storage()->data());
  T* d = static_cast<T*>(dst.storage()->data());
  int64_t n = src.numel();
  if (n == 0) return;
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::copy(s + src.offset(), s + src.offset() + n, d + dst.offset());
    return;
  }
  if (nd == 0) {
    d[dst.offset()] = s[src.offset()];
    return;
  }
  // Walk the index with an odometer; the last dim is the inner loop.
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = shape[nd - 1], ss = src.strides()[nd - 1], ds = dst.strides()[nd - 1];
  int64_t so = src.offset(), doff = dst.offset();
  for (int64_t done = 0; done < n; done += inner) {
    if (ss == 1 && ds == 1)  // rows contiguous in both (a permute that keeps the last dim): a vectorised copy
      std::copy(s + so, s + so + inner, d + doff);
    else
      for (int64_t j = 0; j < inner; ++j) d[doff + j * ds] = s[so + j * ss];
    for (int k = nd - 2; k >= 0; --k) {
      if (++idx[k] < shape[k]) {
        so += src.strides()[k];
        doff += dst.strides()[k];
        break;
      }
      so -= src.strides()[k] * (shape[k] - 1);
      doff -= dst.strides()[k] * (shape[k] - 1);
      idx[k] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone");
  Tensor out = empty(shape_, dtype_);
  dispatch_all(dtype_, [&]<class T>() { strided_copy<T>(*this, out); });
  return out;
}

void Tensor::copy_(const Tensor& src) {
  GF_CHECK(src.shape() == shape_, "copy_: source {} and destination {} differ in shape", shape_str(src.shape()),
           shape_str(shape_));
  if (src.dtype() != dtype_) {
    Tensor conv = src.to(dtype_);
    dispatch_all(dtype_, [&]<class T>() { strided_copy<T>(conv, *this); });
    return;
  }
  dispatch_all(dtype_, [&]<class T>() { strided_copy<T>(src, *this); });
}

Tensor Tensor::view(const Shape& shape) const {
  GF_CHECK(is_contiguous(), "view: tensor of shape {} is not contiguous; call contiguous() or reshape()", shape_str(shape_));
  Shape s = infer_shape(shape, numel(), "view", shape_);
  return Tensor(storage_, offset_, s, contiguous_strides(s), dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined(*this, "reshape");
  Shape s = infer_shape(shape, numel(), "reshape", shape_);
  Tensor base = contiguous();
  return Tensor(base.storage_, base.offset_, s, contiguous_strides(s), dtype_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int a = normalize_dim(d0, shape_.size(), "transpose", shape_);
  int b = normalize_dim(d1, shape_.size(), "transpose", shape_);
  Shape sh = shape_, st = strides_;
  std::swap(sh[a], sh[b]);
  std::swap(st[a], st[b]);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  GF_CHECK(dims.size() == shape_.size(), "permute: {} dims given for shape {}", dims.size(), shape_str(shape_));
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int d = normalize_dim(dims[i], shape_.size(), "permute", shape_);
    GF_CHECK(!seen[d], "permute: dim {} repeated for shape {}", d, shape_str(shape_));
    seen[d] = true;
    sh[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  int d = normalize_dim(dim, shape_.size(), "narrow", shape_);
  if (start < 0) start += shape_[d];
  GF_CHECK_AS(std::out_of_range, start >= 0 && length >= 0 && start + length <= shape_[d],
              "narrow: [{}, {}) is outside dim {} of shape {}", start, start + length, d, shape_str(shape_));
  Shape sh = shape_;
  sh[d] = length;
  return Tensor(storage_, offset_ + start * strides_[d], sh, strides_, dtype_);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  int d = normalize_dim(dim, shape_.size(), "select", shape_);
  if (index < 0) index += shape_[d];
  GF_CHECK_AS(std::out_of_range, index >= 0 && index < shape_[d], "select: index {} is outside dim {} of shape {}", index,
              d, shape_str(shape_));
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_ + index * strides_[d], sh, st, dtype_);
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  int d = normalize_dim(dim, shape_.size() + 1, "unsqueeze", shape_);
  Shape sh = shape_, st = strides_;
  int64_t stride = d < static_cast<int>(shape_.size()) ? strides_[d] * shape_[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::squeeze(int64_t dim) const {
  int d = normalize_dim(dim, shape_.size(), "squeeze", shape_);
  GF_CHECK(shape_[d] == 1, "squeeze: dim {} of shape {} is not 1", d, shape_str(shape_));
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  GF_CHECK(shape.size() >= shape_.size(), "expand: cannot expand {} to {}", shape_str(shape_), shape_str(shape));
  size_t lead = shape.size() - shape_.size();
  Shape st(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    GF_CHECK(shape_[i] == shape[lead + i] || shape_[i] == 1, "expand: cannot expand {} to {}", shape_str(shape_),
             shape_str(shape));
    if (shape_[i] == shape[lead + i]) st[lead + i] = strides_[i];
  }
  return Tensor(storage_, offset_, shape, st, dtype_);
}

Tensor Tensor::to(DType dtype) const {
  check_defined(*this, "to");
  if (dtype == dtype_) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype);
  int64_t n = numel();
  dispatch_all(dtype_, [&]<class S>() {
    const S* s = src.data<S>();
    dispatch_all(dtype, [&]<class D>() {
      D* d = out.data<D>();
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
    });
  });
  return out;
}

double Tensor::flat_get(int64_t i) const {
  int64_t si = storage_index(i);
  return dispatch_all(dtype_, [&]<class T>() -> double {
    return static_cast<double>(static_cast<const T*>(storage_->data())[si]);
  });
}

void Tensor::flat_set(int64_t i, double v) {
  int64_t si = storage_index(i);
  dispatch_all(dtype_, [&]<class T>() { static_cast<T*>(storage_->data())[si] = static_cast<T>(v); });
}

double Tensor::item() const {
  check_defined(*this, "item");
  GF_CHECK(numel() == 1, "item: tensor of shape {} is not one element", shape_str(shape_));
  return flat_get(0);
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  GF_CHECK(index.size() == shape_.size(), "at: {} indices for shape {}", index.size(), shape_str(shape_));
  int64_t si = offset_;
  size_t k = 0;
  for (int64_t i : index) {
    GF_CHECK_AS(std::out_of_range, i >= 0 && i < shape_[k], "at: index {} is outside dim {} of shape {}", i, k,
                shape_str(shape_));
    si += i * strides_[k++];
  }
  return dispatch_all(dtype_, [&]<class T>() -> double {
    return static_cast<double>(static_cast<const T*>(storage_->data())[si]);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(dtype_of<T>()).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  std::vector<bool> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[i] = flat_get(i) != 0.0;
  return v;
}

void Tensor::fill_(double value) {
  check_defined(*this, "fill_");
  if (is_contiguous()) {
    int64_t n = numel();
    dispatch_all(dtype_, [&]<class T>() {
      T* p = data<T>();
      std::fill(p, p + n, static_cast<T>(value));
    });
    return;
  }
  for (int64_t i = 0; i < numel(); ++i) flat_set(i, value);
}

std::string Tensor::str(int max_elems) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype_) << ", " << shape_str(shape_) << ") [";
  int64_t n = std::min<int64_t>(numel(), max_elems);
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << flat_get(i);
  if (numel() > n) os << ", ...";
  os << "]";
  return os.str();
}

void check_defined(const Tensor& t, const char* op) {
  GF_CHECK(t.defined(), "{}: tensor is undefined", op);
}

void check_dtype(const Tensor& t, DType dtype, const char* op) {
  check_defined(t, op);
  GF_CHECK(t.dtype() == dtype, "{}: expected {}, got {} for shape {}", op, dtype_name(dtype), dtype_name(t.dtype()),
           shape_str(t.shape()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  GF_CHECK(a.dtype() == b.dtype(), "{}: dtypes differ: {} {} and {} {}", op, dtype_name(a.dtype()), shape_str(a.shape()),
           dtype_name(b.dtype()), shape_str(b.shape()));
}

}  // namespace gf

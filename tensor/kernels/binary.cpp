#include "tensor/kernels/binary.h"

#include <stdexcept>

#include "tensor/kernels/reduce.h"
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// out[i] = f(a[i], b[i]) with a and b broadcast to out's shape.
template <class T, class F>
Tensor broadcast_binary(const Tensor& a_in, const Tensor& b_in, const char* op, F f) {
  check_same_dtype(a_in, b_in, op);
  Shape out_shape = broadcast_shapes(a_in.shape(), b_in.shape(), op);
  Tensor out = Tensor::empty(out_shape, a_in.dtype());
  const int64_t n = out.numel();
  T* o = out.data<T>();
  if (n == 0) return out;

  if (a_in.shape() == b_in.shape() && a_in.is_contiguous() && b_in.is_contiguous()) {
    const T* a = a_in.data<T>();
    const T* b = b_in.data<T>();
    parallel_for(n, kSerialGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) o[i] = f(a[i], b[i]);
    });
    return out;
  }
  if (b_in.numel() == 1 && a_in.is_contiguous() && a_in.shape() == out_shape) {
    const T* a = a_in.data<T>();
    const T bv = static_cast<T>(b_in.flat_get(0));
    parallel_for(n, kSerialGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) o[i] = f(a[i], bv);
    });
    return out;
  }
  // General case: zero-stride views over out's shape; rows of the last dim run as inner loops.
  Tensor a = a_in.expand(out_shape), b = b_in.expand(out_shape);
  const int nd = static_cast<int>(out_shape.size());
  const int64_t inner = out_shape[nd - 1];
  const int64_t rows = n / inner;
  const int64_t as = a.strides()[nd - 1], bs = b.strides()[nd - 1];
  const T* ab = static_cast<const T*>(a.storage()->data());
  const T* bb = static_cast<const T*>(b.storage()->data());
  parallel_for(rows, row_grain(inner), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t ao = a.offset(), bo = b.offset(), rem = r;
      for (int k = nd - 2; k >= 0; --k) {
        int64_t i = rem % out_shape[k];
        rem /= out_shape[k];
        ao += i * a.strides()[k];
        bo += i * b.strides()[k];
      }
      T* orow = o + r * inner;
      for (int64_t j = 0; j < inner; ++j) orow[j] = f(ab[ao + j * as], bb[bo + j * bs]);
    }
  });
  return out;
}

template <class F>
Tensor float_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  return dispatch_float(a.dtype(), op, [&]<class T>() { return broadcast_binary<T>(a, b, op, f); });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return float_binary(a, b, "add", [](auto x, auto y) { return x + y; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return float_binary(a, b, "sub", [](auto x, auto y) { return x - y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return float_binary(a, b, "mul", [](auto x, auto y) { return x * y; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return float_binary(a, b, "div", [](auto x, auto y) { return x / y; });
}

Tensor axpby(double alpha, const Tensor& a, double beta, const Tensor& b) {
  return dispatch_float(a.dtype(), "axpby", [&]<class T>() {
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    return broadcast_binary<T>(a, b, "axpby", [al, be](T x, T y) { return al * x + be * y; });
  });
}

void add_(Tensor& dst, const Tensor& src) {
  check_same_dtype(dst, src, "add_");
  GF_CHECK(dst.shape() == src.shape(), "add_: {} += {}: shapes differ", shape_str(dst.shape()), shape_str(src.shape()));
  GF_CHECK(dst.is_contiguous(), "add_: destination {} is not contiguous", shape_str(dst.shape()));
  Tensor s = src.contiguous();
  dispatch_float(dst.dtype(), "add_", [&]<class T>() {
    T* d = dst.data<T>();
    const T* p = s.data<T>();
    parallel_for(dst.numel(), kSerialGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] += p[i];
    });
  });
}

void scale_(Tensor& dst, double s) {
  GF_CHECK(dst.is_contiguous(), "scale_: destination {} is not contiguous", shape_str(dst.shape()));
  dispatch_float(dst.dtype(), "scale_", [&]<class T>() {
    T* d = dst.data<T>();
    const T sv = static_cast<T>(s);
    parallel_for(dst.numel(), kSerialGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] *= sv;
    });
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  return dispatch_float(a.dtype(), "add_scalar", [&]<class T>() {
    const T sv = static_cast<T>(s);
    return broadcast_binary<T>(a, Tensor::scalar(s, a.dtype()), "add_scalar", [sv](T x, T) { return x + sv; });
  });
}

Tensor mul_scalar(const Tensor& a, double s) {
  return dispatch_float(a.dtype(), "mul_scalar", [&]<class T>() {
    const T sv = static_cast<T>(s);
    return broadcast_binary<T>(a, Tensor::scalar(s, a.dtype()), "mul_scalar", [sv](T x, T) { return x * sv; });
  });
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const Shape& from = t.shape();
  GF_CHECK(shape.size() <= from.size(), "sum_to: cannot reduce {} to {}", shape_str(from), shape_str(shape));
  size_t lead = from.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
    } else if (shape[i - lead] == 1 && from[i] != 1) {
      dims.push_back(static_cast<int64_t>(i));
    } else {
      GF_CHECK(shape[i - lead] == from[i], "sum_to: cannot reduce {} to {}", shape_str(from), shape_str(shape));
    }
  }
  Tensor s = sum(t, dims, true);
  return s.reshape(shape);
}

}  // namespace gf::kernels

#include "tensor/kernels/indexing.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// Throws out_of_range naming op, the first bad index and what it indexes into ("a table of 5 rows
// (weight (5, 4))").
void check_indices(const Tensor& indices, int64_t limit, const char* op, const std::string& what) {
  const int64_t* ix = indices.data<int64_t>();  // contiguous
  for (int64_t i = 0; i < indices.numel(); ++i)
    GF_CHECK_AS(std::out_of_range, ix[i] >= 0 && ix[i] < limit, "{}: index {} at position {} is out of range for {}", op,
                ix[i], i, what);
}

std::string table_of(int64_t rows, const char* name, const Shape& shape) {
  return fmt::format("a table of {} rows ({} {})", rows, name, shape_str(shape));
}

// Shape of one row of a table (N, D...): (D...), and its element count.
Shape row_shape(const Shape& table) { return Shape(table.begin() + 1, table.end()); }

}  // namespace

Tensor index_select(const Tensor& weight_in, const Tensor& indices_in) {
  check_defined(weight_in, "index_select");
  check_dtype(indices_in, DType::Int64, "index_select (indices)");
  GF_CHECK(weight_in.ndim() >= 1, "index_select: weight must have at least 1 dim, got shape {} (indices {})",
           shape_str(weight_in.shape()), shape_str(indices_in.shape()));
  Tensor weight = weight_in.contiguous();    // (N, D...)
  Tensor indices = indices_in.contiguous();  // (I...)
  const int64_t rows = weight.size(0);
  const Shape row = row_shape(weight.shape());
  const int64_t width = shape_numel(row);
  check_indices(indices, rows, "index_select", table_of(rows, "weight", weight.shape()));

  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.end(), row.begin(), row.end());
  Tensor out = Tensor::empty(out_shape, weight.dtype());  // (I..., D...)
  const int64_t* ix = indices.data<int64_t>();
  dispatch_all(weight.dtype(), [&]<class T>() {
    const T* w = weight.data<T>();
    T* o = out.data<T>();
    parallel_for(indices.numel(), row_grain(width), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) std::copy(w + ix[i] * width, w + (ix[i] + 1) * width, o + i * width);
    });
  });
  return out;
}

void index_add_(Tensor& dst, const Tensor& indices_in, const Tensor& src_in, int64_t skip_index) {
  check_same_dtype(dst, src_in, "index_add_");
  check_dtype(indices_in, DType::Int64, "index_add_ (indices)");
  GF_CHECK(dst.ndim() >= 1, "index_add_: destination must have at least 1 dim, got shape {} (source {})",
           shape_str(dst.shape()), shape_str(src_in.shape()));
  GF_CHECK(dst.is_contiguous(), "index_add_: destination {} is not contiguous", shape_str(dst.shape()));
  const Shape row = row_shape(dst.shape());
  Shape want = indices_in.shape();
  want.insert(want.end(), row.begin(), row.end());
  GF_CHECK(src_in.shape() == want, "index_add_: source {} should be indices {} + destination rows {} = {}",
           shape_str(src_in.shape()), shape_str(indices_in.shape()), shape_str(row), shape_str(want));
  Tensor indices = indices_in.contiguous();  // (I...)
  Tensor src = src_in.contiguous();          // (I..., D...)
  const int64_t rows = dst.size(0), width = shape_numel(row), n = indices.numel();
  check_indices(indices, rows, "index_add_", table_of(rows, "destination", dst.shape()));
  const int64_t* ix = indices.data<int64_t>();
  dispatch_float(dst.dtype(), "index_add_", [&]<class T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    // Several positions may name the same row, so splitting the positions among threads would
    // race. Splitting the columns cannot: each thread adds only into its own columns. Blocks of at
    // least 16 columns keep threads off each other's cache lines.
    const int64_t grain = std::max<int64_t>(16, row_grain(n));
    parallel_for(width, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        if (ix[i] == skip_index) continue;
        T* drow = d + ix[i] * width;
        const T* srow = s + i * width;
        for (int64_t c = c0; c < c1; ++c) drow[c] += srow[c];
      }
    });
  });
}

Tensor scatter_add_along(const Shape& shape, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  check_dtype(index_in, DType::Int64, "scatter_add_along (index)");
  check_defined(src_in, "scatter_add_along");
  const int d = normalize_dim(dim, shape.size(), "scatter_add_along", shape);
  Shape expect = shape;
  expect[d] = index_in.shape().size() == shape.size() ? index_in.shape()[d] : -1;
  GF_CHECK(index_in.shape() == expect && src_in.shape() == index_in.shape(),
           "scatter_add_along: index {} and source {} must match output {} in every dim but {}", shape_str(index_in.shape()),
           shape_str(src_in.shape()), shape_str(shape), d);
  Tensor index = index_in.contiguous();  // (outer, k, inner)
  Tensor src = src_in.contiguous();      // (outer, k, inner)
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= shape[i];
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[d], k = index.shape()[d];
  check_indices(index, n, "scatter_add_along", fmt::format("dim {} of size {} (output {})", d, n, shape_str(shape)));

  Tensor out = Tensor::zeros(shape, src.dtype());  // (outer, n, inner)
  const int64_t* ix = index.data<int64_t>();
  dispatch_float(src.dtype(), "scatter_add_along", [&]<class T>() {
    const T* s = src.data<T>();
    T* o = out.data<T>();
    // Each outer slab writes only into its own slab of out: no races.
    parallel_for(outer, row_grain(k * inner), [&](int64_t lo, int64_t hi) {
      for (int64_t a = lo; a < hi; ++a)
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t at = (a * k + j) * inner + i;
            o[(a * n + ix[at]) * inner + i] += s[at];
          }
    });
  });
  return out;
}

Tensor where(const Tensor& cond_in, const Tensor& a_in, const Tensor& b_in) {
  check_dtype(cond_in, DType::Bool, "where (condition)");
  check_same_dtype(a_in, b_in, "where");
  Shape out_shape;
  try {
    out_shape = broadcast_shapes(broadcast_shapes(cond_in.shape(), a_in.shape(), "where"), b_in.shape(), "where");
  } catch (const std::invalid_argument&) {
    GF_FAIL("where: condition {}, a {} and b {} cannot be broadcast together", shape_str(cond_in.shape()),
            shape_str(a_in.shape()), shape_str(b_in.shape()));
  }
  Tensor out = Tensor::empty(out_shape, a_in.dtype());
  const int64_t numel = out.numel();
  if (numel == 0) return out;
  dispatch_all(a_in.dtype(), [&]<class T>() {
    T* o = out.data<T>();
    auto same = [&](const Tensor& t) { return t.shape() == out_shape && t.is_contiguous(); };
    if (same(cond_in) && same(a_in) && same(b_in)) {
      const bool* c = cond_in.data<bool>();
      const T* a = a_in.data<T>();
      const T* b = b_in.data<T>();
      parallel_for(numel, kSerialGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) o[i] = c[i] ? a[i] : b[i];
      });
      return;
    }
    // Zero-stride views over out's shape; each row of the last dim is an inner loop.
    Tensor cv = cond_in.expand(out_shape), av = a_in.expand(out_shape), bv = b_in.expand(out_shape);
    const bool* cb = static_cast<const bool*>(cv.storage()->data());
    const T* ab = static_cast<const T*>(av.storage()->data());
    const T* bb = static_cast<const T*>(bv.storage()->data());
    const int nd = static_cast<int>(out_shape.size());
    const int64_t inner = out_shape[nd - 1], rows = numel / inner;
    const int64_t cs = cv.strides()[nd - 1], as = av.strides()[nd - 1], bs = bv.strides()[nd - 1];
    parallel_for(rows, row_grain(inner), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        int64_t co = cv.offset(), ao = av.offset(), bo = bv.offset(), rem = r;
        for (int k = nd - 2; k >= 0; --k) {
          const int64_t i = rem % out_shape[k];
          rem /= out_shape[k];
          co += i * cv.strides()[k];
          ao += i * av.strides()[k];
          bo += i * bv.strides()[k];
        }
        T* orow = o + r * inner;
        for (int64_t j = 0; j < inner; ++j) orow[j] = cb[co + j * cs] ? ab[ao + j * as] : bb[bo + j * bs];
      }
    });
  });
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_defined(x, "masked_fill");
  check_dtype(mask, DType::Bool, "masked_fill (mask)");
  bool fits = mask.ndim() <= x.ndim();
  for (int i = 1; fits && i <= mask.ndim(); ++i) {
    const int64_t m = mask.shape()[mask.ndim() - i];
    fits = m == 1 || m == x.shape()[x.ndim() - i];
  }
  GF_CHECK(fits, "masked_fill: mask {} cannot be broadcast to input {}", shape_str(mask.shape()), shape_str(x.shape()));
  return where(mask, Tensor::scalar(value, x.dtype()), x);
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  GF_CHECK(!tensors.empty(), "concat: no tensors given");
  const Tensor& first = tensors[0];
  check_defined(first, "concat");
  const int d = normalize_dim(dim, first.shape().size(), "concat", first.shape());
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t];
    check_same_dtype(first, x, "concat");
    bool ok = x.ndim() == first.ndim();
    for (int i = 0; ok && i < x.ndim(); ++i) ok = i == d || x.shape()[i] == first.shape()[i];
    GF_CHECK(ok, "concat: tensor {} {} and tensor 0 {} differ outside dim {}", t, shape_str(x.shape()),
             shape_str(first.shape()), d);
    out_shape[d] += x.shape()[d];
  }
  // Viewed as (outer, size_d * inner), every output row is the inputs' rows laid end to end.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= out_shape[i];
  for (size_t i = d + 1; i < out_shape.size(); ++i) inner *= out_shape[i];
  std::vector<Tensor> parts;  // dense copies where needed
  for (const Tensor& x : tensors) parts.push_back(x.contiguous());
  Tensor out = Tensor::empty(out_shape, first.dtype());
  const int64_t out_row = out_shape[d] * inner;
  dispatch_all(first.dtype(), [&]<class T>() {
    T* o = out.data<T>();
    parallel_for(outer, row_grain(out_row), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        T* dst = o + r * out_row;
        for (const Tensor& p : parts) {
          const int64_t len = p.shape()[d] * inner;
          const T* src = p.data<T>() + r * len;
          dst = std::copy(src, src + len, dst);
        }
      }
    });
  });
  return out;
}

}  // namespace gf::kernels

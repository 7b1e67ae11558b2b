#include "tensor/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/kernels/row_blocks.h"
#include "tensor/kernels/softmax.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

struct ReducePlan {
  std::vector<bool> reduced;  // per input dim
  Shape out_keep;             // output shape with keepdim
  Shape out_drop;             // output shape without the reduced dims
  int64_t count = 1;          // elements folded into each output
};

ReducePlan plan_reduce(const Tensor& t, std::vector<int64_t> dims, const char* op) {
  ReducePlan p;
  const size_t nd = t.shape().size();
  p.reduced.assign(nd, dims.empty());
  for (int64_t d : dims) {
    int k = normalize_dim(d, nd, op, t.shape());
    GF_CHECK(!p.reduced[k], "{}: dim {} given twice for shape {}", op, d, shape_str(t.shape()));
    p.reduced[k] = true;
  }
  for (size_t i = 0; i < nd; ++i) {
    if (p.reduced[i]) {
      p.out_keep.push_back(1);
      p.count *= t.shape()[i];
    } else {
      p.out_keep.push_back(t.shape()[i]);
      p.out_drop.push_back(t.shape()[i]);
    }
  }
  return p;
}

// Sums the last `inner` elements of each of `rows` rows of a contiguous buffer.
template <class T>
void sum_rows(const T* in, T* out, int64_t rows, int64_t inner) {
  parallel_for(rows, row_grain(inner), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* p = in + r * inner;
      double acc = 0;
      for (int64_t j = 0; j < inner; ++j) acc += p[j];
      out[r] = static_cast<T>(acc);
    }
  });
}

// Sums `rows` rows of `cols` columns down to one row (reduction over leading dims), in double, by
// row blocks (row_blocks.h): the same result for any thread count.
template <class T>
void sum_columns(const T* in, T* out, int64_t rows, int64_t cols) {
  const RowBlocks blocks = row_blocks(rows, cols);
  std::vector<double> part(static_cast<size_t>(blocks.count * cols), 0.0);  // (blocks, cols)
  parallel_for(blocks.count, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      double* acc = part.data() + blk * cols;
      for (int64_t r = blocks.begin(blk); r < blocks.end(blk); ++r) {
        const T* p = in + r * cols;
        for (int64_t j = 0; j < cols; ++j) acc[j] += p[j];
      }
    }
  });
  add_partials_in_order(part, blocks.count, cols, out);
}

}  // namespace

Tensor sum(const Tensor& t, std::vector<int64_t> dims, bool keepdim) {
  check_defined(t, "sum");
  ReducePlan p = plan_reduce(t, std::move(dims), "sum");
  const int nd = t.ndim();
  Tensor out = Tensor::empty(p.out_keep, t.dtype());
  // Are the reduced dims a leading block, or a trailing block?
  int first_kept = 0;
  while (first_kept < nd && p.reduced[first_kept]) ++first_kept;
  int last_kept = nd - 1;
  while (last_kept >= 0 && p.reduced[last_kept]) --last_kept;
  bool leading = true, trailing = true;
  for (int i = first_kept; i < nd; ++i) leading &= !p.reduced[i];
  for (int i = 0; i <= last_kept; ++i) trailing &= !p.reduced[i];

  dispatch_float(t.dtype(), "sum", [&]<class T>() {
    T* o = out.data<T>();
    const int64_t kept = out.numel();
    if (trailing) {
      Tensor c = t.contiguous();
      sum_rows<T>(c.data<T>(), o, kept, p.count);
    } else if (leading) {
      Tensor c = t.contiguous();
      sum_columns<T>(c.data<T>(), o, p.count, kept);
    } else {
      // Move the reduced dims to the end, copy to dense rows, then sum rows.
      std::vector<int64_t> perm;
      for (int i = 0; i < nd; ++i)
        if (!p.reduced[i]) perm.push_back(i);
      for (int i = 0; i < nd; ++i)
        if (p.reduced[i]) perm.push_back(i);
      Tensor c = t.permute(perm).contiguous();
      sum_rows<T>(c.data<T>(), o, kept, p.count);
    }
  });
  return keepdim ? out : out.reshape(p.out_drop);
}

Tensor mean(const Tensor& t, std::vector<int64_t> dims, bool keepdim) {
  ReducePlan p = plan_reduce(t, dims, "mean");
  Tensor s = sum(t, std::move(dims), keepdim);
  GF_CHECK(p.count != 0, "mean: reducing an empty dim of shape {}", shape_str(t.shape()));
  dispatch_float(s.dtype(), "mean", [&]<class T>() {
    T* d = s.data<T>();
    const T inv = static_cast<T>(1.0 / static_cast<double>(p.count));
    for (int64_t i = 0; i < s.numel(); ++i) d[i] *= inv;
  });
  return s;
}

namespace {

// Where p[0..n)'s max is: the first NaN if there is one (as in PyTorch), else the first of the
// largest values. Three passes that vectorise (a NaN test, 16 running maxima, a search), not one
// that cannot: greedy decoding takes this over the vocabulary for every row at every step.
template <class T>
int64_t first_argmax(const T* p, int64_t n) {
  constexpr int kLanes = 16;
  bool lane_nan[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane_nan[l] |= p[j + l] != p[j + l];
  bool nan = false;
  for (; j < n; ++j) nan |= p[j] != p[j];
  for (int l = 0; l < kLanes; ++l) nan |= lane_nan[l];
  if (nan) return std::find_if(p, p + n, [](T x) { return x != x; }) - p;
  return std::find(p, p + n, row_max(p, n)) - p;
}

}  // namespace

MaxResult max(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined(t, "max");
  int d = normalize_dim(dim, t.shape().size(), "max", t.shape());
  GF_CHECK(t.shape()[d] != 0, "max: dim {} of shape {} is empty", d, shape_str(t.shape()));
  // Move `dim` last so each output is the max of one dense row.
  std::vector<int64_t> perm;
  for (int i = 0; i < t.ndim(); ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  Tensor c = t.permute(perm).contiguous();
  Shape keep = t.shape();
  keep[d] = 1;
  Shape drop = t.shape();
  drop.erase(drop.begin() + d);
  const int64_t inner = t.shape()[d];
  const int64_t rows = t.numel() / inner;
  MaxResult r{Tensor::empty(drop, t.dtype()), Tensor::empty(drop, DType::Int64)};
  dispatch_float(t.dtype(), "max", [&]<class T>() {
    const T* in = c.data<T>();
    T* v = r.values.data<T>();
    int64_t* ix = r.indices.data<int64_t>();
    parallel_for(rows, row_grain(inner), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const T* p = in + row * inner;
        const int64_t best = first_argmax(p, inner);
        v[row] = p[best];
        ix[row] = best;
      }
    });
  });
  if (keepdim) {
    r.values = r.values.reshape(keep);
    r.indices = r.indices.reshape(keep);
  }
  return r;
}

int64_t first_nonfinite(const Tensor& t, bool inf_too) {
  if (!is_floating(t.dtype())) return -1;
  Tensor c = t.contiguous();
  return dispatch_float(c.dtype(), "first_nonfinite", [&]<class T>() -> int64_t {
    const T* p = c.data<T>();
    for (int64_t i = 0; i < c.numel(); ++i)
      if (std::isnan(p[i]) || (inf_too && std::isinf(p[i]))) return i;
    return -1;
  });
}

}  // namespace gf::kernels

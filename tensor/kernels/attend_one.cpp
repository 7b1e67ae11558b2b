#include "tensor/kernels/attend_one.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/check.h"
#include "tensor/kernels/fast_math.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// Shapes, row indices and mask, as the kernel and its reference both read them.
void check_args(const Tensor& q, const Tensor& k, const Tensor& v, const AttendOneConfig& cfg) {
  for (const Tensor* t : {&q, &k, &v}) check_defined(*t, "attend_one");
  GF_CHECK(q.ndim() == 4 && q.size(2) == 1 && k.ndim() == 4 && v.shape() == k.shape() && k.size(3) == q.size(3) && k.size(1) > 0 &&
               q.size(1) % k.size(1) == 0 && cfg.len >= 0 && cfg.len <= k.size(2),
           "attend_one: q {} must be (R, H, 1, d_k) and k {}, v {} (Bk, KV, >= {}, d_k) with KV dividing H", shape_str(q.shape()),
           shape_str(k.shape()), shape_str(v.shape()), cfg.len);
  check_same_dtype(k, v, "attend_one");
  GF_CHECK(k.dtype() == q.dtype() || (k.dtype() == DType::BFloat16 && q.dtype() == DType::Float32),
           "attend_one: keys and values must be in q's dtype, or bfloat16 under a float32 q (a bf16 KV cache); got q {}, k {}",
           dtype_name(q.dtype()), dtype_name(k.dtype()));
  const int64_t R = q.size(0), Bk = k.size(0), cap = k.size(2);
  const auto n_kv = static_cast<int64_t>(cfg.kv_rows.size()), n_pos = static_cast<int64_t>(cfg.position_rows.size());
  GF_CHECK(n_pos > 0 ? n_pos == R * cap && n_kv == 0 : n_kv == 0 ? Bk == R : n_kv == R,
           "attend_one: {} query rows, {} key/value rows, {} row indices and {} position rows", R, Bk, n_kv, n_pos);
  for (const auto rows : {cfg.kv_rows, cfg.position_rows})
    for (int64_t r : rows) GF_CHECK(r >= 0 && r < Bk, "attend_one: key/value row {} out of range for {} rows", r, Bk);
  const Tensor& m = cfg.mask;
  GF_CHECK(!m.defined() || m.dtype() == DType::Bool || is_floating(m.dtype()), "attend_one: the mask must be bool or floating, got {} {}",
           dtype_name(m.dtype()), shape_str(m.shape()));
  GF_CHECK(!m.defined() || (m.ndim() == 2 && m.size(0) == R && m.size(1) == cfg.len), "attend_one: the mask must be ({}, {}), got {}", R,
           cfg.len, shape_str(m.shape()));
  GF_CHECK(k.is_contiguous() && v.is_contiguous(), "attend_one: k {} and v {} must be contiguous", shape_str(k.shape()),
           shape_str(v.shape()));
}

// The mask as the loops read it: bool as is, float in q's dtype; (R, len) contiguous or undefined.
Tensor dense_mask(const Tensor& m, DType dtype) {
  if (!m.defined()) return m;
  return m.dtype() == DType::Bool ? m.contiguous() : m.to(dtype).contiguous();
}

// Where position s of query row r starts in k and v (item = row * H + head).
struct CacheIndex {
  int64_t H, G, cap, dk;
  std::span<const int64_t> kv_rows, position_rows;
  int64_t fixed_row(int64_t r) const { return kv_rows.empty() ? r : kv_rows[static_cast<size_t>(r)]; }
  int64_t buffer_row(int64_t r, int64_t s) const {
    return position_rows.empty() ? fixed_row(r) : position_rows[static_cast<size_t>(r * cap + s)];
  }
  int64_t head_offset(int64_t head) const { return head / G * cap * dk; }
  int64_t row_stride() const { return H / G * cap * dk; }  // elements of one buffer row (KV * cap * d_k)
};

// Asks for the cache line holding p. Not __builtin_prefetch: GCC deletes a loop whose only
// statements are that builtin's prefetches (they have no effect it must keep).
inline void prefetch(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// A cache element in the arithmetic's type T: itself, or a bfloat16 widened exactly (a shift).
template <class T, class K>
inline T widen(K x) {
  return static_cast<T>(x);
}

// sum_j a[j] * b[j] for n a multiple of 16 or not: 16 partial sums combined in a fixed order, so
// the compiler vectorises it without reassociating (no -ffast-math) and every run sums alike. b
// may be a bfloat16 cache: each element is widened exactly, so the sums are those of T.
template <class T, class K>
T dot(const T* a, const K* b, int64_t n) {
  T acc[16] = {};
  const int64_t full = n - n % 16;
  for (int64_t j = 0; j < full; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[j + l] * widen<T>(b[j + l]);
  for (int64_t j = full; j < n; ++j) acc[j - full] += a[j] * widen<T>(b[j]);  // lane j % 16
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// One (row, head): scores over keys [0, len), masked, softmax, weighted sum of values into out
// (d_k). scores is scratch of len. A row with every key blocked gets zeros (softmax's rule).
// key(s) and value(s) point at position s's d_k values; ahead(s) is called as key s is read (a
// hint for what comes next). DK, if not 0, is dk known at compile time: the weighted sum is then
// kept in a local array of fixed size (the same sums, in the same order).
template <class T, int DK, class Key, class Value, class Ahead>
void attend_row(const T* q, Key key, Value value, int64_t len, int64_t dk, const bool* blocked, const T* added, T* scores, T* out,
                Ahead ahead) {
  if constexpr (DK > 0) dk = DK;
  T top = -INFINITY;
  for (int64_t s = 0; s < len; ++s) {
    ahead(s);
    T x = dot(q, key(s), dk);
    if (added) x += added[s];
    if (blocked && blocked[s]) x = -INFINITY;
    scores[s] = x;
    top = std::max(top, x);
  }
  std::fill(out, out + dk, T(0));
  if (top == -INFINITY) return;
  T total = 0;
  for (int64_t s = 0; s < len; ++s) total += scores[s] = fast::exp(scores[s] - top);
  if constexpr (DK > 0) {
    T acc[DK] = {};  // (d_k): a local array, not out, which the compiler must store at every position
    for (int64_t s = 0; s < len; ++s) {
      const T w = scores[s] / total;
      const auto* vs = value(s);
      for (int j = 0; j < DK; ++j) acc[j] += w * widen<T>(vs[j]);
    }
    std::copy(acc, acc + DK, out);
  } else {
    for (int64_t s = 0; s < len; ++s) {
      const T w = scores[s] / total;
      const auto* vs = value(s);
      for (int64_t j = 0; j < dk; ++j) out[j] += w * widen<T>(vs[j]);
    }
  }
}

// How many keys row r must read: all `len`, except that keys blocked at the end of a row by a bool
// mask (a source's padding, in cross-attention) are never read. A blocked key's weight is exactly 0,
// so the output is the same; decoding reads about half less of the cross-attention cache when a
// batch's sources differ in length.
std::vector<int64_t> keys_to_read(const Tensor& mask, int64_t R, int64_t len) {  // mask: (R, len) or undefined
  std::vector<int64_t> keys(static_cast<size_t>(R), len);
  if (!mask.defined() || mask.dtype() != DType::Bool) return keys;
  const bool* m = mask.data<bool>();
  for (int64_t r = 0; r < R; ++r)
    while (keys[r] > 0 && m[r * len + keys[r] - 1]) --keys[r];
  return keys;
}

// K: the cache's element type (T, or bfloat16 under a float32 T).
template <class T, class K>
void attend_rows(const T* qp, const K* kp, const K* vp, const Tensor& mask, const std::vector<int64_t>& keys, const CacheIndex& ix,
                 int64_t R, T scale, int64_t len, T* op) {
  const int64_t H = ix.H, dk = ix.dk;
  // Where item i's (= row * H + head) position s starts in k and v: at(s), cheap in the hot loop.
  auto positions_of = [&](int64_t i) {
    const int64_t r = i / H, head = ix.head_offset(i % H), stride = ix.row_stride();
    const int64_t* pos = ix.position_rows.empty() ? nullptr : ix.position_rows.data() + r * ix.cap;
    const int64_t fixed = ix.fixed_row(r);
    return [=](int64_t s) { return (pos ? pos[s] : fixed) * stride + head + s * dk; };
  };
  // The keys and values an item reads are a few KB each, in many short runs the hardware
  // prefetcher starts too late for: while item i reads its key s, position s of item i + 1 is
  // asked for (spread out so, the requests do not queue up behind each other), and the rest of
  // item i + 1's positions, if it has more, after it.
  auto prefetch_position = [&](const auto& at, int64_t s) {
    const int64_t offset = at(s);
    for (int64_t j = 0; j < dk; j += 64 / static_cast<int64_t>(sizeof(K))) {
      prefetch(kp + offset + j);
      prefetch(vp + offset + j);
    }
  };
  const bool* blocked_rows = mask.defined() && mask.dtype() == DType::Bool ? mask.data<bool>() : nullptr;
  const T* added_rows = mask.defined() && mask.dtype() != DType::Bool ? mask.data<T>() : nullptr;
  parallel_for(R * H, row_grain(4 * len * dk), [&](int64_t lo, int64_t hi) {
    std::vector<T> scores(static_cast<size_t>(std::max<int64_t>(len, 1))), qs(static_cast<size_t>(dk));
    for (int64_t i = lo; i < hi; ++i) {
      // The chunk's last item has no next one: next_len is 0, so its next_at (built on itself, as
      // i + 1 may be past the last row) is never called.
      const bool has_next = i + 1 < hi;
      const auto next_at = positions_of(has_next ? i + 1 : i);
      const int64_t next_len = has_next ? keys[(i + 1) / H] : 0;
      const int64_t r = i / H;
      for (int64_t j = 0; j < dk; ++j) qs[j] = qp[i * dk + j] * scale;  // q scaled first, as attention's (q * scale) @ k^T
      auto at = positions_of(i);
      const bool* blocked = blocked_rows ? blocked_rows + r * len : nullptr;
      const T* added = added_rows ? added_rows + r * len : nullptr;
      auto ahead = [&](int64_t s) {
        if (s < next_len) prefetch_position(next_at, s);
      };
      auto key = [&](int64_t s) { return kp + at(s); };
      auto value = [&](int64_t s) { return vp + at(s); };
      if (dk == 64)  // the usual head width (d_model 256 or 512 over 4 or 8 heads)
        attend_row<T, 64>(qs.data(), key, value, keys[r], dk, blocked, added, scores.data(), op + i * dk, ahead);
      else
        attend_row<T, 0>(qs.data(), key, value, keys[r], dk, blocked, added, scores.data(), op + i * dk, ahead);
      for (int64_t s = keys[r]; s < next_len; ++s) prefetch_position(next_at, s);
    }
  });
}

CacheIndex index_of(const Tensor& q, const Tensor& k, const AttendOneConfig& cfg) {
  return {q.size(1), q.size(1) / k.size(1), k.size(2), q.size(3), cfg.kv_rows, cfg.position_rows};
}

}  // namespace

Tensor attend_one(const Tensor& q_in, const Tensor& k, const Tensor& v, const AttendOneConfig& cfg) {
  check_args(q_in, k, v, cfg);
  const int64_t R = q_in.size(0), H = q_in.size(1), dk = q_in.size(3);
  Tensor q = q_in.contiguous();                              // (R, H, 1, d_k)
  Tensor out = Tensor::empty({R, 1, H * dk}, q.dtype());     // (R, 1, H*d_k): heads side by side
  Tensor mask = dense_mask(cfg.mask, q.dtype());             // (R, len) or undefined
  const std::vector<int64_t> keys = keys_to_read(mask, R, cfg.len);  // (R)
  const CacheIndex ix = index_of(q, k, cfg);
  dispatch_float(q.dtype(), "attend_one", [&]<class T>() {
    const T scale = static_cast<T>(cfg.scale);
    if (k.dtype() == DType::BFloat16)
      attend_rows<T>(q.data<T>(), k.data<bfloat16>(), v.data<bfloat16>(), mask, keys, ix, R, scale, cfg.len, out.data<T>());
    else
      attend_rows<T>(q.data<T>(), k.data<T>(), v.data<T>(), mask, keys, ix, R, scale, cfg.len, out.data<T>());
  });
  return out;
}

Tensor attend_one_reference(const Tensor& q_in, const Tensor& k, const Tensor& v, const AttendOneConfig& cfg) {
  check_args(q_in, k, v, cfg);
  const int64_t R = q_in.size(0), H = q_in.size(1), dk = q_in.size(3), len = cfg.len;
  Tensor q = q_in.contiguous();                           // (R, H, 1, d_k)
  Tensor out = Tensor::empty({R, 1, H * dk}, q.dtype());  // (R, 1, H*d_k)
  Tensor mask = dense_mask(cfg.mask, DType::Float64);     // (R, len) or undefined
  const CacheIndex ix = index_of(q, k, cfg);
  // A bfloat16 cache read as the float32 values it holds exactly.
  const Tensor kd = k.to(DType::Float64), vd = v.to(DType::Float64);  // (Bk, KV, capacity, d_k)
  dispatch_float(q.dtype(), "attend_one_reference", [&]<class T>() {
    const T* qp = q.data<T>();
    const double *kp = kd.data<double>(), *vp = vd.data<double>();
    std::vector<double> scores(static_cast<size_t>(len));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h) {
        auto at = [&](int64_t s) { return ix.buffer_row(r, s) * ix.row_stride() + ix.head_offset(h) + s * dk; };
        double top = -INFINITY;
        for (int64_t s = 0; s < len; ++s) {
          double x = 0;
          for (int64_t j = 0; j < dk; ++j) x += static_cast<double>(qp[(r * H + h) * dk + j]) * kp[at(s) + j];
          x *= cfg.scale;
          if (mask.defined() && mask.dtype() == DType::Bool && mask.data<bool>()[r * len + s]) x = -INFINITY;
          if (mask.defined() && mask.dtype() != DType::Bool) x += mask.data<double>()[r * len + s];
          scores[s] = x;
          top = std::max(top, x);
        }
        double total = 0;
        for (int64_t s = 0; s < len; ++s) total += scores[s] = top == -INFINITY ? 0.0 : std::exp(scores[s] - top);
        for (int64_t j = 0; j < dk; ++j) {
          double o = 0;
          for (int64_t s = 0; s < len && total > 0; ++s) o += scores[s] / total * vp[at(s) + j];
          out.data<T>()[(r * H + h) * dk + j] = static_cast<T>(o);
        }
      }
  });
  return out;
}

}  // namespace gf::kernels

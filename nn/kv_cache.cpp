// KVCache, and MultiheadAttention's cached decoding: start_cache, forward_cached, attend_one.
#include "nn/kv_cache.h"

#include <algorithm>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "nn/multihead_attention.h"
#include "tensor/check.h"
#include "tensor/kernels/attend_one.h"
#include "tensor/parallel.h"

namespace gf::nn {

int64_t KVCache::bytes() const { return (k.defined() ? static_cast<int64_t>(k.nbytes()) : 0) + (v.defined() ? static_cast<int64_t>(v.nbytes()) : 0); }

int64_t KVCache::batch() const {
  if (!position_rows.empty()) return static_cast<int64_t>(position_rows.size()) / capacity();
  return k.defined() ? k.size(0) : 0;
}

namespace {

// A new (n, KV, capacity, d_k) buffer whose row i holds, at positions [0, len), what `src` holds
// for position p in buffer row at(i, p). Rows are independent, so the split over threads changes nothing.
template <class At>
Tensor gather_positions(const Tensor& src, int64_t n, int64_t len, At at) {
  const int64_t KV = src.size(1), cap = src.size(2), dk = src.size(3), row = KV * cap * dk;
  Tensor dst = Tensor::empty({n, KV, cap, dk}, src.dtype());  // (n, KV, capacity, d_k)
  GF_CHECK(src.is_contiguous(), "KVCache: the cache {} must be contiguous", shape_str(src.shape()));
  dispatch_all(src.dtype(), [&]<class T>() {  // float32, float64 or a bf16 cache
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    parallel_for(n * KV, row_grain(len * dk), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t r = i / KV, h = i % KV;
        for (int64_t p = 0; p < len; ++p) {
          const T* from = s + at(r, p) * row + (h * cap + p) * dk;
          std::copy(from, from + dk, d + r * row + (h * cap + p) * dk);
        }
      }
    });
  });
  return dst;
}

}  // namespace

void KVCache::select_rows(const std::vector<int64_t>& rows) {
  if (!k.defined()) return;
  const int64_t B = batch(), n = static_cast<int64_t>(rows.size()), cap = capacity();
  for (int64_t i = 0; i < n; ++i)
    GF_CHECK_AS(std::out_of_range, rows[i] >= 0 && rows[i] < B,
                "KVCache::select_rows: index {} at position {} is out of range for a table of {} rows (cache keys {})", rows[i], i, B,
                shape_str(k.shape()));
  bool same = n == B;
  for (int64_t i = 0; same && i < n; ++i) same = rows[i] == i;
  if (same) return;  // beam search often keeps every row where it was
  // The buffer row of position p of the current row r.
  auto at = [&](int64_t r, int64_t p) { return position_rows.empty() ? r : position_rows[static_cast<size_t>(r * cap + p)]; };
  if (n > k.size(0) || cap == 0) {  // more rows than slots (a repeat): a new buffer
    k = gather_positions(k, n, length, [&](int64_t i, int64_t p) { return at(rows[i], p); });
    v = gather_positions(v, n, length, [&](int64_t i, int64_t p) { return at(rows[i], p); });
    position_rows.clear();
    return;
  }
  std::vector<int64_t> next(static_cast<size_t>(n * cap));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < cap; ++p) next[static_cast<size_t>(i * cap + p)] = p < length ? at(rows[i], p) : i;
  position_rows = std::move(next);
}

void KVCache::materialize() {
  if (position_rows.empty()) return;
  const int64_t cap = capacity();
  auto at = [&](int64_t r, int64_t p) { return position_rows[static_cast<size_t>(r * cap + p)]; };
  k = gather_positions(k, batch(), length, at);  // (batch, KV, capacity, d_k)
  v = gather_positions(v, batch(), length, at);
  position_rows.clear();
}

KVCache MultiheadAttention::start_cache(int64_t batch, int64_t capacity, DType dtype) const {
  KVCache c;
  c.k = Tensor::empty({batch, kv_heads, capacity, head_dim}, dtype);  // (B, KV, capacity, d_k)
  c.v = Tensor::empty({batch, kv_heads, capacity, head_dim}, dtype);
  return c;
}

AttentionResult MultiheadAttention::forward_cached(const Variable& x, KVCache& cache, bool need_weights) const {
  NoGradGuard ng;
  check_input(x, "x");
  const int64_t t = x.size(1), past = cache.length;
  GF_CHECK(cache.k.defined() && cache.batch() == x.size(0),
           "MultiheadAttention::forward_cached: the cache was not started for {} (cache keys {})", shape_str(x.shape()),
           shape_str(cache.k.shape()));
  GF_CHECK_AS(std::length_error, past + t <= cache.capacity(),
              "MultiheadAttention::forward_cached: the cache holds {} positions, {} are used and {} more were given",
              cache.capacity(), past, t);
  Variable q = project_q(x);           // (B, H, t, d_k)
  auto [k_new, v_new] = project_kv(x);  // (B, KV, t, d_k)
  if (!cache.position_rows.empty() && (t > 1 || need_weights)) cache.materialize();  // attend() reads rows in place
  const int64_t R = x.size(0);
  cache.k.narrow(0, 0, R).narrow(2, past, t).copy_(k_new.data());  // row r writes its new positions in buffer row r
  cache.v.narrow(0, 0, R).narrow(2, past, t).copy_(v_new.data());
  cache.length = past + t;
  // One new position needs no mask: only the past is in the cache.
  if (t == 1 && !need_weights) return {attend_one(q, cache.k, cache.v, cache.length, {}, Tensor(), cache.position_rows), Variable()};  // (B, 1, D)
  // attend() takes keys and values in q's dtype: a bf16 cache is widened here (exactly).
  Variable k(cache.k.narrow(2, 0, cache.length).to(x.dtype())), v(cache.v.narrow(2, 0, cache.length).to(x.dtype()));  // (B, KV, past+t, d_k)
  Tensor causal;
  if (t > 1) {
    causal = Tensor::zeros({t, past + t}, DType::Bool);  // (t, past+t): new position i sees keys <= past + i
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = past + i + 1; j < past + t; ++j) causal.data<bool>()[i * (past + t) + j] = true;
  }
  return attend(q, k, v, Tensor(), causal, need_weights);
}

Variable MultiheadAttention::attend_one(const Variable& q, const Tensor& k, const Tensor& v, int64_t len, const std::vector<int64_t>& kv_rows,
                                        const Tensor& kpm, const std::vector<int64_t>& position_rows) const {
  NoGradGuard ng;
  GF_CHECK(q.ndim() == 4 && q.size(1) == num_heads && q.size(3) == head_dim && k.ndim() == 4 && k.size(1) == kv_heads,
           "MultiheadAttention::attend_one: q {} must be (R, {}, 1, {}) and k {} (Bk, {}, capacity, {})", shape_str(q.shape()), num_heads,
           head_dim, shape_str(k.shape()), kv_heads, head_dim);
  kernels::AttendOneConfig cfg;
  cfg.len = len, cfg.scale = score_scale, cfg.mask = kpm, cfg.kv_rows = kv_rows, cfg.position_rows = position_rows;
  return out_proj->forward(Variable(kernels::attend_one(q.data(), k, v, cfg)));  // (R, 1, D)
}

}  // namespace gf::nn

#include "nn/multihead_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "nn/init.h"
#include "nn/sigma_reparam.h"
#include "tensor/check.h"
#include "tensor/kernels/indexing.h"
#include "tensor/parallel.h"

namespace gf::nn {

MultiheadAttention::MultiheadAttention(int64_t d, int64_t h, double dropout, bool bias, Generator& gen, int64_t kv)
    : embed_dim(d),
      num_heads(h),
      kv_heads(kv > 0 ? kv : h),
      head_dim(h > 0 ? d / h : 0),
      score_scale(h > 0 && d >= h ? 1.0 / std::sqrt(static_cast<double>(d / h)) : 1.0) {
  GF_CHECK(h > 0 && d % h == 0, "MultiheadAttention: embed_dim {} is not divisible by num_heads {}", d, h);
  GF_CHECK(kv >= 0 && h % kv_heads == 0, "MultiheadAttention: kv_heads {} does not divide num_heads {}", kv, h);
  if (!grouped()) {
    Tensor w = Tensor::empty({3 * d, d});  // (3D, D)
    init::xavier_uniform_(w, gen);
    in_proj_weight = register_parameter("in_proj_weight", w);
    if (bias) in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * d}));
  } else {
    const int64_t dkv = kv_heads * head_dim;
    q_proj = register_module("q_proj", std::make_shared<Linear>(d, d, bias, gen));
    k_proj = register_module("k_proj", std::make_shared<Linear>(d, dkv, bias, gen));
    v_proj = register_module("v_proj", std::make_shared<Linear>(d, dkv, bias, gen));
    for (const auto& p : {q_proj, k_proj, v_proj}) {  // as the packed layout: xavier weights, zero biases
      Tensor w = p->weight.data();
      init::xavier_uniform_(w, gen);
      if (bias) Tensor(p->bias.data()).zero_();
    }
  }
  out_proj = register_module("out_proj", std::make_shared<Linear>(d, d, bias, gen));
  if (bias) {
    Tensor b = out_proj->bias.data();  // shares storage
    b.zero_();                         // as nn.MultiheadAttention's _reset_parameters
  }
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(dropout));  // no parameters: no state_dict keys
  static const bool unfused_env = [] {
    const char* e = std::getenv("GRADFLOW_UNFUSED_ATTENTION");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  fused = !unfused_env;
}

Variable MultiheadAttention::split_heads(const Variable& x, int64_t heads) const {
  const int64_t B = x.size(0), L = x.size(1);
  Variable r = reshape(x, {B, L, heads, head_dim});  // (B, L, heads, d_k)
  return contiguous(permute(r, {0, 2, 1, 3}));       // (B, heads, L, d_k)
}

Variable MultiheadAttention::raw_weight(int which) const {
  GF_CHECK(which >= 0 && which <= 2, "MultiheadAttention: projection {} is not 0 (query), 1 (key) or 2 (value)", which);
  if (grouped()) return (which == 0 ? q_proj : which == 1 ? k_proj : v_proj)->weight;  // (D or KV*d_k, D)
  return narrow(in_proj_weight, 0, which * embed_dim, embed_dim);                    // (D, D)
}

Variable MultiheadAttention::raw_bias(int which) const {
  if (grouped()) return (which == 0 ? q_proj : which == 1 ? k_proj : v_proj)->bias;
  return in_proj_bias.defined() ? narrow(in_proj_bias, 0, which * embed_dim, embed_dim) : Variable();  // (D)
}

namespace {
const char* const kReparamName[3] = {"q", "k", "v"};
}  // namespace

void MultiheadAttention::use_sigma_reparam(bool all) {
  GF_CHECK(!sigma_reparam_, "MultiheadAttention::use_sigma_reparam: σReparam is already on");
  for (int which = 0; which < (all ? 3 : 2); ++which) {
    const Variable w = raw_weight(which);
    std::vector<double> u;
    const double sigma = sigma_reparam::initial_sigma(w.data(), u);
    register_buffer(std::string(kReparamName[which]) + "_sigma_u", Tensor::from_vector(u, {embed_dim}).to(w.dtype()));  // (D)
    register_parameter(std::string(kReparamName[which]) + "_gamma", Tensor::full({1}, sigma, w.dtype()));               // (1)
  }
  if (all) out_proj->use_sigma_reparam();
  sigma_reparam_ = true;
  sigma_value_ = all;
}

Variable MultiheadAttention::projection_weight(int which) const {
  const Variable w = raw_weight(which);
  if (!reparametrised(which)) return w;
  const std::string name = kReparamName[which];
  return sigma_reparam::reparametrise(w, buffer(name + "_sigma_u"), parameter(name + "_gamma"), is_training() && GradMode::enabled());
}

Variable MultiheadAttention::q_rows(const Variable& x) const {
  if (sigma_reparam_) return linear(x, projection_weight(0), raw_bias(0));                  // (B, L, D)
  if (grouped()) return q_proj->forward(x);                                                  // (B, L, D)
  Variable w = narrow(in_proj_weight, 0, 0, embed_dim);                                    // (D, D)
  Variable b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, 0, embed_dim) : Variable();  // (D)
  return linear(x, w, b);                                                                  // (B, L, D)
}

std::pair<Variable, Variable> MultiheadAttention::kv_rows(const Variable& x) const {
  if (sigma_reparam_) return {linear(x, projection_weight(1), raw_bias(1)), linear(x, projection_weight(2), raw_bias(2))};  // (B, S, KV*d_k)
  if (grouped()) return {k_proj->forward(x), v_proj->forward(x)};                                      // (B, S, KV*d_k)
  Variable w = narrow(in_proj_weight, 0, embed_dim, 2 * embed_dim);                                    // (2D, D)
  Variable b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, embed_dim, 2 * embed_dim) : Variable();  // (2D)
  Variable kv = linear(x, w, b);                                                                       // (B, S, 2D)
  return {narrow(kv, -1, 0, embed_dim), narrow(kv, -1, embed_dim, embed_dim)};                         // (B, S, D) views
}

Variable MultiheadAttention::project_q(const Variable& x) const { return split_heads(q_rows(x), num_heads); }  // (B, H, L, d_k)

std::pair<Variable, Variable> MultiheadAttention::project_kv(const Variable& x) const {
  auto [k, v] = kv_rows(x);                                             // (B, S, KV*d_k)
  return {split_heads(k, kv_heads), split_heads(v, kv_heads)};  // (B, KV, S, d_k)
}

namespace {

// Only bool (blocked) and floating (added) masks have a meaning; an int64 0/1 mask would be added
// as a +1 bias where it meant "blocked", so it is refused.
void check_mask_dtype(const Tensor& m, const char* what) {
  GF_CHECK(!m.defined() || m.dtype() == DType::Bool || is_floating(m.dtype()),
           "MultiheadAttention: {} must be bool or floating, got {} {}", what, dtype_name(m.dtype()), shape_str(m.shape()));
}

void check_input(const Variable& x, int64_t D, const char* what) {
  GF_CHECK(x.ndim() == 3 && x.size(2) == D, "MultiheadAttention: {} must be (B, len, {}), got {}", what, D,
           shape_str(x.shape()));
}

void check_masks(const Tensor& kpm, const Tensor& attn_mask, int64_t B, int64_t H, int64_t L, int64_t S) {
  check_mask_dtype(kpm, "key_padding_mask");
  check_mask_dtype(attn_mask, "attn_mask");
  GF_CHECK(!kpm.defined() || (kpm.ndim() == 2 && kpm.size(0) == B && kpm.size(1) == S),
           "MultiheadAttention: key_padding_mask must be ({}, {}), got {}", B, S, shape_str(kpm.shape()));
  if (attn_mask.defined()) {
    bool ok2 = attn_mask.ndim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S;
    bool ok3 = attn_mask.ndim() == 3 && attn_mask.size(0) == B * H && attn_mask.size(1) == L && attn_mask.size(2) == S;
    GF_CHECK(ok2 || ok3, "MultiheadAttention: attn_mask must be ({}, {}) or ({}, {}, {}), got {}", L, S, B * H, L, S,
             shape_str(attn_mask.shape()));
  }
}

// OR of the boolean masks as one (B, 1, L, S) or (B, H, L, S) tensor; undefined if none is bool.
Tensor combine_bool_masks(const Tensor& kpm, const Tensor& attn, int64_t B, int64_t H, int64_t L, int64_t S) {
  bool kb = kpm.defined() && kpm.dtype() == DType::Bool;
  bool ab = attn.defined() && attn.dtype() == DType::Bool;
  if (!kb && !ab) return Tensor();
  const int64_t Hm = ab && attn.ndim() == 3 ? H : 1;
  Tensor out = Tensor::zeros({B, Hm, L, S}, DType::Bool);  // (B, Hm, L, S)
  bool* o = out.data<bool>();
  Tensor k = kb ? kpm.contiguous() : Tensor();   // (B, S)
  Tensor a = ab ? attn.contiguous() : Tensor();  // (L, S) or (B*H, L, S)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hm; ++h)
      for (int64_t l = 0; l < L; ++l) {
        bool* row = o + ((b * Hm + h) * L + l) * S;
        const bool* krow = kb ? k.data<bool>() + b * S : nullptr;
        const bool* arow = !ab ? nullptr : a.ndim() == 2 ? a.data<bool>() + l * S : a.data<bool>() + ((b * H + h) * L + l) * S;
        for (int64_t s = 0; s < S; ++s) row[s] = (krow && krow[s]) || (arow && arow[s]);
      }
  return out;
}

// softmax written out from ops, with no guard: a fully blocked row gives NaN (see naive_softmax).
Variable unguarded_softmax(const Variable& s) {
  Variable e = exp(s - max(s, -1, /*keepdim=*/true));  // (..., S)
  return e / sum(e, {-1}, /*keepdim=*/true);            // (..., S)
}

}  // namespace

Variable MultiheadAttention::weights_of(const Variable& q, const Variable& k, const Tensor& kpm, const Tensor& attn_mask) const {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), KV = k.size(1), G = H / KV;
  // A group's G query heads are consecutive, so (B, H, L, d_k) is (B, KV, G*L, d_k) with no copy, and
  // each key/value head meets its group's queries in one product: K and V are never repeated.
  Variable qg = G > 1 ? reshape(q, {B, KV, G * L, head_dim}) : q;              // (B, KV, G*L, d_k)
  Variable scores = matmul(qg * score_scale, transpose(k, -2, -1));  // (B, KV, G*L, S)
  if (G > 1) scores = reshape(scores, {B, H, L, S});                  // (B, H, L, S)
  // Float masks are added; boolean masks block (-inf). The two conventions are never mixed.
  if (attn_mask.defined() && attn_mask.dtype() != DType::Bool) {
    Tensor m = attn_mask.to(scores.dtype());
    if (m.ndim() == 3) m = m.reshape({B, H, L, S});
    scores = scores + Variable(m);  // (B, H, L, S)
  }
  if (kpm.defined() && kpm.dtype() != DType::Bool) scores = scores + Variable(kpm.to(scores.dtype()).reshape({B, 1, 1, S}));
  Tensor blocked = combine_bool_masks(kpm, attn_mask, B, H, L, S);  // (B, 1|H, L, S)
  if (blocked.defined()) scores = masked_fill(scores, blocked, -INFINITY);
  return naive_softmax ? unguarded_softmax(scores) : softmax(scores);  // (B, H, L, S)
}

void MultiheadAttention::peek_weights(const Variable& q, const Variable& k, const Tensor& kpm, const Tensor& attn_mask) const {
  NoGradGuard ng;
  weights_peek(weights_of(split_heads(q, num_heads), split_heads(k, kv_heads), kpm, attn_mask).data());
}

AttentionResult MultiheadAttention::attend(const Variable& q, const Variable& k, const Variable& v, const Tensor& kpm,
                                           const Tensor& attn_mask, bool need_weights) const {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), KV = k.size(1);
  GF_CHECK(KV == kv_heads && v.size(1) == KV && H == num_heads,
           "MultiheadAttention::attend: q {}, k {}, v {} for {} query and {} key/value heads", shape_str(q.shape()),
           shape_str(k.shape()), shape_str(v.shape()), num_heads, kv_heads);
  const int64_t G = H / KV;  // query heads per key/value head
  check_masks(kpm, attn_mask, B, H, L, S);
  Variable weights = weights_of(q, k, kpm, attn_mask);  // (B, H, L, S)
  if (weights_transform) {
    const Shape shape = weights.shape();
    weights = weights_transform(weights);  // (B, H, L, S)
    GF_CHECK(weights.shape() == shape, "MultiheadAttention: weights_transform returned {} for weights {}", shape_str(weights.shape()),
             shape_str(shape));
  }
  if (weights_peek) weights_peek(weights.data());
  if (weights_observer) weights_observer(weights);
  Variable kept = attn_dropout->p > 0 ? attn_dropout->forward(weights) : weights;  // (B, H, L, S)
  Variable mixed = matmul(G > 1 ? reshape(kept, {B, KV, G * L, S}) : kept, v);  // (B, KV, G*L, d_k)
  if (G > 1) mixed = reshape(mixed, {B, H, L, head_dim});                         // (B, H, L, d_k)
  Variable merged = reshape(permute(mixed, {0, 2, 1, 3}), {B, L, H * head_dim});            // (B, L, D)
  AttentionResult r;
  r.output = out_proj->forward(merged);  // (B, L, D)
  if (need_weights) r.weights = weights;
  return r;
}

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
  dispatch_float(src.dtype(), "KVCache::select_rows", [&]<class T>() {
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
  check_input(x, embed_dim, "x");
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
  Variable k(cache.k.narrow(2, 0, cache.length)), v(cache.v.narrow(2, 0, cache.length));  // (B, KV, past+t, d_k)
  Tensor causal;
  if (t > 1) {
    causal = Tensor::zeros({t, past + t}, DType::Bool);  // (t, past+t): new position i sees keys <= past + i
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = past + i + 1; j < past + t; ++j) causal.data<bool>()[i * (past + t) + j] = true;
  }
  return attend(q, k, v, Tensor(), causal, need_weights);
}

namespace {

// Asks for the cache line holding p. Not __builtin_prefetch: GCC deletes a loop whose only
// statements are that builtin's prefetches (they have no effect it must keep).
inline void prefetch(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// sum_j a[j] * b[j] for n a multiple of 16 or not: 16 partial sums combined in a fixed order, so
// the compiler vectorises it without reassociating (no -ffast-math) and every run sums alike.
template <class T>
T dot(const T* a, const T* b, int64_t n) {
  T acc[16] = {};
  const int64_t full = n - n % 16;
  for (int64_t j = 0; j < full; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[j + l] * b[j + l];
  for (int64_t j = full; j < n; ++j) acc[j - full] += a[j] * b[j];  // lane j % 16
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
  for (int64_t s = 0; s < len; ++s) total += scores[s] = std::exp(scores[s] - top);
  if constexpr (DK > 0) {
    T acc[DK] = {};  // (d_k): a local array, not out, which the compiler must store at every position
    for (int64_t s = 0; s < len; ++s) {
      const T w = scores[s] / total;
      const T* vs = value(s);
      for (int j = 0; j < DK; ++j) acc[j] += w * vs[j];
    }
    std::copy(acc, acc + DK, out);
  } else {
    for (int64_t s = 0; s < len; ++s) {
      const T w = scores[s] / total;
      const T* vs = value(s);
      for (int64_t j = 0; j < dk; ++j) out[j] += w * vs[j];
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

}  // namespace

Variable MultiheadAttention::attend_one(const Variable& q_in, const Tensor& k, const Tensor& v, int64_t len,
                                        const std::vector<int64_t>& kv_rows, const Tensor& kpm,
                                        const std::vector<int64_t>& position_rows) const {
  NoGradGuard ng;
  const int64_t R = q_in.size(0), H = num_heads, KV = kv_heads, dk = head_dim, Bk = k.size(0);
  GF_CHECK(q_in.ndim() == 4 && q_in.size(1) == H && q_in.size(2) == 1 && q_in.size(3) == dk && k.ndim() == 4 && k.size(1) == KV &&
               k.size(3) == dk && v.shape() == k.shape() && len <= k.size(2),
           "MultiheadAttention::attend_one: q {} must be (R, {}, 1, {}) and k {}, v {} (Bk, {}, >= {}, {})", shape_str(q_in.shape()), H,
           dk, shape_str(k.shape()), shape_str(v.shape()), KV, len, dk);
  const int64_t cap = k.size(2);
  GF_CHECK(!position_rows.empty() ? static_cast<int64_t>(position_rows.size()) == R * cap && kv_rows.empty()
           : kv_rows.empty()      ? Bk == R
                                  : static_cast<int64_t>(kv_rows.size()) == R,
           "MultiheadAttention::attend_one: {} query rows, {} key/value rows, {} row indices and {} position rows", R, Bk, kv_rows.size(),
           position_rows.size());
  for (const auto* rows : {&kv_rows, &position_rows})
    for (int64_t r : *rows) GF_CHECK(r >= 0 && r < Bk, "MultiheadAttention::attend_one: key/value row {} out of range for {} rows", r, Bk);
  check_mask_dtype(kpm, "key_padding_mask");
  GF_CHECK(!kpm.defined() || (kpm.ndim() == 2 && kpm.size(0) == R && kpm.size(1) == len),
           "MultiheadAttention::attend_one: key_padding_mask must be ({}, {}), got {}", R, len, shape_str(kpm.shape()));
  GF_CHECK(k.is_contiguous() && v.is_contiguous(), "MultiheadAttention::attend_one: k {} and v {} must be contiguous",
           shape_str(k.shape()), shape_str(v.shape()));
  Tensor q = q_in.data().contiguous();                       // (R, H, 1, d_k)
  Tensor merged = Tensor::empty({R, 1, H * dk}, q.dtype());  // (R, 1, D): heads side by side, as attend's merge
  Tensor mask = kpm.defined() ? (kpm.dtype() == DType::Bool ? kpm.contiguous() : kpm.to(q.dtype()).contiguous()) : Tensor();  // (R, len)
  const int64_t G = H / KV;
  const std::vector<int64_t> keys = keys_to_read(mask, R, len);  // (R,)
  dispatch_float(q.dtype(), "MultiheadAttention::attend_one", [&]<class T>() {
    const T* qp = q.data<T>();
    const T *kp = k.data<T>(), *vp = v.data<T>();
    T* op = merged.data<T>();
    const int64_t cache_row = KV * cap * dk;  // elements of one buffer row
    // Where item i's (= row * H + head) position s starts in k and v: at(s), cheap in the hot loop.
    auto positions_of = [&](int64_t i) {
      const int64_t r = i / H, head = (i % H / G) * cap * dk;
      const int64_t* pos = position_rows.empty() ? nullptr : position_rows.data() + r * cap;
      const int64_t fixed = kv_rows.empty() ? r : kv_rows[static_cast<size_t>(r)];
      return [=](int64_t s) { return (pos ? pos[s] : fixed) * cache_row + head + s * dk; };
    };
    // The keys and values an item reads are a few KB each, in many short runs the hardware
    // prefetcher starts too late for: while item i reads its key s, position s of item i + 1 is
    // asked for (spread out so, the requests do not queue up behind each other), and the rest of
    // item i + 1's positions, if it has more, after it.
    auto prefetch_position = [&](const auto& at, int64_t s) {
      const int64_t offset = at(s);
      const T *ks = kp + offset, *vs = vp + offset;
      for (int64_t j = 0; j < dk; j += 64 / static_cast<int64_t>(sizeof(T))) {
        prefetch(ks + j);
        prefetch(vs + j);
      }
    };
    parallel_for(R * H, row_grain(4 * len * dk), [&](int64_t lo, int64_t hi) {
      std::vector<T> scores(static_cast<size_t>(std::max<int64_t>(len, 1))), qs(static_cast<size_t>(dk));
      for (int64_t i = lo; i < hi; ++i) {
        // The chunk's last item has no next one: next_len is 0, so its next_at (built on itself, as
        // i + 1 may be past the last row) is never called.
        const bool has_next = i + 1 < hi;
        const auto next_at = positions_of(has_next ? i + 1 : i);
        const int64_t next_len = has_next ? keys[(i + 1) / H] : 0;
        const int64_t r = i / H;
        // q scaled first, as attend's (q * scale) @ k^T
        for (int64_t j = 0; j < dk; ++j) qs[j] = qp[i * dk + j] * static_cast<T>(score_scale);
        auto at = positions_of(i);
        const bool* blocked = mask.defined() && mask.dtype() == DType::Bool ? mask.data<bool>() + r * len : nullptr;
        const T* added = mask.defined() && mask.dtype() != DType::Bool ? mask.data<T>() + r * len : nullptr;
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
  });
  return out_proj->forward(Variable(merged));  // (R, 1, D)
}

bool MultiheadAttention::can_fuse(const Tensor& kpm, const Tensor& attn_mask, bool need_weights) const {
  // Float masks would need to be added tile by tile; (B*H, L, S) masks are rare. Both stay unfused.
  const bool kpm_ok = !kpm.defined() || kpm.dtype() == DType::Bool;
  const bool mask_ok = !attn_mask.defined() || (attn_mask.dtype() == DType::Bool && attn_mask.ndim() == 2);
  return fused && !need_weights && !weights_observer && !weights_transform && !naive_softmax && kpm_ok && mask_ok;
}

AttentionResult MultiheadAttention::attend_rows(const Variable& q, const Variable& k, const Variable& v, const Tensor& kpm,
                                                const Tensor& attn_mask, bool need_weights) const {
  if (!can_fuse(kpm, attn_mask, need_weights))
    return attend(split_heads(q, num_heads), split_heads(k, kv_heads), split_heads(v, kv_heads), kpm, attn_mask, need_weights);
  check_masks(kpm, attn_mask, q.size(0), num_heads, q.size(1), k.size(1));
  if (weights_peek) peek_weights(q, k, kpm, attn_mask);
  AttentionResult r;
  r.output = out_proj->forward(fused_attention(q, k, v, fused_options(kpm, attn_mask)));  // (B, L, D): heads come out merged
  return r;
}

FusedAttentionOptions MultiheadAttention::fused_options(const Tensor& kpm, const Tensor& attn_mask) const {
  FusedAttentionOptions o;
  o.heads = num_heads, o.kv_heads = kv_heads, o.scale = score_scale;
  o.key_padding_mask = kpm, o.attn_mask = attn_mask;
  // As attn_dropout->forward() would: numbers are drawn only in training with p > 0.
  o.dropout_p = attn_dropout->is_training() ? attn_dropout->p : 0.0;
  o.gen = &default_generator();
  return o;
}

AttentionResult MultiheadAttention::forward(const Variable& query, const Variable& key, const Variable& value, const Tensor& kpm,
                                            const Tensor& attn_mask, bool need_weights) const {
  const int64_t D = embed_dim;
  check_input(query, D, "query");
  check_input(key, D, "key");
  check_input(value, D, "value");
  GF_CHECK(key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == value.size(1),
           "MultiheadAttention: query {}, key {} and value {} disagree in batch or key length", shape_str(query.shape()),
           shape_str(key.shape()), shape_str(value.shape()));
  Variable q, k, v;  // (B, L, D), (B, S, KV*d_k) x 2: heads not split, so the fused op reads them in place
  if (!grouped() && !sigma_reparam_ && query.impl() == key.impl() && key.impl() == value.impl()) {
    Variable qkv = linear(query, in_proj_weight, in_proj_bias);  // (B, L, 3D): one GEMM for self-attention
    if (can_fuse(kpm, attn_mask, need_weights)) {  // one gradient tensor for the three projections
      const int64_t B = query.size(0), L = query.size(1);
      check_masks(kpm, attn_mask, B, num_heads, L, L);
      if (weights_peek) peek_weights(narrow(qkv, -1, 0, D), narrow(qkv, -1, D, D), kpm, attn_mask);
      AttentionResult r;
      r.output = out_proj->forward(fused_self_attention(qkv, fused_options(kpm, attn_mask)));  // (B, L, D)
      return r;
    }
    q = narrow(qkv, -1, 0, D);
    k = narrow(qkv, -1, D, D);
    v = narrow(qkv, -1, 2 * D, D);
  } else if (key.impl() == value.impl()) {
    q = q_rows(query);
    std::tie(k, v) = kv_rows(key);
  } else if (grouped() && !sigma_reparam_) {
    q = q_rows(query);
    k = k_proj->forward(key);
    v = v_proj->forward(value);
  } else {
    q = q_rows(query);
    k = linear(key, projection_weight(1), raw_bias(1));
    v = linear(value, projection_weight(2), raw_bias(2));
  }
  return attend_rows(q, k, v, kpm, attn_mask, need_weights);
}

}  // namespace gf::nn

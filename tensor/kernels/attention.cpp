#include "tensor/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/bf16_tile.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/small_gemm.h"
#include "tensor/kernels/softmax.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// The tiles are kept below OpenBLAS's multithreading threshold (m*n*k < 65536 * 4, see
// kSmallGemmWork in matmul.cpp): every BLAS call then runs on the TBB thread that makes it, so the
// two thread pools never oversubscribe the cores.
constexpr int64_t kSingleThreadGemm = 65536 * 4;
constexpr int64_t kDefaultBlock = 64;
// A head whose queries and keys are both at most this many (every sentence of Multi30k's batches
// but the longest) takes the one-tile path: its whole (L, S) scores in one tile, multiplied by
// small_gemm on operands packed once per head. Tests that choose their own blocks take the tiled
// path, which is this path's reference.
constexpr int64_t kOneTile = 64;

// A tile's rows are stored `width(nk)` apart, nk rounded up to 16 (a 512-bit vector of floats):
// the element-wise passes then run whole vectors over the padding too, instead of a scalar tail
// (a 30-key tile was half tail). The padding is blocked (live 0), so it holds -inf, then 0, in the
// forward; it is never read by a product (their k or n is nk) nor summed (lane_sum runs to nk).
// These 16 are for speed alone: lane_sum's own 16 lanes (softmax.h) fix the order of its sums, so
// its bits, and do not depend on this padding.
constexpr int64_t kLanes = 16;
int64_t width(int64_t nk) { return (nk + kLanes - 1) / kLanes * kLanes; }

// C (m, n) = alpha * op(A) @ op(B) + beta * C, row-major with leading dims. Counted in
// gemm_flops() unless it is the backward's recomputation of the scores, which the model's FLOP
// count (bench's model_gflops_per_s) leaves out. Operands of the scores' type T go to BLAS; under
// bf16 (an operand is bfloat16: Q, K, V and dO are, the float tiles P and dS are rounded while
// packed) to the tiles of bf16_tile.h (vdpbf16ps, or sgemm on the portable path).
template <bool Count = true, class T, class X, class Y>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const X* a, int64_t lda, const Y* b, int64_t ldb, T beta, T* c,
          int64_t ldc, TileWorkspace& ws) {
  if (m == 0 || n == 0 || k == 0) return;  // callers never ask for an empty inner dim with beta 0
  if constexpr (Count) count_gemm_flops(static_cast<uint64_t>(2 * m * n * k));
  if constexpr (std::is_same_v<X, T> && std::is_same_v<Y, T>)
    blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    tile_gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws);
}

// A (B, len, heads*d_k) operand read in place: element (b, l, head, d) at b*sb + l*sl + head*dk + d.
template <class T>
struct Rows {
  T* p = nullptr;
  int64_t sb = 0, sl = 0, dk = 0;
  T* at(int64_t b, int64_t l, int64_t head) const { return p + b * sb + l * sl + head * dk; }
};

template <class T>
Rows<T> rows_of(const Tensor& t, int64_t dk) {
  return {static_cast<T*>(t.storage()->data()) + t.offset(), t.strides()[0], t.strides()[1], dk};
}

// Everything a tile needs: shapes, operands, masks, dropout. T is the scores' type; In the
// operands' (T, or bfloat16 under bf16 with T float).
template <class T, class In = T>
struct Ctx {
  int64_t B = 0, L = 0, S = 0, H = 0, KV = 0, G = 1, dk = 0, bq = 0, bk = 0;
  Rows<In> q, k, v;
  const bool* kpm = nullptr;  // (B, S) or null
  const bool* am = nullptr;   // (L, S) or null
  T scale = 1;
  double p = 0;           // dropout probability; 0 = no dropout
  uint64_t keep_from = 0;  // keep_threshold(p): an element is kept when keeps(bits, keep_from)
  T drop_scale = 1;       // 1 / (1 - p), 0 when p == 1 (as dropout())
  const Generator* gen = nullptr;
  uint64_t base = 0;
  bool one_tile = false;  // every head's queries and keys fit one tile: the one-tile path (below)
};

// live[r*wk + c] = 1 where query l0 + r may see key s0 + c (c < nk; 0 in the padding up to
// wk = width(nk)). Returns whether any may. One loop per kind of mask, each of which vectorises (a
// loop testing for each mask per element did not).
template <class C>
bool tile_mask(const C& c, int64_t b, int64_t l0, int64_t n, int64_t s0, int64_t nk, int64_t wk, uint8_t* live) {
  // Masks read as bytes (bool is stored as 0 or 1): GCC vectorises negation on bytes, not on bool.
  const uint8_t* kr = c.kpm ? reinterpret_cast<const uint8_t*>(c.kpm) + b * c.S + s0 : nullptr;  // the same for every row
  uint8_t any = 0;
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* lr = live + r * wk;
    const uint8_t* ar = c.am ? reinterpret_cast<const uint8_t*>(c.am) + (l0 + r) * c.S + s0 : nullptr;
    if (kr && ar)
      for (int64_t j = 0; j < nk; ++j) lr[j] = static_cast<uint8_t>(1 ^ (kr[j] | ar[j]));
    else if (kr)
      for (int64_t j = 0; j < nk; ++j) lr[j] = static_cast<uint8_t>(1 ^ kr[j]);
    else if (ar)
      for (int64_t j = 0; j < nk; ++j) lr[j] = static_cast<uint8_t>(1 ^ ar[j]);
    else
      std::fill(lr, lr + nk, uint8_t{1});
    for (int64_t j = 0; j < nk; ++j) any |= lr[j];
    std::fill(lr + nk, lr + wk, uint8_t{0});
  }
  return any != 0;
}

// Multiplies the tile (rows wk apart) by dropout's factor (1/(1-p) kept, 0 dropped), drawn as
// keep_mask() would for element (b, h, l0 + r, s0 + j) of a (B, H, L, S) tensor. x2, when given,
// is multiplied by the same factors (the backward's P and dP): one draw each. The draws and the
// products are two loops over a row, each of which vectorises; keep (wk bytes) holds a row's
// decisions. The padding's draws (other elements' numbers) only multiply its unused entries.
template <class C, class T>
void drop_tile(const C& c, int64_t b, int64_t h, int64_t l0, int64_t n, int64_t s0, int64_t wk, uint8_t* keep, T* x,
               T* x2 = nullptr) {
  const Generator gen = *c.gen;  // locals: a load through c inside the loop keeps it scalar
  const uint64_t keep_from = c.keep_from;
  const T drop_scale = c.drop_scale;
  const auto scale_row = [&](T* xr) {  // (wk,)
    for (int64_t j = 0; j < wk; ++j) xr[j] *= drop_scale * static_cast<T>(keep[j]);  // the factor: drop_scale or 0
  };
  for (int64_t r = 0; r < n; ++r) {
    const uint64_t row = c.base + static_cast<uint64_t>(((b * c.H + h) * c.L + l0 + r) * c.S + s0);
    for (int64_t j = 0; j < wk; ++j) keep[j] = keeps(gen.at(row + j), keep_from);
    scale_row(x + r * wk);
    if (x2) scale_row(x2 + r * wk);
  }
}

// Per-task buffers: one tile of scores, one of dP, the output accumulator and row statistics.
template <class T>
struct Scratch {
  std::vector<T> s, dp, pd, acc;
  std::vector<uint8_t> live, keep;
  std::vector<T> m;
  std::vector<double> sum;
  TileWorkspace tiles;  // packed operands of the bf16 tiles
  Scratch(int64_t bq, int64_t bk, int64_t dk)
      : s(bq * width(bk)), dp(bq * width(bk)), pd(bq * width(bk)), acc(bq * dk), live(bq * width(bk)), keep(width(bk)), m(bq), sum(bq) {}
};

// One key tile of the online softmax: S (n, nk; rows wk apart) becomes exp(S - new max) in place
// (0 where blocked and in the padding), each row's running sum and accumulator are rescaled to the
// new max.
template <class T>
void online_update(int64_t n, int64_t nk, int64_t wk, int64_t dk, Scratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    T* sr = w.s.data() + r * wk;
    const uint8_t* lr = w.live.data() + r * wk;
    // Separate passes (block, max, exp, sum): each vectorises, and the max skips NaN as one loop would.
    for (int64_t j = 0; j < wk; ++j) sr[j] = lr[j] ? sr[j] : kNegInf;
    const T tile_max = row_max(sr, wk);
    const T mx = tile_max > w.m[r] ? tile_max : w.m[r];
    if (mx == kNegInf) {  // no key of this row seen yet: exp(-inf - -inf) would be NaN
      std::fill(sr, sr + wk, T(0));
      continue;
    }
    const T alpha = fast::exp(w.m[r] - mx);  // 0 for the row's first live tile (m = -inf)
    for (int64_t j = 0; j < wk; ++j) sr[j] = fast::exp(sr[j] - mx);
    const double add = lane_sum(nk, [&](int64_t j) { return sr[j]; });  // to nk: the sum's order is the unpadded one
    w.sum[r] = w.sum[r] * static_cast<double>(alpha) + add;
    if (alpha != T(1))
      for (int64_t d = 0; d < dk; ++d) w.acc[r * dk + d] *= alpha;
    w.m[r] = mx;
  }
}

// The output rows [l0, l0 + n) of head h for batch b: every key tile in turn, then normalised.
template <class T, class In>
void forward_block(const Ctx<T, In>& c, int64_t b, int64_t h, int64_t l0, T* out, T* lse, bfloat16* out_b, Scratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t n = std::min(c.bq, c.L - l0), dk = c.dk, kvh = h / c.G;
  std::fill(w.acc.begin(), w.acc.begin() + n * dk, T(0));
  std::fill(w.m.begin(), w.m.begin() + n, kNegInf);
  std::fill(w.sum.begin(), w.sum.begin() + n, 0.0);
  for (int64_t s0 = 0; s0 < c.S; s0 += c.bk) {
    const int64_t nk = std::min(c.bk, c.S - s0), wk = width(nk);
    if (!tile_mask(c, b, l0, n, s0, nk, wk, w.live.data())) continue;  // e.g. above the causal diagonal
    gemm(false, true, n, nk, dk, c.scale, c.q.at(b, l0, h), c.q.sl, c.k.at(b, s0, kvh), c.k.sl, T(0), w.s.data(), wk, w.tiles);
    online_update(n, nk, wk, dk, w);
    if (c.p > 0) drop_tile(c, b, h, l0, n, s0, wk, w.keep.data(), w.s.data());
    gemm(false, false, n, dk, nk, T(1), w.s.data(), wk, c.v.at(b, s0, kvh), c.v.sl, T(1), w.acc.data(), dk, w.tiles);
  }
  for (int64_t r = 0; r < n; ++r) {
    T* o = out + ((b * c.L + l0 + r) * c.H + h) * dk;
    T* e = lse + (b * c.H + h) * c.L + l0 + r;
    if (w.m[r] == kNegInf) {  // every key blocked: weights 0, as softmax() gives
      std::fill(o, o + dk, T(0));
      *e = kNegInf;
      continue;
    }
    const T inv = static_cast<T>(1.0 / w.sum[r]);
    for (int64_t d = 0; d < dk; ++d) o[d] = w.acc[r * dk + d] * inv;
    *e = w.m[r] + static_cast<T>(std::log(w.sum[r]));
  }
  if constexpr (std::is_same_v<T, float>)
    if (out_b)
      for (int64_t r = 0; r < n; ++r) {
        const int64_t at = ((b * c.L + l0 + r) * c.H + h) * dk;
        to_bf16(out + at, out_b + at, dk);
      }
}

// P (n, nk; rows wk apart) = exp(S - lse) recomputed from the scores in w.s, 0 where blocked
// (the padding too) or the row is.
template <class T>
void recompute_probs(int64_t n, int64_t wk, const T* lse, Scratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < n; ++r) {
    T* sr = w.s.data() + r * wk;
    const uint8_t* lr = w.live.data() + r * wk;
    if (lse[r] == kNegInf) {
      std::fill(sr, sr + wk, T(0));
      continue;
    }
    // exp of every entry, then 0 where blocked: a select after the arithmetic vectorises.
    const T shift = lse[r];
    for (int64_t j = 0; j < wk; ++j) {
      const T e = fast::exp(sr[j] - shift);
      sr[j] = lr[j] ? e : T(0);
    }
  }
}

// Under bf16 a head whose queries and keys fit one tile (a batch of sentences up to 32 tokens at
// d_k 64: most of Multi30k's) gets D inside its one backward_tile, from the products that tile
// makes anyway: the same bits as row_sums_of_p_dp, without making them twice.
template <class T, class In>
bool d_in_tile(const Ctx<T, In>& c) {
  return !std::is_same_v<In, T> && c.L <= c.bq && c.S <= c.bk;
}

// D[l0 + r] += rowsum(P * dP) over one tile: P in w.s, dP (with dropout's factor) in w.dp.
template <class T>
void add_row_sums_of_p_dp(int64_t n, int64_t nk, int64_t wk, int64_t l0, T* D, const Scratch<T>& w) {
  for (int64_t r = 0; r < n; ++r) {
    const T *pr = w.s.data() + r * wk, *dpr = w.dp.data() + r * wk;
    D[l0 + r] += static_cast<T>(lane_sum(nk, [&](int64_t j) { return pr[j] * dpr[j]; }));
  }
}

// One (query tile, key tile) pair of the backward (FlashAttention-2): dV += Pd^T dO,
// dS = P * (dP - D), dK += scale dS^T Q, dQ += scale dS K, with Pd = P * dropout factor and
// dP = (dO V^T) * dropout factor. g is dO as the products read it (In). Where d_in_tile(c), D is
// made here from this tile's P and dP, as row_sums_of_p_dp would make it from the same products.
template <class T, class In>
void backward_tile(const Ctx<T, In>& c, const Rows<In>& g, const T* lse, T* D, int64_t b, int64_t h, int64_t l0, int64_t s0,
                   const Rows<T>& dq, const Rows<T>& dkk, const Rows<T>& dvv, Scratch<T>& w) {
  const int64_t n = std::min(c.bq, c.L - l0), nk = std::min(c.bk, c.S - s0), wk = width(nk), dk = c.dk, kvh = h / c.G;
  if (!tile_mask(c, b, l0, n, s0, nk, wk, w.live.data())) return;
  gemm<false>(false, true, n, nk, dk, c.scale, c.q.at(b, l0, h), c.q.sl, c.k.at(b, s0, kvh), c.k.sl, T(0), w.s.data(), wk, w.tiles);
  recompute_probs(n, wk, lse + (b * c.H + h) * c.L + l0, w);
  gemm(false, true, n, nk, dk, T(1), g.at(b, l0, h), g.sl, c.v.at(b, s0, kvh), c.v.sl, T(0), w.dp.data(), wk, w.tiles);
  const T* pd = w.s.data();
  if (c.p > 0) {
    std::copy(w.s.begin(), w.s.begin() + n * wk, w.pd.begin());
    drop_tile(c, b, h, l0, n, s0, wk, w.keep.data(), w.pd.data(), w.dp.data());
    pd = w.pd.data();
  }
  gemm(true, false, nk, dk, n, T(1), pd, wk, g.at(b, l0, h), g.sl, T(1), dvv.at(b, s0, kvh), dvv.sl, w.tiles);
  if (d_in_tile(c)) {
    std::fill(D + l0, D + l0 + n, T(0));
    add_row_sums_of_p_dp(n, nk, wk, l0, D, w);
  }
  for (int64_t r = 0; r < n; ++r) {
    const T dr = D[l0 + r];
    for (int64_t j = 0; j < wk; ++j) w.dp[r * wk + j] = w.s[r * wk + j] * (w.dp[r * wk + j] - dr);
  }
  gemm(true, false, nk, dk, n, c.scale, w.dp.data(), wk, c.q.at(b, l0, h), c.q.sl, T(1), dkk.at(b, s0, kvh), dkk.sl, w.tiles);
  gemm(false, false, n, dk, nk, c.scale, w.dp.data(), wk, c.k.at(b, s0, kvh), c.k.sl, T(1), dq.at(b, l0, h), dq.sl, w.tiles);
}

// Under bf16, D = rowsum(P * dP) (dP with dropout's factor) from the very tiles the backward
// multiplies: P recomputed, dP from the bfloat16 dO and V. The identity rowsum(P * dP) =
// rowsum(dO * O) that lets FlashAttention-2 take D from O holds only when O and dP come from the
// same operands; O came from rounded P and V, so the two differ by about u |dO| |O|. dS = P (dP - D)
// subtracts nearly equal numbers, which turns that difference into a large error in dS (measured:
// 4x PyTorch autocast's error in a decoder's gradients) and gives the key bias, whose gradient the
// softmax makes exactly 0, one of that size. Costs the tiles' Q K^T and dO V^T once more (not
// counted in gemm_flops(), as the scores' recomputation is not).
template <class T, class In>
void row_sums_of_p_dp(const Ctx<T, In>& c, const Rows<In>& g, const T* lse, int64_t b, int64_t h, T* D, Scratch<T>& w) {
  std::fill(D, D + c.L, T(0));
  const int64_t kvh = h / c.G;
  for (int64_t l0 = 0; l0 < c.L; l0 += c.bq)
    for (int64_t s0 = 0; s0 < c.S; s0 += c.bk) {  // key tiles in order: the sums' order is fixed
      const int64_t n = std::min(c.bq, c.L - l0), nk = std::min(c.bk, c.S - s0), wk = width(nk);
      if (!tile_mask(c, b, l0, n, s0, nk, wk, w.live.data())) continue;
      gemm<false>(false, true, n, nk, c.dk, c.scale, c.q.at(b, l0, h), c.q.sl, c.k.at(b, s0, kvh), c.k.sl, T(0), w.s.data(), wk, w.tiles);
      recompute_probs(n, wk, lse + (b * c.H + h) * c.L + l0, w);
      gemm<false>(false, true, n, nk, c.dk, T(1), g.at(b, l0, h), g.sl, c.v.at(b, s0, kvh), c.v.sl, T(0), w.dp.data(), wk, w.tiles);
      if (c.p > 0) drop_tile(c, b, h, l0, n, s0, wk, w.keep.data(), w.dp.data());
      add_row_sums_of_p_dp(n, nk, wk, l0, D, w);
    }
}

// All gradients of batch b's key/value head kvh and its G query heads, in a fixed order: the
// task owns its slices of dQ, dK and dV, so results do not depend on the thread count. g is dO
// (T: D = rowsum(dO * O) stays in T), gp the same as the products read it (In).
template <class T, class In>
void backward_task(const Ctx<T, In>& c, const Rows<T>& g, const Rows<In>& gp, const Rows<T>& o, const T* lse, int64_t b, int64_t kvh,
                   const Rows<T>& dq, const Rows<T>& dkk, const Rows<T>& dvv, Scratch<T>& w, std::vector<T>& D) {
  for (int64_t gi = 0; gi < c.G; ++gi) {
    const int64_t h = kvh * c.G + gi;
    if constexpr (!std::is_same_v<In, T>) {
      if (!d_in_tile(c)) row_sums_of_p_dp(c, gp, lse, b, h, D.data() + gi * c.L, w);
      continue;
    }
    for (int64_t l = 0; l < c.L; ++l) {  // D = rowsum(dO * O)
      const T *gr = g.at(b, l, h), *orow = o.at(b, l, h);
      D[gi * c.L + l] = static_cast<T>(lane_sum(c.dk, [&](int64_t d) { return gr[d] * orow[d]; }));
    }
  }
  for (int64_t s0 = 0; s0 < c.S; s0 += c.bk)
    for (int64_t gi = 0; gi < c.G; ++gi)
      for (int64_t l0 = 0; l0 < c.L; l0 += c.bq)
        backward_tile(c, gp, lse, D.data() + gi * c.L, b, kvh * c.G + gi, l0, s0, dq, dkk, dvv, w);
}

// ---- The one-tile path: a head's whole (L, S) scores in one tile ----
// Every product of a head is small (14 x 14 x 64 at Multi30k's lengths): it runs on small_gemm,
// without a library call, on operands packed once per head: K and V transposed (d_k, wk) for the
// products that read them across keys, and under bf16 each bfloat16 operand widened to float32
// once (exactly; the float32 tiles P and dS are rounded to bfloat16 values before they are
// multiplied, so every product still takes bfloat16 operands and sums in float32). The mask,
// softmax and dropout of a row run while the row is in cache, with no running max to rescale. The
// tiled path (forward_block, backward_task) is its reference: the same arithmetic but for the
// order of the products' sums.

// Buffers of one task, sized for a whole head.
template <class T>
struct HeadScratch {
  std::vector<T> s, dp, pd, acc, kt, vt, qf, kf, vf, gf, D, m;
  std::vector<double> sum;
  std::vector<uint8_t> live, keep;
  HeadScratch(int64_t L, int64_t S, int64_t dk)
      : s(L * width(S)), dp(L * width(S)), pd(L * width(S)), acc(L * dk), kt(dk * width(S)), vt(dk * width(S)), qf(L * dk), kf(S * dk),
        vf(S * dk), gf(L * dk), D(L), m(L), sum(L), live(L * width(S)), keep(width(S)) {}
};

// Rows [0, n) of head `head` of x as T rows ld apart: in place when In is T, else widened into buf.
template <class T, class In>
const T* rows_as(const Rows<In>& x, int64_t b, int64_t head, int64_t n, std::vector<T>& buf, int64_t& ld) {
  if constexpr (std::is_same_v<In, T>) {
    ld = x.sl;
    return x.at(b, 0, head);
  } else {
    for (int64_t r = 0; r < n; ++r) {
      const In* src = x.at(b, r, head);
      T* dst = buf.data() + r * x.dk;
      for (int64_t d = 0; d < x.dk; ++d) dst[d] = static_cast<T>(src[d]);
    }
    ld = x.dk;
    return buf.data();
  }
}

// Head `head` of x's rows [0, nk) transposed: dst (d_k, wk), dst[d * wk + j] = x[j][d], 0 for j >= nk.
template <class T, class In>
void pack_transposed(const Rows<In>& x, int64_t b, int64_t head, int64_t nk, int64_t wk, T* dst) {
  kernels::pack_transposed(x.at(b, 0, head), x.sl, nk, x.dk, dst, wk);
}

// A float32 row rounded to bfloat16 values in place (as the bf16 tiles round P and dS when they
// pack them); float64 and float32 under fp32 are left as they are.
template <class T, class In>
void round_row(T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float> && !std::is_same_v<In, T>) {
    bfloat16 tmp[kOneTile];
    to_bf16(x, tmp, n);
    for (int64_t j = 0; j < n; ++j) x[j] = static_cast<float>(tmp[j]);
  }
}

// Blocked entries (live 0, the padding too) of a row set to -inf, and the row's max; 16 lanes.
template <class T>
T masked_max(T* sr, const uint8_t* lr, int64_t wk) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T mx[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) mx[l] = kNegInf;
  for (int64_t j = 0; j < wk; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      const T v = lr[j + l] ? sr[j + l] : kNegInf;
      sr[j + l] = v;
      mx[l] = v > mx[l] ? v : mx[l];
    }
  T m = kNegInf;
  for (int64_t l = 0; l < kLanes; ++l) m = mx[l] > m ? mx[l] : m;
  return m;
}

// P = exp(S - lse) over a row of the tile, 0 where blocked: two loops, the exp over one array and
// then the select, because with both in one loop GCC ran the (16-entry) row's loop unvectorised. A
// blocked entry's exp may overflow to inf; the select replaces it, nothing multiplies it.
template <class T>
void probs_row(T* __restrict s, const uint8_t* __restrict live, T shift, int64_t wk) {
  for (int64_t j = 0; j < wk; ++j) s[j] = fast::exp(s[j] - shift);
  for (int64_t j = 0; j < wk; ++j) s[j] = live[j] ? s[j] : T(0);
}

// The forward of head h of batch b: every query row and key in one tile.
template <class T, class In>
void forward_head(const Ctx<T, In>& c, int64_t b, int64_t h, T* out, T* lse, bfloat16* out_b, HeadScratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t n = c.L, nk = c.S, wk = width(nk), dk = c.dk, kvh = h / c.G;
  T* o0 = out + (b * c.L * c.H + h) * dk;  // row r at o0 + r * H * dk
  T* e = lse + (b * c.H + h) * c.L;
  if (nk == 0 || !tile_mask(c, b, 0, n, 0, nk, wk, w.live.data())) {  // every key blocked: weights 0, as softmax() gives
    for (int64_t r = 0; r < n; ++r) std::fill(o0 + r * c.H * dk, o0 + r * c.H * dk + dk, T(0)), e[r] = kNegInf;
  } else {
    int64_t ldq = 0, ldv = 0;
    const T* qa = rows_as(c.q, b, h, n, w.qf, ldq);        // (n, d_k)
    const T* va = rows_as(c.v, b, kvh, nk, w.vf, ldv);     // (nk, d_k)
    pack_transposed(c.k, b, kvh, nk, wk, w.kt.data());     // (d_k, wk)
    count_gemm_flops(static_cast<uint64_t>(4 * n * nk * dk));  // S and P V, as the tiled path counts them
    small_gemm(n, wk, dk, c.scale, qa, ldq, int64_t{1}, w.kt.data(), wk, T(0), w.s.data(), wk);  // S (n, wk): 0 in the padding
    for (int64_t r = 0; r < n; ++r) {  // mask, softmax and dropout while the row is in cache
      T* sr = w.s.data() + r * wk;
      const T mx = masked_max(sr, w.live.data() + r * wk, wk);
      w.m[r] = mx;
      if (mx == kNegInf) {  // every key of this row blocked
        std::fill(sr, sr + wk, T(0));
        continue;
      }
      // Whole vectors: blocked entries and the padding (-inf) give 0, which the sum's 16 lanes add
      // without a scalar tail (the tiled path sums to nk: the same terms, in another order).
      for (int64_t j = 0; j < wk; ++j) sr[j] = fast::exp(sr[j] - mx);
      w.sum[r] = lane_sum(wk, [&](int64_t j) { return sr[j]; });
      if (c.p > 0) drop_tile(c, b, h, r, 1, 0, wk, w.keep.data(), sr);
      round_row<T, In>(sr, wk);
    }
    small_gemm(n, dk, nk, T(1), w.s.data(), wk, int64_t{1}, va, ldv, T(0), w.acc.data(), dk);  // P V (n, d_k)
    for (int64_t r = 0; r < n; ++r) {
      T* o = o0 + r * c.H * dk;
      if (w.m[r] == kNegInf) {
        std::fill(o, o + dk, T(0));
        e[r] = kNegInf;
        continue;
      }
      const T inv = static_cast<T>(1.0 / w.sum[r]);
      for (int64_t d = 0; d < dk; ++d) o[d] = w.acc[r * dk + d] * inv;
      e[r] = w.m[r] + static_cast<T>(std::log(w.sum[r]));
    }
  }
  if constexpr (std::is_same_v<T, float>)
    if (out_b)
      for (int64_t r = 0; r < n; ++r) {
        const int64_t at = ((b * c.L + r) * c.H + h) * dk;
        to_bf16(out + at, out_b + at, dk);
      }
}

// The backward of batch b's key/value head kvh and its G query heads, every head in one tile, in
// the tiled path's order (query heads in turn, adding into dK and dV).
template <class T, class In>
void backward_heads(const Ctx<T, In>& c, const Rows<T>& g, const Rows<In>& gp, const Rows<T>& o, const T* lse_all, int64_t b, int64_t kvh,
                    const Rows<T>& dq, const Rows<T>& dkk, const Rows<T>& dvv, HeadScratch<T>& w) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t n = c.L, nk = c.S, wk = width(nk), dk = c.dk;
  if (nk == 0 || !tile_mask(c, b, 0, n, 0, nk, wk, w.live.data())) return;  // every weight 0: so are the gradients
  int64_t ldk = 0;
  const T* ka = rows_as(c.k, b, kvh, nk, w.kf, ldk);  // (nk, d_k), for dQ
  pack_transposed(c.k, b, kvh, nk, wk, w.kt.data());   // (d_k, wk), for S
  pack_transposed(c.v, b, kvh, nk, wk, w.vt.data());   // (d_k, wk), for dP
  for (int64_t gi = 0; gi < c.G; ++gi) {
    const int64_t h = kvh * c.G + gi;
    const T* lse = lse_all + (b * c.H + h) * c.L;
    int64_t ldq = 0, ldg = 0;
    const T* qa = rows_as(c.q, b, h, n, w.qf, ldq);  // (n, d_k)
    const T* ga = rows_as(gp, b, h, n, w.gf, ldg);   // dO as the products read it (n, d_k)
    count_gemm_flops(static_cast<uint64_t>(8 * n * nk * dk));  // dP, dV, dK, dQ (the recomputed S is not counted)
    // Over wk columns: the padding's S and dP are 0 (K^T and V^T are 0 there), so every entry of the
    // rows below is a number and the padding adds exact zeros.
    small_gemm(n, wk, dk, c.scale, qa, ldq, int64_t{1}, w.kt.data(), wk, T(0), w.s.data(), wk);  // S
    small_gemm(n, wk, dk, T(1), ga, ldg, int64_t{1}, w.vt.data(), wk, T(0), w.dp.data(), wk);      // dP = dO V^T
    if constexpr (std::is_same_v<In, T>)
      for (int64_t r = 0; r < n; ++r) {  // D = rowsum(dO * O)
        const T *gr = g.at(b, r, h), *orow = o.at(b, r, h);
        w.D[r] = static_cast<T>(lane_sum(dk, [&](int64_t d) { return gr[d] * orow[d]; }));
      }
    for (int64_t r = 0; r < n; ++r) {  // P, dropout, D (bf16) and dS while the row is in cache
      T *sr = w.s.data() + r * wk, *dpr = w.dp.data() + r * wk, *pdr = w.pd.data() + r * wk;
      const uint8_t* lr = w.live.data() + r * wk;
      if (lse[r] == kNegInf) {  // a fully blocked row: zero weights, zero gradients
        std::fill(pdr, pdr + wk, T(0));
        std::fill(dpr, dpr + wk, T(0));
        continue;
      }
      probs_row(sr, lr, lse[r], wk);
      std::copy(sr, sr + wk, pdr);
      if (c.p > 0) drop_tile(c, b, h, r, 1, 0, wk, w.keep.data(), pdr, dpr);  // Pd = P Z, dP Z
      // Under bf16, D from this tile's P and dP (see row_sums_of_p_dp for why not from O).
      if constexpr (!std::is_same_v<In, T>) w.D[r] = static_cast<T>(lane_sum(wk, [&](int64_t j) { return sr[j] * dpr[j]; }));
      const T dr = w.D[r];
      for (int64_t j = 0; j < wk; ++j) dpr[j] = sr[j] * (dpr[j] - dr);  // dS
      round_row<T, In>(pdr, wk);
      round_row<T, In>(dpr, wk);
    }
    small_gemm(nk, dk, n, T(1), w.pd.data(), int64_t{1}, wk, ga, ldg, T(1), dvv.at(b, 0, kvh), dvv.sl);      // dV += Pd^T dO
    small_gemm(nk, dk, n, c.scale, w.dp.data(), int64_t{1}, wk, qa, ldq, T(1), dkk.at(b, 0, kvh), dkk.sl);  // dK += scale dS^T Q
    small_gemm(n, dk, nk, c.scale, w.dp.data(), wk, int64_t{1}, ka, ldk, T(1), dq.at(b, 0, h), dq.sl);      // dQ += scale dS K
  }
}

void check_operand(const Tensor& t, int64_t heads, const char* what, const Tensor& q) {
  GF_CHECK(t.defined() && t.ndim() == 3 && t.size(0) == q.size(0) && t.size(2) % heads == 0,
           "attention: {} {} must be (B, len, heads*d_k) with B = {} and {} heads", what,
           t.defined() ? shape_str(t.shape()) : std::string("undefined"), q.size(0), heads);
  check_same_dtype(q, t, "attention");
}

// The operand with unit stride in its last dim (a copy only when it has not).
Tensor unit_last(const Tensor& t) { return t.strides()[2] == 1 || t.size(2) <= 1 ? t : t.contiguous(); }

template <class T, class In>
Ctx<T, In> make_ctx(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionConfig& cfg, Tensor& kpm, Tensor& am) {
  Ctx<T, In> c;
  c.B = q.size(0), c.L = q.size(1), c.S = k.size(1), c.H = cfg.heads, c.KV = cfg.kv_heads, c.G = c.H / c.KV;
  c.dk = q.size(2) / c.H;
  c.q = rows_of<In>(q, c.dk), c.k = rows_of<In>(k, c.dk), c.v = rows_of<In>(v, c.dk);
  c.bq = cfg.block_q > 0 ? cfg.block_q : kDefaultBlock;
  c.bk = cfg.block_k > 0 ? cfg.block_k : kDefaultBlock;
  while (cfg.block_q <= 0 && c.bq > 8 && c.bq * c.bk * c.dk >= kSingleThreadGemm) c.bq /= 2;
  c.kpm = kpm.defined() ? kpm.data<bool>() : nullptr;
  c.am = am.defined() ? am.data<bool>() : nullptr;
  c.scale = static_cast<T>(cfg.scale);
  c.p = cfg.dropout_p;
  c.keep_from = keep_threshold(cfg.dropout_p);
  c.drop_scale = static_cast<T>(cfg.dropout_p >= 1.0 ? 0.0 : 1.0 / (1.0 - cfg.dropout_p));
  c.gen = &cfg.gen;
  c.base = cfg.dropout_base;
  c.one_tile = cfg.block_q <= 0 && cfg.block_k <= 0 && c.L <= kOneTile && c.S <= kOneTile;
  return c;
}

// The output's, the log-sum-exp's and the gradients' type: float32 for bfloat16 operands.
DType scores_dtype(DType operands) { return operands == DType::BFloat16 ? DType::Float32 : operands; }

// Checks shapes and masks; returns the masks dense.
void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionConfig& cfg, Tensor& kpm, Tensor& am) {
  GF_CHECK(q.defined() && q.ndim() == 3, "attention: q must be (B, L, H*d_k), got {}",
           q.defined() ? shape_str(q.shape()) : std::string("undefined"));
  GF_CHECK(cfg.heads > 0 && cfg.kv_heads > 0 && cfg.heads % cfg.kv_heads == 0 && q.size(2) % cfg.heads == 0,
           "attention: q {} with {} query heads and {} key/value heads", shape_str(q.shape()), cfg.heads, cfg.kv_heads);
  check_operand(k, cfg.kv_heads, "k", q);
  check_operand(v, cfg.kv_heads, "v", q);
  const int64_t dk = q.size(2) / cfg.heads;
  GF_CHECK(k.size(2) == cfg.kv_heads * dk && v.shape() == k.shape(),
           "attention: q {}, k {}, v {}: keys and values need {} heads of {} features, the same length", shape_str(q.shape()),
           shape_str(k.shape()), shape_str(v.shape()), cfg.kv_heads, dk);
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1);
  if (cfg.key_padding_mask.defined()) {
    check_dtype(cfg.key_padding_mask, DType::Bool, "attention: key_padding_mask");
    GF_CHECK(cfg.key_padding_mask.shape() == (Shape{B, S}), "attention: key_padding_mask must be ({}, {}), got {}", B, S,
             shape_str(cfg.key_padding_mask.shape()));
    kpm = cfg.key_padding_mask.contiguous();
  }
  if (cfg.attn_mask.defined()) {
    check_dtype(cfg.attn_mask, DType::Bool, "attention: attn_mask");
    GF_CHECK(cfg.attn_mask.shape() == (Shape{L, S}), "attention: attn_mask must be ({}, {}), got {}", L, S,
             shape_str(cfg.attn_mask.shape()));
    am = cfg.attn_mask.contiguous();
  }
  GF_CHECK(cfg.dropout_p >= 0.0 && cfg.dropout_p <= 1.0, "attention: dropout probability {} is outside [0, 1]", cfg.dropout_p);
}

}  // namespace

AttentionForward attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionConfig& cfg) {
  Tensor kpm, am;
  check_inputs(q_in, k_in, v_in, cfg, kpm, am);
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in);
  const int64_t B = q.size(0), L = q.size(1), H = cfg.heads;
  AttentionForward r;
  const DType out_type = scores_dtype(q.dtype());
  r.out = Tensor::empty(q.shape(), out_type);  // (B, L, H*d_k)
  r.lse = Tensor::empty({B, H, L}, out_type);  // (B, H, L)
  GF_CHECK(!cfg.out_bf16 || out_type == DType::Float32, "attention: a bfloat16 copy of the output needs a float32 output, got {}",
           dtype_name(out_type));
  if (cfg.out_bf16) r.out_bf16 = Tensor::empty(q.shape(), DType::BFloat16);  // (B, L, H*d_k)
  auto run = [&]<class T, class In>() {
    const Ctx<T, In> c = make_ctx<T, In>(q, k, v, cfg, kpm, am);
    const int64_t nqb = (L + c.bq - 1) / c.bq, tasks = B * H * nqb;
    T *out = r.out.data<T>(), *lse = r.lse.data<T>();
    bfloat16* out_b = cfg.out_bf16 ? r.out_bf16.data<bfloat16>() : nullptr;
    if (c.one_tile) {  // a task per head
      parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
        HeadScratch<T> w(c.L, c.S, c.dk);
        for (int64_t t = lo; t < hi; ++t) forward_head(c, t / H, t % H, out, lse, out_b, w);
      });
      return;
    }
    // A task is one block of queries of one head: a few tiles of work, so a grain of 1.
    parallel_for(tasks, 1, [&](int64_t lo, int64_t hi) {
      Scratch<T> w(c.bq, c.bk, c.dk);
      for (int64_t t = lo; t < hi; ++t) forward_block(c, t / (H * nqb), t / nqb % H, t % nqb * c.bq, out, lse, out_b, w);
    });
  };
  if (q.dtype() == DType::BFloat16)
    run.template operator()<float, bfloat16>();
  else
    dispatch_float(q.dtype(), "attention", [&]<class T>() { run.template operator()<T, T>(); });
  return r;
}

void attention_backward_into(const Tensor& g_in, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                             const Tensor& out, const Tensor& lse, const AttentionConfig& cfg, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) {
  Tensor kpm, am;
  check_inputs(q_in, k_in, v_in, cfg, kpm, am);
  // Under bf16 the backward makes D from its tiles and never reads the output: it may be undefined.
  const bool bf16 = q_in.dtype() == DType::BFloat16;
  GF_CHECK(out.defined() || bf16, "attention_backward: the output is needed for {} q", dtype_name(q_in.dtype()));
  GF_CHECK(g_in.shape() == q_in.shape() && (!out.defined() || out.shape() == q_in.shape()) && dq.shape() == q_in.shape() &&
               dk.shape() == k_in.shape() && dv.shape() == v_in.shape(),
           "attention_backward: gradient {}, output {} and destinations {}, {}, {} must match q {} and k {}",
           shape_str(g_in.shape()), out.defined() ? shape_str(out.shape()) : std::string("undefined"), shape_str(dq.shape()), shape_str(dk.shape()),
           shape_str(dv.shape()), shape_str(q_in.shape()), shape_str(k_in.shape()));
  const DType t = scores_dtype(q_in.dtype());
  for (const Tensor* d : {&g_in, &out, &lse, &dq, &dk, &dv})
    GF_CHECK(!d->defined() || d->dtype() == t, "attention_backward: the gradient, output, log-sum-exp and destinations must be {} for {} q, got {} {}",
             dtype_name(t), dtype_name(q_in.dtype()), dtype_name(d->dtype()), shape_str(d->shape()));
  for (const Tensor* d : {&dq, &dk, &dv})
    GF_CHECK(d->strides()[2] == 1, "attention_backward: a destination {} needs unit stride in its last dim", shape_str(d->shape()));
  const Tensor q = unit_last(q_in), k = unit_last(k_in), v = unit_last(v_in), g = unit_last(g_in);
  const Tensor o = out.defined() ? out.contiguous() : g, ls = lse.contiguous();  // (B, L, H*d_k) (not read under bf16), (B, H, L)
  // Under bf16 the products read dO rounded to bfloat16 once; D = rowsum(dO * O) reads it unrounded.
  const Tensor gp = q.dtype() == DType::BFloat16 ? to_bf16(g) : g;  // (B, L, H*d_k)
  auto run = [&]<class T, class In>() {
    const Ctx<T, In> c = make_ctx<T, In>(q, k, v, cfg, kpm, am);
    const Rows<T> gr = rows_of<T>(g, c.dk), orow = rows_of<T>(o, c.dk);
    const Rows<In> gpr = rows_of<In>(gp, c.dk);
    const Rows<T> rq = rows_of<T>(dq, c.dk), rk = rows_of<T>(dk, c.dk), rv = rows_of<T>(dv, c.dk);
    if (c.one_tile) {
      parallel_for(c.B * c.KV, 1, [&](int64_t lo, int64_t hi) {
        HeadScratch<T> w(c.L, c.S, c.dk);
        for (int64_t t = lo; t < hi; ++t) backward_heads(c, gr, gpr, orow, ls.data<T>(), t / c.KV, t % c.KV, rq, rk, rv, w);
      });
      return;
    }
    parallel_for(c.B * c.KV, 1, [&](int64_t lo, int64_t hi) {
      Scratch<T> w(c.bq, c.bk, c.dk);
      std::vector<T> D(c.G * c.L);
      for (int64_t t = lo; t < hi; ++t) backward_task(c, gr, gpr, orow, ls.data<T>(), t / c.KV, t % c.KV, rq, rk, rv, w, D);
    });
  };
  if (q.dtype() == DType::BFloat16)
    run.template operator()<float, bfloat16>();
  else
    dispatch_float(q.dtype(), "attention_backward", [&]<class T>() { run.template operator()<T, T>(); });
}

AttentionGrads attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const AttentionConfig& cfg) {
  AttentionGrads r;
  const DType t = scores_dtype(q.dtype());
  r.q = Tensor::zeros(q.shape(), t);  // (B, L, H*d_k)
  r.k = Tensor::zeros(k.shape(), t);  // (B, S, KV*d_k)
  r.v = Tensor::zeros(v.shape(), t);  // (B, S, KV*d_k)
  attention_backward_into(g, q, k, v, out, lse, cfg, r.q, r.k, r.v);
  return r;
}

}  // namespace gf::kernels

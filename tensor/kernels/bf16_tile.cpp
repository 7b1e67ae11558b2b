#include "tensor/kernels/bf16_tile.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/matmul.h"

namespace gf::kernels {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
namespace {

// 16 elements (fewer under `mask`) of a float or bfloat16 row as bfloat16 bits, 0 where masked off.
__m256i load16(const float* x, __mmask16 mask) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x))); }
__m256i load16(const bfloat16* x, __mmask16 mask) { return _mm256_maskz_loadu_epi16(mask, x); }

__mmask16 first(int64_t count) { return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1); }

// dst[j] = (x1[j] << 16) | x0[j] as bfloat16 bits, j < n: the pair of rows 2p and 2p + 1 (x1 null:
// zeros, for an odd k) at every column.
template <class X>
void interleave_rows(const X* x0, const X* x1, uint32_t* dst, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = first(n - j);
    // The maskz forms: GCC 12 warns on the plain ones' undefined pass-through operand.
    const __m512i lo = _mm512_maskz_cvtepu16_epi32(0xffff, load16(x0 + j, m));
    const __m512i hi = x1 ? _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, load16(x1 + j, m)), 16) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + j, m, _mm512_or_si512(lo, hi));
  }
}

// A row of k elements as kp = ceil(k / 2) pairs (an odd k's last pair padded with 0).
template <class X>
void row_pairs(const X* x, uint32_t* dst, int64_t k) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t j = 0; j < k; j += 16) {
    const __mmask16 m = first(k - j);
    _mm256_mask_storeu_epi16(d + j, m, load16(x + j, m));
  }
  if (k % 2) d[k] = 0;
}

// A packed as pairs along k: pair p of row r at a[r * rs + p * ps].
template <class X>
void pack_a(bool ta, int64_t m, int64_t k, const X* a, int64_t lda, std::vector<uint32_t>& buf, int64_t& rs, int64_t& ps) {
  const int64_t kp = (k + 1) / 2;
  buf.resize(static_cast<size_t>(m * kp));
  if (!ta) {  // rows run along k: each row's pairs are its own elements
    for (int64_t r = 0; r < m; ++r) row_pairs(a + r * lda, buf.data() + r * kp, k);
    rs = kp, ps = 1;
  } else {  // A^T stored: rows 2p and 2p + 1 of the stored matrix give pair p of every row
    for (int64_t p = 0; p < kp; ++p)
      interleave_rows(a + 2 * p * lda, 2 * p + 1 < k ? a + (2 * p + 1) * lda : nullptr, buf.data() + p * m, m);
    rs = 1, ps = m;
  }
}

// B packed for vdpbf16ps: pair p of column j at b[p * n16 + j], n16 = n rounded up to 16 (0 beyond n).
template <class X>
void pack_b(bool tb, int64_t n, int64_t k, const X* b, int64_t ldb, std::vector<uint32_t>& buf, int64_t n16) {
  const int64_t kp = (k + 1) / 2;
  buf.assign(static_cast<size_t>(kp * n16), 0u);
  if (!tb) {
    for (int64_t p = 0; p < kp; ++p)
      interleave_rows(b + 2 * p * ldb, 2 * p + 1 < k ? b + (2 * p + 1) * ldb : nullptr, buf.data() + p * n16, n);
  } else {  // B^T stored: column j is a stored row; its pairs go down column j of the packing
    uint32_t pairs[512];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p0 = 0; p0 < kp; p0 += 512) {
        const int64_t np = std::min<int64_t>(512, kp - p0);
        row_pairs(b + j * ldb + 2 * p0, pairs, std::min(2 * np, k - 2 * p0));
        for (int64_t p = 0; p < np; ++p) buf[(p0 + p) * n16 + j] = pairs[p];
      }
  }
}

// R rows x V vectors of 16 columns of C: sum over the kp pairs, then alpha * sum + beta * C for
// the first `cols` columns.
template <int R, int V>
void micro(int64_t kp, const uint32_t* a, int64_t rs, int64_t ps, const uint32_t* b, int64_t n16, float alpha, float beta, float* c,
           int64_t ldc, int64_t cols) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * n16 + 16 * v));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[r * rs + p * ps])));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if (16 * v >= cols) break;
      const __mmask16 m = first(cols - 16 * v);
      float* cr = c + r * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.0f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, cr), out);
      _mm512_mask_storeu_ps(cr, m, out);
    }
}

// Rows of C in blocks of R (12-16 accumulators: enough independent sums to hide vdpbf16ps's
// latency), the last few one at a time.
template <int R, int V>
void rows_of(int64_t m, int64_t kp, const uint32_t* a, int64_t rs, int64_t ps, const uint32_t* b, int64_t n16, float alpha, float beta,
             float* c, int64_t ldc, int64_t cols) {
  int64_t r = 0;
  for (; r + R <= m; r += R) micro<R, V>(kp, a + r * rs, rs, ps, b, n16, alpha, beta, c + r * ldc, ldc, cols);
  for (; r < m; ++r) micro<1, V>(kp, a + r * rs, rs, ps, b, n16, alpha, beta, c + r * ldc, ldc, cols);
}

// Packs both operands for vdpbf16ps, then 64 columns of C at a time.
template <class TA, class TB>
void tile_gemm_native(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b, int64_t ldb,
                      float beta, float* c, int64_t ldc, TileWorkspace& ws) {
  const int64_t kp = (k + 1) / 2, n16 = (n + 15) / 16 * 16;
  int64_t rs = 0, ps = 0;
  pack_a(ta, m, k, a, lda, ws.a, rs, ps);
  pack_b(tb, n, k, b, ldb, ws.b, n16);
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t cols = std::min<int64_t>(64, n - j0), vecs = (cols + 15) / 16;
    const uint32_t* bj = ws.b.data() + j0;
    float* cj = c + j0;
    switch (vecs) {
      case 1: rows_of<8, 1>(m, kp, ws.a.data(), rs, ps, bj, n16, alpha, beta, cj, ldc, cols); break;
      case 2: rows_of<6, 2>(m, kp, ws.a.data(), rs, ps, bj, n16, alpha, beta, cj, ldc, cols); break;
      case 3: rows_of<4, 3>(m, kp, ws.a.data(), rs, ps, bj, n16, alpha, beta, cj, ldc, cols); break;
      default: rows_of<4, 4>(m, kp, ws.a.data(), rs, ps, bj, n16, alpha, beta, cj, ldc, cols); break;
    }
  }
}

}  // namespace

#else
namespace {

template <class TA, class TB>
void tile_gemm_native(bool, bool, int64_t, int64_t, int64_t, float, const TA*, int64_t, const TB*, int64_t, float, float*, int64_t,
                      TileWorkspace&) {
  GF_FAIL_AS(std::logic_error, "tile_gemm_bf16: the native path was chosen in a build without AVX512-BF16");
}

}  // namespace
#endif

namespace {

// The stored (rows, cols) of an operand rounded to bfloat16 (as bfloat16(float): the bits
// vcvtneps2bf16 gives), as float32, contiguous.
template <class X>
void rounded(int64_t rows, int64_t cols, const X* x, int64_t ld, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(bfloat16(static_cast<float>(x[r * ld + c])));
}

template <class TA, class TB>
void tile_gemm_portable(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b,
                        int64_t ldb, float beta, float* c, int64_t ldc, TileWorkspace& ws) {
  rounded(ta ? k : m, ta ? m : k, a, lda, ws.fa);  // (m, k) or, read transposed, (k, m)
  rounded(tb ? n : k, tb ? k : n, b, ldb, ws.fb);  // (k, n) or, read transposed, (n, k)
  blas_gemm(ta, tb, m, n, k, alpha, ws.fa.data(), ta ? m : k, ws.fb.data(), tb ? k : n, beta, c, ldc);
}

}  // namespace

template <class TA, class TB>
void tile_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b, int64_t ldb,
                    float beta, float* c, int64_t ldc, TileWorkspace& ws) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta != 0.0f ? beta * c[i * ldc + j] : 0.0f;
    return;
  }
  if (bf16_path() == Bf16Path::Native)
    tile_gemm_native(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws);
  else
    tile_gemm_portable(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ws);
}

template <class TA, class TB>
void tile_gemm_bf16_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b,
                              int64_t ldb, float beta, float* c, int64_t ldc) {
  auto rounded = [](auto x) { return static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(x)))); };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += rounded(ta ? a[p * lda + i] : a[i * lda + p]) * rounded(tb ? b[j * ldb + p] : b[p * ldb + j]);
      float& out = c[i * ldc + j];
      out = static_cast<float>(alpha * sum + (beta != 0.0f ? static_cast<double>(beta) * out : 0.0));
    }
}

#define GF_TILE_INSTANCES(TA, TB)                                                                                                  \
  template void tile_gemm_bf16<TA, TB>(bool, bool, int64_t, int64_t, int64_t, float, const TA*, int64_t, const TB*, int64_t, float, \
                                       float*, int64_t, TileWorkspace&);                                                           \
  template void tile_gemm_bf16_reference<TA, TB>(bool, bool, int64_t, int64_t, int64_t, float, const TA*, int64_t, const TB*, int64_t, \
                                                 float, float*, int64_t);
GF_TILE_INSTANCES(float, float)
GF_TILE_INSTANCES(float, bfloat16)
GF_TILE_INSTANCES(bfloat16, float)
GF_TILE_INSTANCES(bfloat16, bfloat16)
#undef GF_TILE_INSTANCES

}  // namespace gf::kernels

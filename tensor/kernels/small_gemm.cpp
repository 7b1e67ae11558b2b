#include "tensor/kernels/small_gemm.h"

#include <algorithm>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace gf::kernels {
namespace {

// Any T, any build: one running sum per element, in order of p.
template <class T>
void plain(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rs, int64_t cs, const T* b, int64_t ldb, T beta, T* c,
           int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    T* cr = c + r * ldc;
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[r * rs + p * cs] * b[p * ldb + j];
      cr[j] = beta != T(0) ? alpha * acc + beta * cr[j] : alpha * acc;
    }
  }
}

#if defined(__AVX512F__)

__mmask16 first(int64_t count) { return count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1); }

// R rows x V vectors of 16 columns of C (the last vector `last`-masked), summed over k.
template <int R, int V>
void block(int64_t k, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, __mmask16 last, float alpha, float beta,
           float* c, int64_t ldc) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
    const float* ap = a + p * cs;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * rs]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 msk = v == V - 1 ? last : __mmask16(0xffff);
      float* cr = c + r * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.0f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(msk, cr), out);
      _mm512_mask_storeu_ps(cr, msk, out);
    }
}

// The last m % R rows as one block of that many rows (R <= 8), not one row at a time: a lone row's
// sums are one chain of dependent multiply-adds, latency-bound.
template <int R, int V>
void tail_rows(int64_t left, int64_t k, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, __mmask16 last, float alpha,
               float beta, float* c, int64_t ldc) {
  if constexpr (R > 1) {
    if (left == R - 1) return block<R - 1, V>(k, a, rs, cs, b, ldb, last, alpha, beta, c, ldc);
    return tail_rows<R - 1, V>(left, k, a, rs, cs, b, ldb, last, alpha, beta, c, ldc);
  }
}

// All rows of C for V vectors of columns: blocks of R rows, then the rest as one block.
template <int R, int V>
void rows(int64_t m, int64_t k, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, __mmask16 last, float alpha,
          float beta, float* c, int64_t ldc) {
  int64_t r = 0;
  for (; r + R <= m; r += R) block<R, V>(k, a + r * rs, rs, cs, b, ldb, last, alpha, beta, c + r * ldc, ldc);
  if (r < m) tail_rows<R, V>(m - r, k, a + r * rs, rs, cs, b, ldb, last, alpha, beta, c + r * ldc, ldc);
}

void avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, float beta,
            float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {  // 64 columns (4 vectors) at a time
    const int64_t cols = std::min<int64_t>(64, n - j0), vecs = (cols + 15) / 16;
    const __mmask16 last = first(cols - 16 * (vecs - 1));
    const float* bj = b + j0;
    float* cj = c + j0;
    switch (vecs) {  // 8 to 16 accumulators: enough independent sums to hide the FMA's latency
      case 1: rows<8, 1>(m, k, a, rs, cs, bj, ldb, last, alpha, beta, cj, ldc); break;
      case 2: rows<6, 2>(m, k, a, rs, cs, bj, ldb, last, alpha, beta, cj, ldc); break;
      case 3: rows<4, 3>(m, k, a, rs, cs, bj, ldb, last, alpha, beta, cj, ldc); break;
      default: rows<4, 4>(m, k, a, rs, cs, bj, ldb, last, alpha, beta, cj, ldc); break;
    }
  }
}

// 16 floats of a row (fewer under `m`, the rest 0), from float or bfloat16 (widened exactly).
__m512 load16(const float* x, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x); }
__m512 load16(const bfloat16* x, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, x)), 16));
}

// r[i][e] becomes r[e][i]: the 16 x 16 transpose in registers (unpack, then 128-bit lane shuffles).
// The maskz forms: GCC 12 warns on the plain ones' undefined pass-through operand.
void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_ps(0xffff, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_ps(0xffff, r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + c], lane k: column 4k + c of rows 4i .. 4i+3
    r[4 * i] = _mm512_maskz_shuffle_ps(0xffff, t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_maskz_shuffle_ps(0xffff, t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_maskz_shuffle_ps(0xffff, t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_maskz_shuffle_ps(0xffff, t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_maskz_shuffle_f32x4(0xffff, r[c], r[4 + c], 0x88);
    t[4 + c] = _mm512_maskz_shuffle_f32x4(0xffff, r[c], r[4 + c], 0xDD);
    t[8 + c] = _mm512_maskz_shuffle_f32x4(0xffff, r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_maskz_shuffle_f32x4(0xffff, r[8 + c], r[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_maskz_shuffle_f32x4(0xffff, t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_maskz_shuffle_f32x4(0xffff, t[c], t[8 + c], 0xDD);
    r[4 + c] = _mm512_maskz_shuffle_f32x4(0xffff, t[4 + c], t[12 + c], 0x88);
    r[12 + c] = _mm512_maskz_shuffle_f32x4(0xffff, t[4 + c], t[12 + c], 0xDD);
  }
}

template <class X>
void pack_transposed_avx512(const X* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t width) {
  for (int64_t r0 = 0; r0 < width; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, width - r0);
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t nc = std::min<int64_t>(16, cols - c0);
      const __mmask16 cm = first(nc);
      __m512 v[16];
      for (int64_t i = 0; i < 16; ++i) v[i] = r0 + i < rows ? load16(src + (r0 + i) * ld + c0, cm) : _mm512_setzero_ps();
      transpose16(v);
      const __mmask16 rm = first(nr);
      for (int64_t i = 0; i < nc; ++i) _mm512_mask_storeu_ps(dst + (c0 + i) * width + r0, rm, v[i]);
    }
  }
}

#endif

}  // namespace

template <class T, class X>
void pack_transposed(const X* src, int64_t ld, int64_t rows, int64_t cols, T* dst, int64_t width) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (std::is_same_v<T, float> && !std::is_same_v<X, double>) return pack_transposed_avx512(src, ld, rows, cols, dst, width);
#endif
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * width + rows, dst + (c + 1) * width, T(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * width + r] = static_cast<T>(src[r * ld + c]);
}

template void pack_transposed<float, float>(const float*, int64_t, int64_t, int64_t, float*, int64_t);
template void pack_transposed<float, bfloat16>(const bfloat16*, int64_t, int64_t, int64_t, float*, int64_t);
template void pack_transposed<double, double>(const double*, int64_t, int64_t, int64_t, double*, int64_t);

template <class T>
void small_gemm(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rs, int64_t cs, const T* b, int64_t ldb, T beta, T* c,
                int64_t ldc) {
  if (m <= 0 || n <= 0) return;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) return avx512(m, n, k, alpha, a, rs, cs, b, ldb, beta, c, ldc);
#endif
  plain(m, n, k, alpha, a, rs, cs, b, ldb, beta, c, ldc);
}

template <class T>
void small_gemm_reference(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rs, int64_t cs, const T* b, int64_t ldb, T beta,
                          T* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += static_cast<double>(a[r * rs + p * cs]) * static_cast<double>(b[p * ldb + j]);
      T& out = c[r * ldc + j];
      out = static_cast<T>(static_cast<double>(alpha) * sum + (beta != T(0) ? static_cast<double>(beta) * out : 0.0));
    }
}

template void small_gemm<float>(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, float, float*,
                                int64_t);
template void small_gemm<double>(int64_t, int64_t, int64_t, double, const double*, int64_t, int64_t, const double*, int64_t, double,
                                 double*, int64_t);
template void small_gemm_reference<float>(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, float,
                                          float*, int64_t);
template void small_gemm_reference<double>(int64_t, int64_t, int64_t, double, const double*, int64_t, int64_t, const double*, int64_t,
                                           double, double*, int64_t);

}  // namespace gf::kernels

#pragma once
// Small matrix products that stay in the L1 cache, for the fused attention's one-tile path (a
// head's 14 x 14 x 64 tiles at Multi30k's lengths): a library call's own cost (argument checks,
// packing, dispatch; about a microsecond) would be most of such a product's time. The caller
// packs what must be packed once per head (attention.cpp); this multiplies.
//
// C (m, n) = alpha * A B + beta * C, float or double: A read through two strides (element (r, p)
// at a[r * rs + p * cs]: a row-major matrix, or the transpose of one), B row-major (k, n) with
// leading dim ldb, C row-major (m, n) with leading dim ldc; beta 0 means C is only written. Each
// element is one running sum over p = 0 .. k-1 in order (a fused multiply-add per term where the
// build has them), so its bits depend on the shape alone, never on the thread count. With
// AVX-512 (float): 16 columns per vector, up to 4 vectors and 4-8 rows of C in registers; columns
// beyond n are never read or written (masked), so B and C may be views inside larger rows.
#include <cstdint>

#include "tensor/dtype.h"

namespace gf::kernels {

template <class T>
void small_gemm(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rs, int64_t cs, const T* b, int64_t ldb, T beta, T* c,
                int64_t ldc);

// The plain reference: each element summed in double, then alpha, beta and rounding to T.
template <class T>
void small_gemm_reference(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t rs, int64_t cs, const T* b, int64_t ldb, T beta,
                          T* c, int64_t ldc);

// The operand packing those products need: dst (cols, width), dst[c * width + r] = src[r * ld + c]
// for r < rows (rows <= width), 0 for rows <= r < width: the transpose of a (rows, cols) block,
// widened to T (exactly, from bfloat16). With AVX-512: 16 x 16 blocks transposed in registers.
template <class T, class X>
void pack_transposed(const X* src, int64_t ld, int64_t rows, int64_t cols, T* dst, int64_t width);

}  // namespace gf::kernels

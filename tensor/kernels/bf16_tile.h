#pragma once
// Small bfloat16 products, for the fused attention's tiles under --precision bf16 (a (64, 64) x
// (64, 13) tile is ~50,000 multiply-adds: a library call's own cost, a few microseconds for oneDNN,
// would be most of it). Each operand is float32 (rounded to bfloat16 while it is packed, as
// to_bf16 rounds) or already bfloat16; products are accumulated in float32. On the native path
// (bf16.h) AVX512-BF16's vdpbf16ps multiplies; on the portable path the rounded operands are
// widened to float32 and one single-threaded sgemm multiplies (exact products, float32 sums).
// The large products (linear layers, the output projection) go to gemm_bf16 (bf16.h).
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace gf::kernels {

// Buffers for the packed operands, reused from call to call (one per thread or task).
struct TileWorkspace {
  std::vector<uint32_t> a, b;  // native: bfloat16 pairs, two consecutive k of one row of A / of one column of B
  std::vector<float> fa, fb;   // portable: A and B rounded to bfloat16, as float32, in their stored layout
};

// C (m, n) = alpha * op(A) @ op(B) + beta * C, all row-major with leading dims (ta/tb: read
// transposed), A and B each float or bfloat16, C float; beta 0 means C is only written. On the
// path bf16_path() names now.
template <class TA, class TB>
void tile_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b, int64_t ldb,
                    float beta, float* c, int64_t ldc, TileWorkspace& ws);

// The plain reference: every operand rounded to bfloat16 as bfloat16(float) does, each element
// summed in double, then alpha, beta and rounding to float.
template <class TA, class TB>
void tile_gemm_bf16_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a, int64_t lda, const TB* b,
                              int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace gf::kernels

#pragma once
// Matrix products on OpenBLAS. Operands whose last two dims are a row-major matrix or the
// transpose of one (any leading dimension, e.g. a permuted or narrowed view) are handed to BLAS
// in place through its transpose flags; other layouts are copied once with contiguous().
#include <cstdint>
#include <functional>

#include "tensor/tensor.h"

namespace gf::kernels {

// a (..., m, k) @ b (..., k, n) -> (..., m, n); batch dims broadcast as in NumPy, e.g.
// (B, H, L, d) @ (B, H, d, S) or (B, L, D) @ (D, E). Both operands at least 2-D, same float dtype.
Tensor matmul(const Tensor& a, const Tensor& b);

// sum_to(a @ b, shape) without building the broadcast product: batch dims that `shape` lacks or
// holds as 1 are summed by accumulating GEMMs (or folded into one GEMM's inner dim when the
// layouts allow). Matmul's backward uses it for gradients of broadcast operands.
Tensor matmul_sum_to(const Tensor& a, const Tensor& b, const Shape& shape);

// x (..., in) @ weight (out, in)^T + bias (out) -> (..., out), as PyTorch's nn.Linear: one GEMM
// over all leading dims. bias may be undefined (no bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// C (m, n) = op(A) @ op(B) + beta * C, all row-major with leading dims, as matmul and linear run
// it: a large product is cut across the threads (see gemm_on_tbb()); counted in gemm_flops().
// For ops that write products into parts of their own buffers or accumulate into them (beta 1).
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
          int64_t ldc);

// One BLAS call on the calling thread, never cut across threads: C (m, n) = alpha * op(A) @ op(B)
// + beta * C, all row-major with leading dims (ta/tb: A/B read transposed). For kernels that call
// BLAS on their own tiles inside a parallel loop (fused attention); m, n, k > 0 and within int.
// It does not add to gemm_flops(): such callers count what they mean to with count_gemm_flops().
template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
               T* c, int64_t ldc);

// 2 * m * n * k summed over every GEMM handed to BLAS since the program started (all threads,
// forward and backward): `gradflow bench train` divides its difference by the time for the rate
// of matrix-product FLOPs the model ran at, to compare with the machine's sgemm peak.
uint64_t gemm_flops();
// Adds to that count: kernels that call BLAS on their own tiles (fused attention) report here.
void count_gemm_flops(uint64_t flops);

// While one is alive (decoding): OpenBLAS runs single-threaded and gemm() splits every large
// product's output columns (a linear's output features) into blocks whose size depends only on
// the shape and the OpenBLAS kernel (decode_column_block), spread over oneTBB threads, one
// single-threaded GEMM each (a decoding step's linears have only the batch's rows).
// OpenBLAS's own threads, handed a 64-row product, spend more on waking, syncing and yielding
// than on the product; here each thread packs only its columns' weights and the batch's rows.
// Every output element is the same dot product in the same order however many threads run.
// GRADFLOW_DECODE_GEMM=openblas turns it off (OpenBLAS's threading as elsewhere), for comparison.
// Columns per block of a product (m, k) @ (k, n) (tb: B read transposed) while decoding.
// small_path: the OpenBLAS kernel multiplies products of m * n * k <= 100^3 whose B is read as
// stored without packing (its AVX-512 sgemm kernels); then blocks of 64 columns where that
// brings a product under the limit.
int64_t decode_column_block(bool small_path, bool tb, int64_t m, int64_t n, int64_t k);

// Whether a SmallRowsGemmScope is alive (the bf16 products cut their blocks the same way).
bool small_rows_gemm_active();

// How a product of C (m, n) = (m, k) @ (k, n) is cut for oneTBB threads, float32 (gemm) and
// bfloat16 (bf16.cpp) alike: never below kSplitWork (m * n * k), nor when C has fewer than
// threads * kMinSplit rows and columns; otherwise one slab of C's rows (or, for a short C,
// columns) per thread, each a call call(r0, rows, c0, cols) on a oneTBB thread.
inline constexpr int64_t kSplitWork = 4 * 65536, kMinSplit = 64;
void for_each_gemm_slab(int64_t m, int64_t n, const std::function<void(int64_t r0, int64_t rows, int64_t c0, int64_t cols)>& call);

class SmallRowsGemmScope {
 public:
  SmallRowsGemmScope();
  ~SmallRowsGemmScope();
  SmallRowsGemmScope(const SmallRowsGemmScope&) = delete;
  SmallRowsGemmScope& operator=(const SmallRowsGemmScope&) = delete;

 private:
  bool active_ = false;
};

}  // namespace gf::kernels

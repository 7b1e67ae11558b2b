#pragma once
// bfloat16 matrix products, for --precision bf16 (docs/precision.md). The operands of a product are
// rounded to bfloat16 (round to nearest even, tensor/dtype.h) and the products are accumulated in
// float32; results are float32. Everything else (master weights, Adam, LayerNorm, softmax, the
// loss, gradient sums) stays float32: the mixed precision of Micikevicius et al. 2018, with
// bfloat16 as Kalamkar et al. 2019 use it.
//
// Two paths compute the same numbers (up to the order of the float32 sums):
//   native    AVX512-BF16: vcvtneps2bf16 rounds, oneDNN's bf16 matmul and gradflow's vdpbf16ps
//             tiles (bf16_tile.h) multiply;
//   portable  any x86-64 CPU: each operand rounded by bfloat16(float) one element at a time,
//             widened to float32 (exactly), and multiplied by OpenBLAS's sgemm. A product of two
//             bfloat16 values has at most 16 significant bits, so float32 holds it exactly, as
//             vdpbf16ps does; only the sums round, in float32 as there. Slower.
// The native path runs where the CPU, the operating system and this build allow it and oneDNN has
// a real kernel for it; the portable one everywhere else, or when forced (GRADFLOW_BF16=portable,
// or set_bf16_path).
//
// The precision is one process-wide setting (set_precision), read by the autograd ops that run
// products (linear, linear_cross_entropy, fused attention). It applies to float32 operands only:
// float64, which gradient checks and parity run in, is never rounded.
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace gf {

enum class Precision : uint8_t { Float32, BFloat16 };

const char* precision_name(Precision p);  // "fp32", "bf16": the --precision values
// "fp32" or "bf16"; anything else is an error naming `where` (a flag, a config field).
Precision parse_precision(const std::string& text, const char* where);

}  // namespace gf

namespace gf::kernels {

enum class Bf16Path : uint8_t { Native, Portable };
const char* bf16_path_name(Bf16Path p);  // "native", "portable"

// Why the native path cannot run here, or "" when it can: no AVX512-BF16 in the CPU, an operating
// system that has not enabled the AVX-512 register state (XCR0, tensor/cpu_features.h), a build
// without the instructions, or a oneDNN with only its reference bf16 matmul (ONEDNN_MAX_CPU_ISA
// set low). Decided once per process.
std::string bf16_native_unavailable_reason();
bool bf16_native_available();
// The path the products take now: native when it is available and the portable one is not forced.
// GRADFLOW_BF16=portable in the environment forces the portable path from the start ("auto" or
// unset: the default choice; anything else is a std::runtime_error naming the variable).
Bf16Path bf16_path();
// Forces a path: Portable always works; Native where bf16_native_available() is false is a
// std::runtime_error that says why.
void set_bf16_path(Bf16Path p);

// Forces a path for its lifetime and puts back the one before (tests run both paths with it).
class Bf16PathScope {
 public:
  explicit Bf16PathScope(Bf16Path p);
  ~Bf16PathScope();
  Bf16PathScope(const Bf16PathScope&) = delete;
  Bf16PathScope& operator=(const Bf16PathScope&) = delete;

 private:
  Bf16Path before_;
};

// The instruction set oneDNN runs its kernels with (its effective ISA: "avx512_core_bf16",
// "avx512_core_amx", ...; ONEDNN_MAX_CPU_ISA lowers it); it multiplies on the native path only.
std::string bf16_isa();

Precision precision();
// Sets the process-wide precision. BFloat16 runs on every x86-64 CPU (on the portable path where
// the native one cannot run); a bad GRADFLOW_BF16 is an error here, before any product.
void set_precision(Precision p);

// Sets the precision for its lifetime and puts back the one before (tests, labs).
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision before_;
};

// Whether products of `t` operands run in bfloat16 now: float32 operands under Precision::BFloat16.
inline bool bf16_products(DType t) { return t == DType::Float32 && precision() == Precision::BFloat16; }

// ---- conversions: round to nearest even, float32 subnormals to zero (the bits of bfloat16(float)) ----
// n floats to bfloat16 on the calling thread: vcvtneps2bf16 on the native path, bfloat16(float)
// element by element on the portable one (the same bits).
void to_bf16(const float* src, bfloat16* dst, int64_t n);
// The same bits through bf16_bits_from_float, one element at a time: the reference to_bf16 is
// tested against, and the portable path's conversion.
void to_bf16_reference(const float* src, bfloat16* dst, int64_t n);
// The same in place: x's n floats become n bfloat16 values in the first half of their bytes (each
// 16 floats are read before their 32 bytes of result are written, which never reach a float not
// yet read).
void to_bf16_in_place(float* x, int64_t n);
// A float32 tensor as a bfloat16 tensor of the same shape, on the threads: contiguous, or for a
// column-major matrix (a transposed view of a contiguous one) the same column-major layout.
Tensor to_bf16(const Tensor& x);

// x (N, C) float32 as to_bf16(x) gives it and, in the same pass, its column sums into sums ((C,),
// float32): the same bits as sum(x, {0}) (row blocks of row_blocks.h, partials added in block
// order). A linear's backward under bf16 rounds its output gradient and takes its bias gradient
// with one read.
Tensor to_bf16_and_column_sums(const Tensor& x, Tensor& sums);

// ---- products: bfloat16 operands, float32 accumulation and result ----
// C (m, n) = op(A) @ op(B) + beta * C (+ bias (n) on every row when given), all row-major with
// leading dims (ta/tb: A/B read transposed); beta is 0 or 1. A large product is cut across the
// threads as gemm() cuts float32 ones (one oneDNN call, or on the portable path one widening and
// one sgemm, per slab, each on one thread), or in fixed column blocks while a SmallRowsGemmScope
// lives (decoding). Counted in gemm_flops().
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
               float beta, float* c, int64_t ldc, const float* bias = nullptr);

// x (..., in) bfloat16, contiguous, @ weight (out, in)^T bfloat16 (row-major, or column-major as
// decoding lays weights out) + bias (out) float32 or undefined -> (..., out) float32: linear's
// forward under bf16.
Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias);

// a (m, k) @ b (k, n) -> (m, n) float32, for bfloat16 a and b each row-major or a transposed view
// of a row-major matrix (linear's backward: g @ W and g^T @ x).
Tensor matmul_bf16(const Tensor& a, const Tensor& b);

// The plain reference of gemm_bf16: each element summed in double over the bfloat16 values, then
// rounded to float32 (tests compare the kernel with it to float32 accumulation error).
void gemm_bf16_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
                         int64_t ldb, float beta, float* c, int64_t ldc, const float* bias = nullptr);

// ---- weights converted once ----
// While one is alive (decoding: the weights do not change), bf16_weight() converts each weight
// once and hands the same bfloat16 copy back for every later product; the copies are freed with
// the last scope. Outside one, bf16_weight() converts each call (training converts a weight once
// per step in the forward and keeps that copy for its backward).
class Bf16WeightCache {
 public:
  Bf16WeightCache();
  ~Bf16WeightCache();
  Bf16WeightCache(const Bf16WeightCache&) = delete;
  Bf16WeightCache& operator=(const Bf16WeightCache&) = delete;
};
// A weight already in bfloat16 is returned as it is.
Tensor bf16_weight(const Tensor& w);

}  // namespace gf::kernels

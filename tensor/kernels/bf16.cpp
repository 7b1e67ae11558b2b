#include "tensor/kernels/bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/check.h"
#include "tensor/cpu_features.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/row_blocks.h"
#include "tensor/parallel.h"
#include "tensor/kernels/signal_stack.h"

namespace gf {

const char* precision_name(Precision p) { return p == Precision::BFloat16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& text, const char* where) {
  if (text == "fp32") return Precision::Float32;
  if (text == "bf16") return Precision::BFloat16;
  GF_FAIL("{} must be fp32 or bf16, got '{}'", where, text);
}

}  // namespace gf

namespace gf::kernels {
namespace {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
constexpr bool kBuiltForBf16 = true;
#else
constexpr bool kBuiltForBf16 = false;
#endif

std::atomic<Precision> g_precision{Precision::Float32};

// -1: GRADFLOW_BF16 not read yet; 0: the default choice; 1: the portable path forced.
std::atomic<int> g_portable_forced{-1};

bool portable_forced() {
  int forced = g_portable_forced.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  const char* env = std::getenv("GRADFLOW_BF16");
  const std::string value = env ? env : "";
  GF_CHECK_AS(std::runtime_error, value.empty() || value == "auto" || value == "portable",
              "GRADFLOW_BF16 must be 'portable', 'auto' or unset, got '{}'", value);
  int unread = -1;  // a set_bf16_path on another thread meanwhile wins
  g_portable_forced.compare_exchange_strong(unread, value == "portable" ? 1 : 0);
  return g_portable_forced.load(std::memory_order_relaxed) == 1;
}

// ---- oneDNN ----
// Debian's oneDNN runs on OpenMP. Every thread that calls it is held to one OpenMP thread (its
// own), so a product runs on the oneTBB thread that asks for it, as the float32 products run on
// single-threaded OpenBLAS calls: one thread pool, nothing spinning against it.
dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One matmul primitive serves every shape of a layout: M, N and K are runtime dims (batches
// differ in rows every step, and creating a primitive costs ~0.1-0.5 ms); only the transposes,
// the leading dims, the accumulation and the bias are fixed, as oneDNN's jit kernels need fixed
// strides (runtime strides fall back to its reference kernel).
using PrimKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, bool, bool>;  // ta, tb, lda, ldb, ldc, accumulate, bias

dnnl::memory::dims strides_of(bool trans, int64_t ld) { return trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1}; }

struct ThreadState {
  dnnl::stream stream;
  std::map<PrimKey, std::pair<dnnl::matmul, std::string>> prims;  // the primitive and its implementation's name
  ThreadState() : stream(engine()) {
    omp_set_num_threads(1);
    ensure_signal_stack();  // a Ctrl-C's handler never runs on oneDNN's stack (signal_stack.h)
  }
};

ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}

const std::pair<dnnl::matmul, std::string>& primitive(const PrimKey& key) {
  ThreadState& s = thread_state();
  auto it = s.prims.find(key);
  if (it != s.prims.end()) return it->second;
  using dt = dnnl::memory::data_type;
  const auto R = DNNL_RUNTIME_DIM_VAL;
  const auto [ta, tb, lda, ldb, ldc, accumulate, bias] = key;
  const dnnl::memory::desc a({R, R}, dt::bf16, strides_of(ta, lda)), b({R, R}, dt::bf16, strides_of(tb, ldb)),
      c({R, R}, dt::f32, strides_of(false, ldc));
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  try {
    const dnnl::matmul::desc d =
        bias ? dnnl::matmul::desc(a, b, dnnl::memory::desc({1, R}, dt::f32, dnnl::memory::format_tag::ab), c) : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd(d, attr, engine());
    std::string impl = pd.impl_info_str();
    return s.prims.emplace(key, std::make_pair(dnnl::matmul(pd), std::move(impl))).first->second;
  } catch (const dnnl::error& e) {
    GF_FAIL_AS(std::runtime_error, "bf16 matmul: oneDNN has no bf16 matmul for this CPU ({}): {}", bf16_isa(), e.what());
  }
}

std::string native_reason() {
  if (std::string cpu = avx512_bf16_unusable_reason(cpu_features()); !cpu.empty()) return cpu;
  if (!kBuiltForBf16) return "this build was compiled without AVX512-BF16 (GRADFLOW_NATIVE=OFF, or built on another CPU)";
  // oneDNN picks its kernel by the CPU and ONEDNN_MAX_CPU_ISA; its reference kernel is correct
  // but hundreds of times slower than the portable path's sgemm, so it does not count.
  try {
    const std::string& impl = primitive({false, true, 64, 64, 64, false, false}).second;
    if (impl.rfind("ref", 0) == 0)
      return fmt::format("oneDNN has only its reference bf16 matmul here (ISA {}, implementation {})", bf16_isa(), impl);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// The stored (rows, cols) of a bfloat16 operand as float32 (exact), contiguous.
void widen(int64_t rows, int64_t cols, const bfloat16* x, int64_t ld, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<float>(x[r * ld + c]);
}

// One product on the portable path, on the calling thread: both operands widened, then one sgemm
// (exact products, float32 sums); the bias is added after, as a float32 sum.
void portable_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
                   bool accumulate, float* c, int64_t ldc, const float* bias) {
  std::vector<float> fa, fb;
  widen(ta ? k : m, ta ? m : k, a, lda, fa);  // (m, k) or, read transposed, (k, m)
  widen(tb ? n : k, tb ? k : n, b, ldb, fb);  // (k, n) or, read transposed, (n, k)
  blas_gemm(ta, tb, m, n, k, 1.0f, fa.data(), ta ? m : k, fb.data(), tb ? k : n, accumulate ? 1.0f : 0.0f, c, ldc);
  if (bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
}

// One oneDNN call on the calling thread: C (m, n) = op(A) @ op(B) (+ C) (+ bias).
void onednn_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
                 bool accumulate, float* c, int64_t ldc, const float* bias) {
  using dt = dnnl::memory::data_type;
  const auto& [prim, impl] = primitive({ta, tb, lda, ldb, ldc, accumulate, bias != nullptr});
  dnnl::engine& eng = engine();
  dnnl::memory am({{m, k}, dt::bf16, strides_of(ta, lda)}, eng, const_cast<bfloat16*>(a));
  dnnl::memory bm({{k, n}, dt::bf16, strides_of(tb, ldb)}, eng, const_cast<bfloat16*>(b));
  dnnl::memory cm({{m, n}, dt::f32, strides_of(false, ldc)}, eng, c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, n}, dt::f32, dnnl::memory::dims{n, 1}}, eng, const_cast<float*>(bias)));
  prim.execute(thread_state().stream, args);
}

// As gemm() cuts float32 products (matmul.h's kSplitWork, for_each_gemm_slab): below kSplitWork one
// call; above it one slab of C's rows (or, for a short C, columns) per thread, or fixed column
// blocks while decoding.

// ---- the weight cache ----
struct CachedWeight {
  std::weak_ptr<Storage> storage;  // identity: a freed weight's address may be reused
  int64_t offset;
  Shape shape, strides;
  Tensor bf16;
};
std::mutex g_cache_mutex;
int g_cache_scopes = 0;
std::vector<CachedWeight> g_cache;

}  // namespace

const char* bf16_path_name(Bf16Path p) { return p == Bf16Path::Native ? "native" : "portable"; }

namespace {

// Decided once: bf16_path() asks on every conversion and tile, so no string is copied there.
const std::string& native_unavailable() {
  static const std::string reason = native_reason();
  return reason;
}

}  // namespace

std::string bf16_native_unavailable_reason() { return native_unavailable(); }

bool bf16_native_available() { return native_unavailable().empty(); }

Bf16Path bf16_path() { return portable_forced() || !bf16_native_available() ? Bf16Path::Portable : Bf16Path::Native; }

void set_bf16_path(Bf16Path p) {
  if (p == Bf16Path::Native) {
    const std::string why = bf16_native_unavailable_reason();
    GF_CHECK_AS(std::runtime_error, why.empty(), "the native bf16 path cannot run here: {}", why);
  }
  g_portable_forced.store(p == Bf16Path::Portable ? 1 : 0, std::memory_order_relaxed);
}

Bf16PathScope::Bf16PathScope(Bf16Path p) : before_(bf16_path()) { set_bf16_path(p); }
Bf16PathScope::~Bf16PathScope() { g_portable_forced.store(before_ == Bf16Path::Portable ? 1 : 0, std::memory_order_relaxed); }

std::string bf16_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

Precision precision() { return g_precision.load(std::memory_order_relaxed); }

void set_precision(Precision p) {
  if (p == Precision::BFloat16) (void)bf16_path();  // reads GRADFLOW_BF16, and decides the native path, before any product
  g_precision.store(p, std::memory_order_relaxed);
}

PrecisionScope::PrecisionScope(Precision p) : before_(precision()) { set_precision(p); }
PrecisionScope::~PrecisionScope() { g_precision.store(before_, std::memory_order_relaxed); }

namespace {

// vcvtneps2bf16, 16 floats at a time; each vector is read before its results are written.
void to_bf16_native(const float* src, bfloat16* dst, int64_t n) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail, src + i));
    _mm256_mask_storeu_epi16(dst + i, tail, reinterpret_cast<__m256i>(v));
  }
#else
  (void)src, (void)dst, (void)n;
  GF_FAIL_AS(std::logic_error, "to_bf16: the native path was chosen in a build without AVX512-BF16");
#endif
}

}  // namespace

void to_bf16(const float* src, bfloat16* dst, int64_t n) {
  if (bf16_path() == Bf16Path::Native) return to_bf16_native(src, dst, n);
  to_bf16_reference(src, dst, n);
}

void to_bf16_in_place(float* x, int64_t n) {
  // Element i's 2 bytes land at byte 2i, within floats already read (i/2 <= i); vcvtneps2bf16's
  // loop reads each vector of 16 before it writes their results, behind them. The portable loop
  // goes through bytes, since the floats and the bfloat16s share the memory.
  if (bf16_path() == Bf16Path::Native) return to_bf16_native(x, reinterpret_cast<bfloat16*>(x), n);
  auto* bytes = reinterpret_cast<unsigned char*>(x);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, bytes + 4 * i, sizeof f);
    const uint16_t bits = bfloat16(f).bits;
    std::memcpy(bytes + 2 * i, &bits, sizeof bits);
  }
}

void to_bf16_reference(const float* src, bfloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}

Tensor to_bf16(const Tensor& x) {
  check_dtype(x, DType::Float32, "to_bf16");
  // A column-major matrix (decoding's weights, nn/decode_layout.h) keeps its layout: its storage
  // is converted in order and the result is the same transposed view, without a float32 copy.
  if (x.ndim() == 2 && !x.is_contiguous() && x.transpose(0, 1).is_contiguous()) return to_bf16(x.transpose(0, 1)).transpose(0, 1);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::BFloat16);  // (x's shape)
  const float* s = xc.data<float>();
  bfloat16* d = out.data<bfloat16>();
  parallel_for(xc.numel(), kSerialGrain, [&](int64_t lo, int64_t hi) { to_bf16(s + lo, d + lo, hi - lo); });
  return out;
}

Tensor to_bf16_and_column_sums(const Tensor& x, Tensor& sums) {
  check_dtype(x, DType::Float32, "to_bf16_and_column_sums");
  GF_CHECK(x.ndim() == 2, "to_bf16_and_column_sums: expected a matrix (N, C), got {}", shape_str(x.shape()));
  const Tensor xc = x.contiguous();  // (N, C)
  const int64_t rows = xc.size(0), cols = xc.size(1);
  Tensor out = Tensor::empty(xc.shape(), DType::BFloat16);  // (N, C)
  sums = Tensor::empty({cols}, DType::Float32);             // (C,)
  const RowBlocks blocks = row_blocks(rows, cols);         // as sum(x, {0}) cuts the rows
  std::vector<double> part(static_cast<size_t>(blocks.count * cols), 0.0);  // (blocks, C)
  const float* s = xc.data<float>();
  bfloat16* d = out.data<bfloat16>();
  parallel_for(blocks.count, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      double* acc = part.data() + blk * cols;
      for (int64_t r = blocks.begin(blk); r < blocks.end(blk); ++r) {
        const float* p = s + r * cols;
        for (int64_t j = 0; j < cols; ++j) acc[j] += p[j];
        to_bf16(p, d + r * cols, cols);
      }
    }
  });
  add_partials_in_order(part, blocks.count, cols, sums.data<float>());
  return out;
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
               float beta, float* c, int64_t ldc, const float* bias) {
  GF_CHECK_AS(std::logic_error, beta == 0.0f || beta == 1.0f, "gemm_bf16: beta must be 0 or 1, got {}", beta);
  if (m == 0 || n == 0) return;
  count_gemm_flops(static_cast<uint64_t>(2 * m * n * k));
  const bool accumulate = beta == 1.0f;
  if (k == 0) {  // an empty sum: C stays (beta 1) or becomes 0, plus the bias
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  const bool native = bf16_path() == Bf16Path::Native;  // one path for every slab of the product
  auto call = [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    (native ? onednn_gemm : portable_gemm)(ta, tb, rows, cols, k, ta ? a + r0 : a + r0 * lda, lda, tb ? b + c0 * ldb : b + c0, ldb,
                                           accumulate, c + r0 * ldc + c0, ldc, bias ? bias + c0 : nullptr);
  };
  if (m * n * k >= kSplitWork && small_rows_gemm_active()) {
    // Decoding: blocks fixed by the shape alone, so a sentence's bits do not depend on the threads.
    const int64_t block = decode_column_block(false, tb, m, n, k), blocks = (n + block - 1) / block;
    parallel_for(blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) call(0, m, j * block, std::min(block, n - j * block));
    });
    return;
  }
  const int64_t parts = max_threads();
  if (m * n * k < kSplitWork || parts == 1 || std::max(m, n) < parts * kMinSplit) return call(0, m, 0, n);
  for_each_gemm_slab(m, n, call);
}

namespace {

// How a 2-D bfloat16 operand is read in place: row-major (trans false) or the transpose of a
// row-major matrix, with its leading dim; any other layout is an error (callers pass views of
// contiguous tensors).
std::pair<bool, int64_t> layout_2d(const Tensor& t, const char* what) {
  check_dtype(t, DType::BFloat16, what);
  GF_CHECK(t.ndim() == 2, "{}: expected a 2-D operand, got {}", what, shape_str(t.shape()));
  const int64_t r = t.shape()[0], c = t.shape()[1], sr = t.strides()[0], sc = t.strides()[1];
  if ((c <= 1 || sc == 1) && (r <= 1 || sr >= std::max<int64_t>(c, 1))) return {false, r <= 1 ? std::max<int64_t>(c, 1) : sr};
  if ((r <= 1 || sr == 1) && (c <= 1 || sc >= std::max<int64_t>(r, 1))) return {true, c <= 1 ? std::max<int64_t>(r, 1) : sc};
  GF_FAIL("{}: operand {} with strides {} is neither row-major nor a transposed row-major matrix", what, shape_str(t.shape()),
          shape_str(t.strides()));
}

const bfloat16* base_of(const Tensor& t) { return static_cast<const bfloat16*>(t.storage()->data()) + t.offset(); }

}  // namespace

Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_dtype(x, DType::BFloat16, "linear_bf16");
  GF_CHECK(x.is_contiguous() && x.ndim() >= 1 && weight.ndim() == 2 && x.shape().back() == weight.shape()[1],
           "linear_bf16: input {} and weight {}: need contiguous input (..., in) and weight (out, in)", shape_str(x.shape()),
           shape_str(weight.shape()));
  const auto [w_trans, ldw] = layout_2d(weight, "linear_bf16");  // row-major, or column-major (decoding's layout)
  const int64_t in = weight.shape()[1], out_f = weight.shape()[0];
  const int64_t rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor bc;
  if (bias.defined()) {
    check_dtype(bias, DType::Float32, "linear_bf16");
    GF_CHECK(bias.shape() == Shape{out_f}, "linear_bf16: bias {} does not match weight {}", shape_str(bias.shape()), shape_str(weight.shape()));
    bc = bias.contiguous();  // (out,)
  }
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, DType::Float32);  // (..., out)
  // x @ W^T: W (out, in) row-major is read transposed; a column-major W is W^T row-major.
  gemm_bf16(false, !w_trans, rows, out_f, in, x.data<bfloat16>(), in, base_of(weight), ldw, 0.0f, out.data<float>(), out_f,
            bc.defined() ? bc.data<float>() : nullptr);
  return out;
}

Tensor matmul_bf16(const Tensor& a, const Tensor& b) {
  const auto [ta, lda] = layout_2d(a, "matmul_bf16");
  const auto [tb, ldb] = layout_2d(b, "matmul_bf16");
  GF_CHECK(a.shape()[1] == b.shape()[0], "matmul_bf16: {} @ {}: inner dims differ", shape_str(a.shape()), shape_str(b.shape()));
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  Tensor out = Tensor::empty({m, n}, DType::Float32);  // (m, n)
  gemm_bf16(ta, tb, m, n, k, base_of(a), lda, base_of(b), ldb, 0.0f, out.data<float>(), n);
  return out;
}

void gemm_bf16_reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b,
                         int64_t ldb, float beta, float* c, int64_t ldc, const float* bias) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p)
        sum += static_cast<double>(static_cast<float>(ta ? a[p * lda + i] : a[i * lda + p])) *
               static_cast<double>(static_cast<float>(tb ? b[j * ldb + p] : b[p * ldb + j]));
      float& out = c[i * ldc + j];
      out = static_cast<float>(sum + (beta != 0.0f ? static_cast<double>(beta) * out : 0.0) + (bias ? bias[j] : 0.0f));
    }
}

Bf16WeightCache::Bf16WeightCache() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  ++g_cache_scopes;
}

Bf16WeightCache::~Bf16WeightCache() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  if (--g_cache_scopes == 0) g_cache.clear();
}

Tensor bf16_weight(const Tensor& w) {
  if (w.dtype() == DType::BFloat16) return w;  // kept in bf16 already (nn::lay_out_for_decoding)
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    if (g_cache_scopes == 0) return to_bf16(w);
    for (const CachedWeight& e : g_cache)
      if (e.storage.lock() == w.storage() && e.offset == w.offset() && e.shape == w.shape() && e.strides == w.strides()) return e.bf16;
  }
  Tensor b = to_bf16(w);  // outside the lock: decoding groups convert side by side
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  if (g_cache_scopes > 0) g_cache.push_back({w.storage(), w.offset(), w.shape(), w.strides(), b});
  return b;
}

}  // namespace gf::kernels

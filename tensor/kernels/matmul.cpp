#include "tensor/kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tensor/check.h"
#include "tensor/kernels/sgemm.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"

namespace gf::kernels {
namespace {

// How BLAS reads a matrix in place: element (i, j) sits at i*ld + j (row-major), or with trans
// at j*ld + i (the transpose of a row-major matrix, as transpose(-1, -2) of a dense tensor).
struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

MatLayout matrix_layout(const Tensor& t) {
  const int nd = t.ndim();
  const int64_t r = t.shape()[nd - 2], c = t.shape()[nd - 1];
  const int64_t sr = t.strides()[nd - 2], sc = t.strides()[nd - 1];
  // A size-1 dim's stride is never followed, so it cannot rule a layout out.
  if ((c <= 1 || sc == 1) && (r <= 1 || sr >= std::max<int64_t>(c, 1)))
    return {true, false, r <= 1 ? std::max<int64_t>(c, 1) : sr};
  if ((r <= 1 || sr == 1) && (c <= 1 || sc >= std::max<int64_t>(r, 1)))
    return {true, true, c <= 1 ? std::max<int64_t>(r, 1) : sc};
  return {};
}

// Debian's OpenBLAS takes 32-bit ints.
void check_blas_size(int64_t v, const char* op) {
  GF_CHECK(v <= INT_MAX, "{}: dimension {} exceeds BLAS's int range", op, v);
}

// gemm_flops()'s count, in one slot per thread, each on its own cache line: the fused attention's
// tiles add to it from both threads, and one shared counter moved its cache line between the cores
// at every tile (0.5% of a training step's samples).
struct alignas(64) FlopSlot {
  std::atomic<uint64_t> flops{0};
};
constexpr int kFlopSlots = 64;  // more threads share slots: still exact, as the adds are atomic
FlopSlot g_flop_slots[kFlopSlots];
std::atomic<int> g_next_flop_slot{0};

void add_gemm_flops(uint64_t flops) {
  thread_local const int slot = g_next_flop_slot.fetch_add(1, std::memory_order_relaxed) % kFlopSlots;
  g_flop_slots[slot].flops.fetch_add(flops, std::memory_order_relaxed);
}

std::atomic<int> g_small_rows_scopes{0};  // live SmallRowsGemmScopes

// kSplitWork (matmul.h): OpenBLAS 0.3.21 runs a smaller product on one thread anyway (see
// kSmallGemmWork below).

// With gemm_on_tbb(): a large GEMM cut into one slab of C's rows (or columns) per thread, each a
// single-threaded BLAS call on a TBB thread. Every output element is still one BLAS dot product
// over the whole k, and only one thread pool is ever busy.
// One single-threaded product of the step: float32 on the library chosen for its layout
// (sgemm.h: OpenBLAS or oneDNN, measured once per machine), float64 on OpenBLAS.
template <class T>
void step_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
               int64_t ldc) {
  if constexpr (std::is_same_v<T, float>)
    sgemm_on(sgemm_library_for(ta, tb), ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    blas_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void split_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
                T* c, int64_t ldc) {
  for_each_gemm_slab(m, n, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    step_gemm(ta, tb, rows, cols, k, ta ? a + r0 : a + r0 * lda, lda, tb ? b + c0 * ldb : b + c0, ldb, beta, c + r0 * ldc + c0, ldc);
  });
}

// OpenBLAS's AVX-512 sgemm kernels (SkylakeX, Cooperlake, SapphireRapids; 0.3.21) multiply a
// product of m * n * k <= 100^3 straight from its operands, packing neither, when the weights
// (B here, BLAS's A after the row-major swap) are read as stored (sgemm_small_kernel_permit).
bool blas_has_small_path() {
  static const bool has = [] {
    std::string core = blas_core_in_use();
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
  }();
  return has;
}

constexpr int64_t kSmallPathWork = 100 * 100 * 100, kSmallPathBlock = 64;

}  // namespace

// A decoding group's products (32 rows, k = 256, weights column-major: nn/decode_layout.h) fit
// OpenBLAS's small path in blocks of 64 columns, which skips packing and is faster than one call
// or blocks of 128. Otherwise about an eighth of the columns, a multiple of 64 (whole OpenBLAS
// column panels), at least 128 (each block also packs A's few rows once). The blocks depend only
// on the shape and the kernel, and each runs on one OpenBLAS thread, so the bits do not depend on
// the thread count; against one whole call they agree to rounding.
int64_t decode_column_block(bool small_path, bool tb, int64_t m, int64_t n, int64_t k) {
  if (small_path && !tb && m * kSmallPathBlock * k <= kSmallPathWork) return kSmallPathBlock;
  const int64_t eighth = (n + 7) / 8;
  return std::max<int64_t>(128, (eighth + 63) / 64 * 64);
}

namespace {

// While a SmallRowsGemmScope is alive (decoding: A has the batch's few rows): C's columns in
// blocks whose size depends only on the shape and the kernel, spread over TBB threads, one
// single-threaded BLAS call each; each thread packs (if anything) only its blocks of B (the
// weights), and the results do not depend on the thread count.
template <class T>
void column_blocks(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
                   T* c, int64_t ldc) {
  const int64_t block = decode_column_block(std::is_same_v<T, float> && blas_has_small_path(), tb, m, n, k);
  parallel_for((n + block - 1) / block, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t c0 = j * block, len = std::min(block, n - c0);
      blas_gemm(ta, tb, m, len, k, T(1), a, lda, tb ? b + c0 * ldb : b + c0, ldb, beta, c + c0, ldc);
    }
  });
}

}  // namespace

void for_each_gemm_slab(int64_t m, int64_t n, const std::function<void(int64_t, int64_t, int64_t, int64_t)>& call) {
  const int64_t parts = max_threads();
  const bool by_rows = m >= n || n < parts * kMinSplit;
  const int64_t extent = by_rows ? m : n, chunk = (extent + parts - 1) / parts;
  parallel_for(parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t s = p * chunk, len = std::min(chunk, extent - s);
      if (len <= 0) continue;
      if (by_rows) call(s, len, 0, n);
      else call(0, m, s, len);
    }
  });
}

// C (m, n) = op(A) @ op(B) + beta * C, all row-major with leading dims. Below kSplitWork a
// product runs as one BLAS call; above it, it is cut for the threads by one of two rules: while
// decoding, fixed column blocks (column_blocks); otherwise, with gemm_on_tbb(), one slab per
// thread (split_gemm). With GRADFLOW_GEMM_THREADS=openblas, OpenBLAS threads it instead.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
          T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  add_gemm_flops(static_cast<uint64_t>(2 * m * n * k));
  if (k == 0) {  // an empty sum: BLAS would leave beta * C
    if (beta == T(0))
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  if (m * n * k >= kSplitWork) {
    // On one thread too: the blocks, and so the bits of a decoded sentence, follow the shape alone.
    if (g_small_rows_scopes.load(std::memory_order_relaxed) > 0) return column_blocks(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    if (!gemm_on_tbb()) return blas_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);  // OpenBLAS threads it (A/B runs)
    if constexpr (std::is_same_v<T, float>) (void)sgemm_choice();  // decided here, before the threads start their slabs
    if (max_threads() > 1 && std::max(m, n) >= max_threads() * kMinSplit) return split_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return step_gemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
  blas_gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t, double, double*,
                           int64_t);

namespace {

// One matrix operand of a batched product as BLAS will read it.
template <class T>
struct Operand {
  Tensor t;  // (..., rows, cols): the input, or its dense copy when BLAS cannot read it in place
  MatLayout lay;
  const T* base = nullptr;

  explicit Operand(const Tensor& in) : t(in), lay(matrix_layout(in)) {
    if (!lay.ok) {
      t = in.contiguous();
      lay = matrix_layout(t);
    }
    base = static_cast<const T*>(t.storage()->data()) + t.offset();
  }
};

// True when stepping through `dims` (outermost first) with these element strides lands exactly
// where one flat dim with stride `inner` would: the batch folds into a GEMM's rows or inner dim.
bool folds(const std::vector<int64_t>& steps, const Shape& dims, int64_t inner) {
  int64_t expect = inner;
  for (size_t i = dims.size(); i-- > 0;) {
    if (steps[i] != expect) return false;
    expect *= dims[i];
  }
  return true;
}

// Per-GEMM work (m*n*k) below which OpenBLAS 0.3.21 runs a GEMM on one thread anyway
// (SMP_THRESHOLD_MIN 65536 x GEMM_MULTITHREAD_THRESHOLD 4). Batches of such small products, as in
// attention (B*H products of ~30x64x30), are spread over TBB threads: each BLAS call then stays
// single-threaded inside OpenBLAS, so the two thread pools never oversubscribe the cores.
// Measured on 2 cores, (64*4) products of 30x64x30 and 30x30x64: 0.20 / 0.14 ms with the TBB loop
// against 0.38 / 0.27 ms serial; never slower (when OpenBLAS's idle workers are still spinning
// after a large GEMM, the two run equally). Larger products run one after another, each threaded
// inside OpenBLAS.
constexpr int64_t kSmallGemmWork = 65536 * 4;

// out (contiguous, out_batch..., m, n) = a @ b, summed over the broadcast batch dims in which
// out has size 1 or no dim at all. a is (a_batch..., m, k), b is (b_batch..., k, n).
template <class T>
void batched_product(const Tensor& a_in, const Tensor& b_in, Tensor& out, const char* op) {
  Operand<T> A(a_in), B(b_in);
  const int na = a_in.ndim() - 2, nb = b_in.ndim() - 2, no = out.ndim() - 2;
  const int64_t m = a_in.shape()[na], k = a_in.shape()[na + 1], n = b_in.shape()[nb + 1];
  check_blas_size(m, op), check_blas_size(n, op), check_blas_size(k, op);
  check_blas_size(A.lay.ld, op), check_blas_size(B.lay.ld, op);
  T* o = out.data<T>();
  const int nl = std::max({na, nb, no});

  // The batch loop, keeping only dims of size > 1: their sizes and each operand's element step
  // (0 where that operand is broadcast). `kept` dims index out; `summed` dims are reduced into it.
  Shape kept, summed;
  std::vector<int64_t> ka, kb, ko, sa, sb;
  for (int i = 0; i < nl; ++i) {
    auto dim_of = [&](int nd_batch, const Tensor& t, int64_t& size, int64_t& step) {
      int j = i - (nl - nd_batch);
      size = j >= 0 ? t.shape()[j] : 1;
      step = size > 1 ? t.strides()[j] : 0;
    };
    int64_t za, zb, zo, stepa, stepb, stepo;
    dim_of(na, A.t, za, stepa);
    dim_of(nb, B.t, zb, stepb);
    dim_of(no, out, zo, stepo);
    const int64_t loop = std::max(za, zb);
    if (loop <= 1) continue;
    if (zo == loop) {
      kept.push_back(loop), ka.push_back(stepa), kb.push_back(stepb), ko.push_back(stepo);
    } else {
      summed.push_back(loop), sa.push_back(stepa), sb.push_back(stepb);
    }
  }
  int64_t n_kept = 1, n_summed = 1;
  for (int64_t d : kept) n_kept *= d;
  for (int64_t d : summed) n_summed *= d;

  // One GEMM when the batch is a run of rows of a against a shared b: (B, L, D) @ (D, E).
  const bool b_shared = std::all_of(kb.begin(), kb.end(), [](int64_t s) { return s == 0; });
  if (summed.empty() && b_shared && !A.lay.trans && folds(ka, kept, A.lay.ld * m)) {
    check_blas_size(n_kept * m, op);
    gemm<T>(false, B.lay.trans, n_kept * m, n, k, A.base, A.lay.ld, B.base, B.lay.ld, T(0), o, n);
    return;
  }
  // One GEMM when every batch sums into a single matrix and both operands continue along the
  // inner dim: a^T @ g for a (B, L, D) and g (B, L, E) is (D, B*L) @ (B*L, E).
  if (kept.empty() && A.lay.trans && !B.lay.trans && folds(sa, summed, A.lay.ld * k) && folds(sb, summed, B.lay.ld * k)) {
    check_blas_size(n_summed * k, op);
    gemm<T>(true, false, m, n, n_summed * k, A.base, A.lay.ld, B.base, B.lay.ld, T(0), o, n);
    return;
  }

  // General case: a loop over the kept batch; summed dims accumulate into the same output matrix.
  auto offsets = [](int64_t flat, const Shape& dims, const std::vector<int64_t>& s1, const std::vector<int64_t>& s2,
                    const std::vector<int64_t>* s3, int64_t& o1, int64_t& o2, int64_t& o3) {
    o1 = o2 = o3 = 0;
    for (size_t i = dims.size(); i-- > 0;) {
      const int64_t idx = flat % dims[i];
      flat /= dims[i];
      o1 += idx * s1[i], o2 += idx * s2[i];
      if (s3) o3 += idx * (*s3)[i];
    }
  };
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) {
      int64_t oa, ob, oo;
      offsets(q, kept, ka, kb, &ko, oa, ob, oo);
      for (int64_t r = 0; r < n_summed; ++r) {
        int64_t ra, rb, unused;
        offsets(r, summed, sa, sb, nullptr, ra, rb, unused);
        gemm<T>(A.lay.trans, B.lay.trans, m, n, k, A.base + oa + ra, A.lay.ld, B.base + ob + rb, B.lay.ld,
                r == 0 ? T(0) : T(1), o + oo, n);
      }
    }
  };
  const int64_t work = m * n * k;
  if (n_kept > 1 && work < kSmallGemmWork)
    parallel_for(n_kept, std::max<int64_t>(1, kSmallGemmWork / std::max<int64_t>(work * n_summed, 1) / 4), run);
  else
    run(0, n_kept);
}

// The batch shape of a @ b, or an error naming both operands.
Shape product_batch(const Tensor& a, const Tensor& b, const char* op) {
  check_same_dtype(a, b, op);
  GF_CHECK(a.ndim() >= 2 && b.ndim() >= 2, "{}: {} @ {}: both operands need at least 2 dims", op, shape_str(a.shape()),
           shape_str(b.shape()));
  const int64_t ka = a.shape()[a.ndim() - 1], kb = b.shape()[b.ndim() - 2];
  GF_CHECK(ka == kb, "{}: {} @ {}: inner dims {} and {} differ", op, shape_str(a.shape()), shape_str(b.shape()), ka, kb);
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const size_t nl = std::max(ab.size(), bb.size());
  Shape batch(nl);
  for (size_t i = 0; i < nl; ++i) {
    const int64_t da = i < nl - ab.size() ? 1 : ab[i - (nl - ab.size())];
    const int64_t db = i < nl - bb.size() ? 1 : bb[i - (nl - bb.size())];
    GF_CHECK(da == db || da == 1 || db == 1, "{}: {} @ {}: batch dims {} and {} cannot be broadcast", op,
             shape_str(a.shape()), shape_str(b.shape()), shape_str(ab), shape_str(bb));
    batch[i] = da == 1 ? db : da;
  }
  return batch;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  Shape shape = product_batch(a, b, "matmul");
  shape.push_back(a.shape()[a.ndim() - 2]);
  shape.push_back(b.shape()[b.ndim() - 1]);
  Tensor out = Tensor::empty(shape, a.dtype());  // (batch..., m, n)
  dispatch_float(a.dtype(), "matmul", [&]<class T>() { batched_product<T>(a, b, out, "matmul"); });
  return out;
}

Tensor matmul_sum_to(const Tensor& a, const Tensor& b, const Shape& shape) {
  const Shape batch = product_batch(a, b, "matmul_sum_to");
  const int64_t m = a.shape()[a.ndim() - 2], n = b.shape()[b.ndim() - 1];
  // shape must be (m, n) after batch dims that each equal the product's or are 1.
  bool ok = shape.size() >= 2 && shape.size() - 2 <= batch.size() && shape[shape.size() - 2] == m && shape.back() == n;
  for (size_t i = 0; ok && i + 2 < shape.size(); ++i) {
    const int64_t want = shape[i], have = batch[batch.size() - (shape.size() - 2) + i];
    ok = want == have || want == 1;
  }
  if (!ok) {
    Shape full = batch;
    full.push_back(m), full.push_back(n);
    GF_FAIL("matmul_sum_to: the product {} of {} @ {} cannot be summed to {}", shape_str(full), shape_str(a.shape()),
            shape_str(b.shape()), shape_str(shape));
  }
  Tensor out = Tensor::empty(shape, a.dtype());  // (shape)
  dispatch_float(a.dtype(), "matmul", [&]<class T>() { batched_product<T>(a, b, out, "matmul"); });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_same_dtype(x, weight, "linear");
  GF_CHECK(x.ndim() >= 1 && weight.ndim() == 2, "linear: input {} and weight {}: need input (..., in) and weight (out, in)",
           shape_str(x.shape()), shape_str(weight.shape()));
  const int64_t in = x.shape().back(), out_f = weight.shape()[0];
  GF_CHECK(weight.shape()[1] == in, "linear: input {} and weight {}: in_features {} and {} differ", shape_str(x.shape()),
           shape_str(weight.shape()), in, weight.shape()[1]);
  if (bias.defined()) {
    check_same_dtype(x, bias, "linear");
    GF_CHECK(bias.shape() == Shape{out_f}, "linear: bias {} does not match weight {}: expected ({},)",
             shape_str(bias.shape()), shape_str(weight.shape()), out_f);
  }
  const int64_t rows = in > 0 ? x.numel() / in : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Shape out_shape = x.shape();
  out_shape.back() = out_f;
  Tensor out = Tensor::empty(out_shape, x.dtype());  // (..., out)
  dispatch_float(x.dtype(), "linear", [&]<class T>() {
    Tensor x2 = x.reshape({rows, in});  // (N, in): a view unless x is strided
    Operand<T> X(x2), W(weight);
    check_blas_size(rows, "linear"), check_blas_size(in, "linear"), check_blas_size(out_f, "linear");
    check_blas_size(X.lay.ld, "linear"), check_blas_size(W.lay.ld, "linear");
    T* o = out.data<T>();
    T beta = T(0);
    if (bias.defined()) {
      // Seed every row with the bias so that the GEMM adds onto it (beta = 1): no second pass.
      Tensor bc = bias.contiguous();  // (out,)
      const T* bp = bc.data<T>();
      parallel_for(rows, row_grain(out_f), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) std::memcpy(o + r * out_f, bp, sizeof(T) * out_f);
      });
      beta = T(1);
    }
    // x @ W^T: W (out, in) row-major is read transposed; a transposed view of W reads as is.
    gemm<T>(X.lay.trans, !W.lay.trans, rows, out_f, in, X.base, X.lay.ld, W.base, W.lay.ld, beta, o, out_f);
  });
  return out;
}

template <class T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
               T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE fa = ta ? CblasTrans : CblasNoTrans, fb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, fa, fb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, fa, fb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
template void blas_gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                               float*, int64_t);
template void blas_gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*, int64_t,
                                double, double*, int64_t);

uint64_t gemm_flops() {
  uint64_t total = 0;
  for (const FlopSlot& s : g_flop_slots) total += s.flops.load(std::memory_order_relaxed);
  return total;
}
void count_gemm_flops(uint64_t flops) { add_gemm_flops(flops); }

bool small_rows_gemm_active() { return g_small_rows_scopes.load(std::memory_order_relaxed) > 0; }

SmallRowsGemmScope::SmallRowsGemmScope() {
  const char* env = std::getenv("GRADFLOW_DECODE_GEMM");
  if (env && std::string(env) == "openblas") return;
  active_ = true;
  if (g_small_rows_scopes.fetch_add(1) == 0) openblas_set_num_threads(1);
}

SmallRowsGemmScope::~SmallRowsGemmScope() {
  if (active_ && g_small_rows_scopes.fetch_sub(1) == 1) openblas_set_num_threads(gemm_on_tbb() ? 1 : max_threads());  // as set_num_threads left it
}

}  // namespace gf::kernels

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <thread>
#include <vector>

#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "gradcheck_util.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/random.h"
#include "tensor/parallel.h"
#include "tensor/storage.h"

using namespace gf;
using namespace gf::testing;

namespace {

// Straightforward triple loop in double over broadcast batch dims: the reference.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "ref");
  const int64_t m = a.shape()[a.ndim() - 2], k = a.shape().back(), n = b.shape().back();
  Shape sa = batch, sb = batch, so = batch;
  sa.push_back(m), sa.push_back(k), sb.push_back(k), sb.push_back(n), so.push_back(m), so.push_back(n);
  std::vector<double> av = a.expand(sa).contiguous().to_vector<double>();
  std::vector<double> bv = b.expand(sb).contiguous().to_vector<double>();
  Tensor out = Tensor::empty(so, DType::Float64);
  double* o = out.data<double>();
  const int64_t nb = shape_numel(batch);
  for (int64_t q = 0; q < nb; ++q)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[(q * m + i) * k + p] * bv[(q * k + p) * n + j];
        o[(q * m + i) * n + j] = s;
      }
  return out;
}

double max_abs_diff(const Tensor& x, const Tensor& y) {
  REQUIRE(x.shape() == y.shape());
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) worst = std::max(worst, std::abs(x.flat_get(i) - y.flat_get(i)));
  return worst;
}

void check_against_reference(const Tensor& a, const Tensor& b, double tol) {
  Tensor got = kernels::matmul(a, b);
  Tensor want = ref_matmul(a, b);
  INFO(shape_str(a.shape()) << " @ " << shape_str(b.shape()));
  CHECK(got.dtype() == a.dtype());
  CHECK(max_abs_diff(got, want) < tol);
}

int64_t allocations() { return memory_stats().allocations; }

}  // namespace

TEST_CASE("matmul 2-D forward values") {
  Tensor a = Tensor::of({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::of({5, 6, 7, 8}, {2, 2});
  Tensor c = kernels::matmul(a, b);
  CHECK(c.to_vector<float>() == std::vector<float>{19, 22, 43, 50});
  // (2, 3) @ (3, 1)
  Tensor d = kernels::matmul(Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64), Tensor::of({1, 0, -1}, {3, 1}, DType::Float64));
  CHECK(d.shape() == Shape{2, 1});
  CHECK(d.to_vector<double>() == std::vector<double>{-2, -2});
}

TEST_CASE("matmul matches the reference: broadcast batches, transposed and strided operands") {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double tol = dt == DType::Float32 ? 1e-4 : 1e-12;
    check_against_reference(randn({3, 4}, 1, 1, dt), randn({4, 5}, 2, 1, dt), tol);
    check_against_reference(randn({2, 3, 4}, 3, 1, dt), randn({4, 5}, 4, 1, dt), tol);        // (B, L, D) @ (D, E)
    check_against_reference(randn({3, 4}, 5, 1, dt), randn({2, 4, 5}, 6, 1, dt), tol);        // a broadcast
    check_against_reference(randn({2, 1, 3, 4}, 7, 1, dt), randn({3, 4, 2}, 8, 1, dt), tol);  // both broadcast
    // b as transpose(-1, -2) of a dense (B, H, S, d): BLAS's transpose flag.
    check_against_reference(randn({2, 3, 5, 4}, 9, 1, dt), randn({2, 3, 6, 4}, 10, 1, dt).transpose(-1, -2), tol);
    // a transposed, b a permuted view (row-major rows with a leading dim larger than the width).
    check_against_reference(randn({2, 4, 3}, 11, 1, dt).transpose(1, 2), randn({4, 2, 5}, 12, 1, dt).permute({1, 0, 2}), tol);
    // a narrowed view: rows with a gap.
    check_against_reference(randn({3, 7}, 13, 1, dt).narrow(1, 2, 4), randn({4, 2}, 14, 1, dt), tol);
    // No BLAS layout (neither stride is 1): forces a copy.
    Tensor odd = randn({3, 4, 2}, 15, 1, dt).select(2, 1);  // (3, 4) with strides (8, 2)
    check_against_reference(odd, randn({4, 3}, 16, 1, dt), tol);
    check_against_reference(randn({2, 3}, 23, 1, dt), odd, tol);
    // Expanded (zero-stride) batch.
    check_against_reference(randn({1, 3, 4}, 17, 1, dt).expand({5, 3, 4}), randn({5, 4, 2}, 18, 1, dt), tol);
    // Many small products (the TBB-parallel batch loop), and a few large ones (OpenBLAS-threaded).
    check_against_reference(randn({8, 32, 10, 16}, 19, 1, dt), randn({8, 32, 12, 16}, 20, 1, dt).transpose(-1, -2), tol);
    check_against_reference(randn({2, 64, 64}, 21, 1, dt), randn({2, 64, 80}, 22, 1, dt), tol * 10);
    // Empty inner dim gives zeros.
    Tensor z = kernels::matmul(Tensor::zeros({2, 0}, dt), Tensor::zeros({0, 3}, dt));
    CHECK(z.shape() == Shape{2, 3});
    CHECK(max_abs_diff(z, Tensor::zeros({2, 3}, dt)) == 0);
  }
}

TEST_CASE("matmul reads transposed and permuted views through BLAS flags without copying") {
  // Attention: q from (B, L, H, d) permuted to (B, H, L, d); k likewise, then transposed.
  Tensor q = randn({2, 5, 4, 8}, 30, 1, DType::Float32).permute({0, 2, 1, 3});  // (B, H, L, d)
  Tensor k = randn({2, 6, 4, 8}, 31, 1, DType::Float32).permute({0, 2, 1, 3});  // (B, H, S, d)
  CHECK_FALSE(q.is_contiguous());
  int64_t before = allocations();
  Tensor scores = kernels::matmul(q, k.transpose(-1, -2));  // (B, H, L, S)
  CHECK(allocations() - before == 1);                         // the output only
  CHECK(scores.shape() == Shape{2, 4, 5, 6});
  CHECK(max_abs_diff(scores, ref_matmul(q, k.transpose(-1, -2))) < 1e-4);

  // The autograd op too, forward and backward: gradients are the only new tensors.
  Variable qv = leaf(randn({2, 4, 5, 8}, 32)), kv = leaf(randn({2, 4, 6, 8}, 33));
  before = allocations();
  Variable s = matmul(qv, Variable(kv.data().transpose(-1, -2)));
  CHECK(allocations() - before == 1);
  Tensor upstream = Tensor::ones(s.shape(), DType::Float64);
  before = allocations();
  s.backward(upstream);
  CHECK(allocations() - before == 1);  // q's gradient, which the leaf takes as its .grad without a copy
  CHECK(qv.grad().shape() == qv.shape());

  // linear on a contiguous input: the output only.
  Tensor x = randn({3, 5, 16}, 34, 1, DType::Float32), w = randn({8, 16}, 35, 1, DType::Float32);
  before = allocations();
  Tensor y = kernels::linear(x, w, Tensor());
  CHECK(allocations() - before == 1);
  CHECK(y.shape() == Shape{3, 5, 8});
}

TEST_CASE("matmul errors name both shapes") {
  Tensor a = Tensor::zeros({2, 5, 16}), b = Tensor::zeros({12, 16});
  CHECK_THROWS_WITH_AS(kernels::matmul(a, b), "matmul: (2, 5, 16) @ (12, 16): inner dims 16 and 12 differ",
                       std::invalid_argument);
  CHECK_THROWS_WITH(kernels::matmul(Tensor::zeros({2, 3, 4, 5}), Tensor::zeros({4, 5, 6})),
                    "matmul: (2, 3, 4, 5) @ (4, 5, 6): batch dims (2, 3) and (4,) cannot be broadcast");
  CHECK_THROWS_WITH(kernels::matmul(Tensor::zeros({5}), Tensor::zeros({5, 3})),
                    doctest::Contains("matmul: (5,) @ (5, 3): both operands need at least 2 dims"));
  CHECK_THROWS_WITH(kernels::matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}, DType::Float64)),
                    doctest::Contains("matmul: dtypes differ"));
  Variable x(Tensor::zeros({4, 16})), w(Tensor::zeros({8, 12}));
  CHECK_THROWS_WITH(linear(x, w), "linear: input (4, 16) and weight (8, 12): in_features 16 and 12 differ");
  CHECK_THROWS_WITH(linear(Variable(Tensor::zeros({4, 12})), w, Variable(Tensor::zeros({7}))),
                    "linear: bias (7,) does not match weight (8, 12): expected (8,)");
}

TEST_CASE("gradcheck: matmul 2-D, batched, broadcast batch dims") {
  auto mm = [](const std::vector<Variable>& in) { return matmul(in[0], in[1]); };
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({3, 4}, 40)), leaf(randn({4, 2}, 41))}));
  // (B, L, D) @ (D, E): grad_b folds the batch into one GEMM's inner dim.
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({2, 3, 4}, 42)), leaf(randn({4, 5}, 43))}));
  // a broadcast against a batched b: grad_a sums over the batch.
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({3, 4}, 44)), leaf(randn({2, 4, 5}, 45))}));
  // Both broadcast, with size-1 batch dims.
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({2, 1, 3, 4}, 46)), leaf(randn({3, 4, 2}, 47))}));
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({1, 3, 2, 4}, 48)), leaf(randn({2, 1, 4, 3}, 49))}));
  // Only one side requires grad.
  GF_CHECK_GRADS(mm, (std::vector<Variable>{Variable(randn({2, 3, 4}, 50)), leaf(randn({2, 4, 5}, 51))}));
  GF_CHECK_GRADS(mm, (std::vector<Variable>{leaf(randn({2, 3, 4}, 52)), Variable(randn({4, 5}, 53))}));
}

TEST_CASE("gradcheck: matmul with transposed (non-contiguous) operands") {
  auto mm = [](const std::vector<Variable>& in) { return matmul(in[0], in[1]); };
  // Leaves whose data are transposed views: the gradient must come back in the view's shape.
  Variable at = leaf(randn({2, 4, 3}, 60).transpose(1, 2));  // (2, 3, 4)
  Variable bt = leaf(randn({5, 4}, 61).transpose(0, 1));     // (4, 5)
  CHECK_FALSE(at.data().is_contiguous());
  GF_CHECK_GRADS(mm, (std::vector<Variable>{at, bt}));
  // Attention scores q @ k^T where k^T is transposed inside the function: g @ k flows back.
  auto scores = [](const std::vector<Variable>& in) {
    return matmul(in[0], Variable(in[1].data().transpose(-1, -2))) + matmul(in[0], in[2]);
  };
  Variable q = leaf(randn({2, 2, 3, 4}, 62)), k = Variable(randn({2, 2, 5, 4}, 63)), v = leaf(randn({2, 1, 4, 5}, 64));
  GF_CHECK_GRADS(scores, (std::vector<Variable>{q, k, v}));
  // Batched product with both operands transposed views.
  Variable a2 = leaf(randn({3, 5, 2}, 65).transpose(1, 2)), b2 = leaf(randn({3, 4, 5}, 66).transpose(1, 2));
  GF_CHECK_GRADS(mm, (std::vector<Variable>{a2, b2}));
}

TEST_CASE("linear forward values and gradcheck") {
  // x (1, 2) @ W (3, 2)^T + b
  Variable x(Tensor::of({1, 2}, {1, 2}, DType::Float64));
  Variable w(Tensor::of({1, 0, 0, 1, 1, 1}, {3, 2}, DType::Float64));
  Variable b(Tensor::of({0.5, -1, 10}, {3}, DType::Float64));
  CHECK(linear(x, w, b).data().to_vector<double>() == std::vector<double>{1.5, 1, 13});
  CHECK(linear(x, w).data().to_vector<double>() == std::vector<double>{1, 2, 3});

  auto lin = [](const std::vector<Variable>& in) { return linear(in[0], in[1], in[2]); };
  auto lin_nb = [](const std::vector<Variable>& in) { return linear(in[0], in[1]); };
  GF_CHECK_GRADS(lin, (std::vector<Variable>{leaf(randn({2, 3, 4}, 70)), leaf(randn({5, 4}, 71)), leaf(randn({5}, 72))}));
  GF_CHECK_GRADS(lin, (std::vector<Variable>{leaf(randn({4}, 73)), leaf(randn({2, 4}, 74)), leaf(randn({2}, 75))}));
  GF_CHECK_GRADS(lin_nb, (std::vector<Variable>{leaf(randn({3, 4}, 76)), leaf(randn({5, 4}, 77))}));
  // Non-contiguous input and a transposed weight view (e.g. tied embeddings stored (in, out)).
  GF_CHECK_GRADS(lin, (std::vector<Variable>{leaf(randn({4, 3}, 78).transpose(0, 1)), leaf(randn({4, 5}, 79).transpose(0, 1)),
                                            leaf(randn({5}, 80))}));
  // Only the weight requires grad, or only the bias.
  GF_CHECK_GRADS(lin, (std::vector<Variable>{Variable(randn({3, 4}, 81)), leaf(randn({2, 4}, 82)), Variable(randn({2}, 83))}));
  GF_CHECK_GRADS(lin, (std::vector<Variable>{Variable(randn({3, 4}, 84)), Variable(randn({2, 4}, 85)), leaf(randn({2}, 86))}));
}

TEST_CASE("linear agrees with matmul by the transposed weight, float32") {
  Tensor x = randn({4, 7, 16}, 90, 1, DType::Float32), w = randn({9, 16}, 91, 1, DType::Float32);
  Tensor bias = randn({9}, 92, 1, DType::Float32);
  Tensor y = kernels::linear(x, w, bias);
  Tensor want = ref_matmul(x, w.transpose(0, 1));
  for (int64_t i = 0; i < want.numel(); ++i) want.flat_set(i, want.flat_get(i) + bias.flat_get(i % 9));
  CHECK(max_abs_diff(y, want) < 1e-4);
}

TEST_CASE("gemm_flops counts 2 m n k per product, forward and backward") {
  Tensor a = Tensor::zeros({2, 3, 4}, DType::Float64), b = Tensor::zeros({4, 5}, DType::Float64);  // (2, 3, 4) (4, 5)
  uint64_t before = kernels::gemm_flops();
  Tensor c = kernels::matmul(a, b);  // (2, 3, 5): one GEMM of 6 x 5 x 4 after folding the batch
  CHECK(kernels::gemm_flops() - before == 2 * 6 * 5 * 4);
  Variable va(a, true), vb(b, true);
  Variable out = matmul(va, vb);  // (2, 3, 5)
  before = kernels::gemm_flops();
  out.backward(Tensor::ones({2, 3, 5}, DType::Float64));
  // grad a = g @ b^T (6 x 4 x 5), grad b = a^T @ g summed over the batch (4 x 5 x 6)
  CHECK(kernels::gemm_flops() - before == 2 * 6 * 4 * 5 + 2 * 4 * 5 * 6);
}

TEST_CASE("gemm_flops sums what every thread counted (one slot per thread)") {
  const uint64_t before = kernels::gemm_flops();
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 1000; ++i) kernels::count_gemm_flops(static_cast<uint64_t>(t + 1));
    });
  for (auto& th : threads) th.join();
  kernels::count_gemm_flops(7);  // and this thread
  CHECK(kernels::gemm_flops() - before == 1000 * (1 + 2 + 3 + 4 + 5) + 7);
}

TEST_CASE("GEMMs cut across TBB threads (GRADFLOW_GEMM_THREADS=tbb) equal OpenBLAS's own threading") {
  Generator gen(3);
  // Tall, wide (cut by columns) and odd sizes, plain and transposed operands, float64 so that
  // any slab placed at the wrong offset shows as a difference far above rounding.
  const std::vector<std::array<int64_t, 3>> sizes = {{300, 70, 129}, {33, 517, 65}, {1025, 256, 257}};
  for (auto [m, k, n] : sizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = ta ? kernels::randn({k, m}, gen, DType::Float64).transpose(0, 1) : kernels::randn({m, k}, gen, DType::Float64);
        Tensor b = tb ? kernels::randn({n, k}, gen, DType::Float64).transpose(0, 1) : kernels::randn({k, n}, gen, DType::Float64);
        set_gemm_on_tbb(false);
        Tensor ref = kernels::matmul(a, b);  // (m, n)
        set_gemm_on_tbb(true);
        Tensor cut = kernels::matmul(a, b);  // (m, n)
        set_gemm_on_tbb(false);
        double worst = 0;
        for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::abs(ref.flat_get(i) - cut.flat_get(i)));
        INFO("m ", m, " k ", k, " n ", n, " ta ", ta, " tb ", tb);
        CHECK(worst < 1e-12);
      }
}

TEST_CASE("while decoding (SmallRowsGemmScope), products are cut into fixed column blocks with the same results") {
  // Column blocks of 128 and 192 (n = 1,000 and 1,500, and a last partial block), every transpose,
  // through matmul and linear; 1 and 2 threads give the same bits (blocks are fixed by the shape).
  Generator gen(9);
  const int old_threads = max_threads();
  for (int64_t n : {1000, 1500}) {
    const int64_t m = 64, k = 96;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = ta ? kernels::randn({k, m}, gen, DType::Float64).transpose(0, 1) : kernels::randn({m, k}, gen, DType::Float64);
        Tensor b = tb ? kernels::randn({n, k}, gen, DType::Float64).transpose(0, 1) : kernels::randn({k, n}, gen, DType::Float64);
        Tensor ref = kernels::matmul(a, b);  // (m, n): one slab per thread, or one call
        std::vector<std::vector<double>> cut;
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          kernels::SmallRowsGemmScope decoding;
          cut.push_back(kernels::matmul(a, b).to_vector<double>());  // (m, n) in column blocks
        }
        set_num_threads(old_threads);
        INFO("n ", n, " ta ", ta, " tb ", tb);
        CHECK(cut[0] == cut[1]);
        double worst = 0;
        for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::abs(ref.flat_get(i) - cut[1][static_cast<size_t>(i)]));
        CHECK(worst < 1e-12);
      }
  }
  // linear: x (64, 96) @ W (1000, 96)^T + bias.
  Tensor x = kernels::randn({64, 96}, gen, DType::Float64), w = kernels::randn({1000, 96}, gen, DType::Float64),
         bias = kernels::randn({1000}, gen, DType::Float64);
  Tensor ref = kernels::linear(x, w, bias);  // (64, 1000)
  set_num_threads(2);
  std::vector<double> cut;
  {
    kernels::SmallRowsGemmScope decoding;
    cut = kernels::linear(x, w, bias).to_vector<double>();  // (64, 1000)
  }
  set_num_threads(old_threads);
  double worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::abs(ref.flat_get(i) - cut[static_cast<size_t>(i)]));
  CHECK(worst < 1e-12);
}

TEST_CASE("decoding's column blocks: 64 columns where OpenBLAS's small path then takes the product, else about an eighth") {
  // The small path: m * n * k <= 100^3 with B read as stored (the column-major weights of decoding).
  CHECK(kernels::decode_column_block(true, false, 32, 768, 256) == 64);   // 32 * 64 * 256 = 524,288
  CHECK(kernels::decode_column_block(true, false, 61, 5921, 256) == 64);  // 999,424
  CHECK(kernels::decode_column_block(true, false, 62, 5921, 256) == 768); // 1,015,808: over
  CHECK(kernels::decode_column_block(true, false, 32, 256, 1024) == 128); // 2,097,152: over
  CHECK(kernels::decode_column_block(true, true, 32, 768, 256) == 128);   // row-major weights: packed anyway
  CHECK(kernels::decode_column_block(false, false, 32, 768, 256) == 128); // a kernel without the path
  CHECK(kernels::decode_column_block(false, false, 32, 1500, 256) == 192);
}

TEST_CASE("decoding a group's float32 product through the small path's blocks: 1 and 2 threads give the same bits, near one call") {
  // 32 x 256 by 256 x 768, B column-major as lay_out_for_decoding leaves weights; with an AVX-512
  // OpenBLAS kernel this runs in blocks of 64, otherwise of 128.
  Generator gen(4);
  const int old_threads = max_threads();
  Tensor x = kernels::randn({32, 256}, gen, DType::Float32);
  Tensor w = kernels::randn({256, 768}, gen, DType::Float32).transpose(0, 1);  // (768, 256), strides (1, 768)
  Tensor bias = kernels::randn({768}, gen, DType::Float32);
  Tensor ref = kernels::linear(x, w, bias);  // (32, 768): one call
  std::vector<std::vector<float>> cut;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    kernels::SmallRowsGemmScope decoding;
    cut.push_back(kernels::linear(x, w, bias).to_vector<float>());  // (32, 768) in column blocks
  }
  set_num_threads(old_threads);
  CHECK(cut[0] == cut[1]);
  double worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::abs(ref.flat_get(i) - cut[1][static_cast<size_t>(i)]));
  CHECK(worst < 1e-3);
}

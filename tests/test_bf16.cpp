// bfloat16 products (--precision bf16), on both paths (tensor/kernels/bf16.h): the portable path
// runs on every CPU and the native one (AVX512-BF16: vcvtneps2bf16, oneDNN, the vdpbf16ps tiles)
// where it can, and every kernel and op test runs on each path there is, against the same plain
// reference; where both exist they are also compared with each other. Also: the conversion's bits
// against its scalar reference, the ops that use the products (linear, linear_cross_entropy, fused
// attention) against float64 computations on the same rounded operands, the switches (precision,
// path, GRADFLOW_BF16), and the CPU check (CPUID and the OS's AVX-512 state).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/layer_norm.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "nn_test_util.h"
#include "rounding.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/attention.h"
#include "tensor/kernels/bf16_tile.h"
#include "tensor/kernels/layer_norm.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/reduce.h"
#include "tensor/kernels/random.h"
#include "tensor/cpu_features.h"
#include "tensor/parallel.h"
#include "tests/fault_util.h"

using namespace gf;
using namespace gf::testing;

namespace {

using kernels::Bf16Path;
constexpr double kU = 1.0 / 256;  // bfloat16's unit roundoff, 2^-8

std::vector<float> random_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<bfloat16> rounded(const std::vector<float>& v) {
  std::vector<bfloat16> out(v.size());
  kernels::to_bf16_reference(v.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

Tensor tensor_of(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// x rounded to bfloat16 (by the scalar bfloat16(float), on no path) and back, as float64: the value
// a bf16 product multiplies.
Tensor rounded64(const Tensor& x) { return x.to(DType::BFloat16).to(DType::Float32).to(DType::Float64); }

// The largest |a - b| over `tol` elementwise (both float64-convertible, same shape): <= 1 passes.
double worst_ratio(const Tensor& a, const Tensor& b, const Tensor& tol) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(a.flat_get(i) - b.flat_get(i)) / tol.flat_get(i));
  return worst;
}

// Every path this machine can run: the portable one always, the native one where it can run. A
// machine without the native path says so in the test log (doctest's MESSAGE).
std::vector<Bf16Path> paths() {
  if (kernels::bf16_native_available()) return {Bf16Path::Portable, Bf16Path::Native};
  static bool said = false;  // once in the log, in the first test case that asks
  if (!std::exchange(said, true))
    MESSAGE("the native bf16 path cannot run here (", kernels::bf16_native_unavailable_reason(), "): the portable path only");
  return {Bf16Path::Portable};
}

// `run()` on each path, under a Bf16PathScope; the path is named in every failure.
template <class F>
void on_each_path(F run) {
  for (Bf16Path p : paths()) {
    kernels::Bf16PathScope scope(p);
    INFO("bf16 path: ", std::string(kernels::bf16_path_name(p)));
    run(p);
  }
}

// The output and exit status of a shell command.
std::pair<std::string, int> shell(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = ::pclose(f);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace

TEST_CASE("bfloat16 from float: round to nearest even, subnormals to zero, NaN kept") {
  auto bits = [](float f) { return bfloat16(f).bits; };
  CHECK(bits(1.0f) == 0x3f80);
  CHECK(bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // 1 + 2^-8: a tie, to the even neighbour
  CHECK(bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // 1 + 3 * 2^-8: a tie, up to the even one
  CHECK(bits(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // just above the tie
  CHECK(bits(-2.5f) == 0xc020);
  CHECK(bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
  CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bits(1e-40f) == 0x0000);                             // subnormal
  CHECK(bits(-1e-40f) == 0x8000);
  CHECK(bits(std::numeric_limits<float>::min()) == 0x0080);  // the smallest normal stays
  CHECK(std::isnan(static_cast<float>(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(static_cast<float>(bfloat16(std::bit_cast<float>(0x7f800001u)))));  // a NaN whose payload is in the dropped bits
  // From float64, rounded once: 1 + 2^-8 + 2^-40 is above the tie (through float32 it would be one).
  CHECK(bfloat16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)).bits == 0x3f81);
  CHECK(bfloat16(1.0 + std::ldexp(1.0, -8)).bits == 0x3f80);
  CHECK(static_cast<float>(bfloat16(3.140625f)) == 3.140625f);  // 8 significant bits: exact
}

TEST_CASE("bfloat16 tensors: conversions, copies and safetensors names") {
  Tensor x = Tensor::of({1.0, -2.0, 0.1, 1e-45}, {2, 2});
  Tensor b = x.to(DType::BFloat16);
  CHECK(b.dtype() == DType::BFloat16);
  CHECK(b.nbytes() == 8);
  CHECK(b.flat_get(0) == 1.0);
  CHECK(b.flat_get(2) == static_cast<double>(static_cast<float>(bfloat16(0.1f))));
  CHECK(b.flat_get(3) == 0.0);
  CHECK(b.transpose(0, 1).contiguous().flat_get(1) == b.flat_get(2));
  CHECK(std::string(dtype_name(DType::BFloat16)) == "bfloat16");
  CHECK_FALSE(is_floating(DType::BFloat16));  // no op but the products takes it
}

TEST_CASE("AVX-512 is used only where the OS has enabled its vector state (XGETBV) beside the CPUID flag") {
  CHECK(avx512_state_enabled(0xe7));
  CHECK(avx512_state_enabled(0x2ff));                      // AMX's tile state besides
  CHECK_FALSE(avx512_state_enabled(0x07));                 // x87, SSE, AVX: an OS that never enabled AVX-512
  CHECK_FALSE(avx512_state_enabled(0xe7 & ~(1u << 5)));    // no opmask state
  CHECK_FALSE(avx512_state_enabled(0xe7 & ~(1u << 6)));    // no upper halves of ZMM0-15
  CHECK_FALSE(avx512_state_enabled(0xe7 & ~(1u << 7)));    // no ZMM16-31
  CHECK_FALSE(avx512_state_enabled(0xe7 & ~(1u << 2)));    // no YMM state
  CpuFeatures f;
  f.osxsave = true, f.xcr0 = 0xe7, f.avx512f = f.avx512bw = f.avx512_bf16 = true;
  CHECK(avx512_bf16_unusable_reason(f).empty());
  CpuFeatures no_state = f;
  no_state.xcr0 = 0x07;  // the CPU has the instructions, the OS does not save their registers
  CHECK(avx512_bf16_unusable_reason(no_state).find("operating system has not enabled the AVX-512 register state (XCR0 = 0x7") !=
        std::string::npos);
  CpuFeatures no_xsave = f;
  no_xsave.osxsave = false, no_xsave.xcr0 = 0;
  CHECK(avx512_bf16_unusable_reason(no_xsave).find("operating system has not enabled") != std::string::npos);
  CpuFeatures no_bf16 = f;
  no_bf16.avx512_bf16 = false;
  CHECK(avx512_bf16_unusable_reason(no_bf16) == "this CPU has no AVX512-BF16 instructions (vdpbf16ps)");
  // This machine: the native path runs only with both.
  const CpuFeatures& here = cpu_features();
  if (kernels::bf16_native_available()) CHECK((here.avx512_bf16 && here.osxsave && avx512_state_enabled(here.xcr0)));
  CHECK(avx512_usable() == (here.avx512f && here.avx512bw && here.avx512dq && here.avx512vl && here.osxsave && avx512_state_enabled(here.xcr0)));
}

TEST_CASE("the switches: bf16 runs on every CPU, natively where it can, and the portable path can be forced") {
  {
    kernels::PrecisionScope scope(Precision::BFloat16);
    CHECK(kernels::precision() == Precision::BFloat16);
    CHECK(kernels::bf16_products(DType::Float32));
    CHECK_FALSE(kernels::bf16_products(DType::Float64));  // float64 is never rounded
  }
  CHECK(kernels::precision() == Precision::Float32);  // the scope put it back
  CHECK(parse_precision("bf16", "--precision") == Precision::BFloat16);
  CHECK_THROWS_WITH_AS(parse_precision("fp16", "--precision"), doctest::Contains("--precision must be fp32 or bf16, got 'fp16'"),
                       std::invalid_argument);
  // The default path: native exactly where it can run, unless GRADFLOW_BF16=portable runs this test.
  const char* env = std::getenv("GRADFLOW_BF16");
  const bool native = kernels::bf16_native_available(), forced = env && std::string(env) == "portable";
  const Bf16Path by_default = native && !forced ? Bf16Path::Native : Bf16Path::Portable;
  CHECK(kernels::bf16_path() == by_default);
  {
    kernels::Bf16PathScope portable(Bf16Path::Portable);
    CHECK(kernels::bf16_path() == Bf16Path::Portable);
  }
  CHECK(kernels::bf16_path() == by_default);
  if (!native)
    CHECK_THROWS_WITH_AS(kernels::set_bf16_path(Bf16Path::Native), doctest::Contains("the native bf16 path cannot run here"), std::runtime_error);
  // The command line: GRADFLOW_BF16 forces the portable path, and a wrong value is refused.
  const std::string gradflow = std::string(GRADFLOW_BINARY_DIR) + "/gradflow";
  const auto [portable_out, portable_rc] = shell("GRADFLOW_BF16=portable " + gradflow + " info");
  CHECK(portable_rc == 0);
  CHECK(portable_out.find("bfloat16 products (--precision bf16): portable path") != std::string::npos);
  const auto [plain, plain_rc] = shell("env -u GRADFLOW_BF16 " + gradflow + " info");
  CHECK(plain_rc == 0);
  CHECK(plain.find(native ? "bfloat16 products (--precision bf16): native path; oneDNN runs them with"
                          : "bfloat16 products (--precision bf16): portable path") != std::string::npos);
  const auto [bad, bad_rc] = shell("GRADFLOW_BF16=fast " + gradflow + " info");
  CHECK(bad_rc != 0);
  CHECK(bad.find("GRADFLOW_BF16 must be 'portable', 'auto' or unset, got 'fast'") != std::string::npos);
}

TEST_CASE("to_bf16 and to_bf16_in_place give the reference's bits, on each path") {
  std::mt19937_64 rng(7);
  std::vector<float> v;
  for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));  // every class of value
  for (float s : {0.0f, -0.0f, 1e-40f, -1e-40f, 1e-45f, std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x7f7f8000u)})
    v.push_back(s);
  on_each_path([&](Bf16Path) {
    for (int64_t n : {int64_t(v.size()), int64_t(17), int64_t(5)}) {  // whole vectors and masked tails
      std::vector<bfloat16> fast(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      kernels::to_bf16(v.data(), fast.data(), n);
      kernels::to_bf16_reference(v.data(), ref.data(), n);
      std::vector<float> in_place(v.begin(), v.begin() + n);
      kernels::to_bf16_in_place(in_place.data(), n);
      int64_t differ = 0, differ_in_place = 0;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits = 0;
        std::memcpy(&bits, reinterpret_cast<const char*>(in_place.data()) + 2 * i, 2);
        differ += fast[i].bits != ref[i].bits;
        differ_in_place += bits != ref[i].bits;
      }
      INFO("n ", n);
      CHECK(differ == 0);
      CHECK(differ_in_place == 0);
    }
  });
}

TEST_CASE("gemm_bf16 against the plain reference on each path, every layout, cut across threads or not; the paths against each other") {
  struct Dims {
    int64_t m, n, k;
  };
  for (Dims d : {Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{70, 33, 129}, Dims{600, 200, 64}, Dims{64, 700, 300}, Dims{9, 40, 1500}})
    for (int t = 0; t < 8; ++t) {
      const bool ta = t & 1, tb = t & 2, acc = t & 4;
      const int64_t lda = (ta ? d.m : d.k) + 3, ldb = (tb ? d.k : d.n) + 5, ldc = d.n + 2;  // leading dims beyond the extents
      const std::vector<bfloat16> a = rounded(random_floats((ta ? d.k : d.m) * lda, 1)), b = rounded(random_floats((tb ? d.n : d.k) * ldb, 2));
      const std::vector<float> bias = random_floats(d.n, 3), c0 = random_floats(d.m * ldc, 4);
      std::vector<float> ref = c0;
      kernels::gemm_bf16_reference(ta, tb, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, acc ? 1.0f : 0.0f, ref.data(), ldc,
                                   t % 3 ? bias.data() : nullptr);
      // Each element's tolerance: a float32 sum of exact bfloat16 products, in some order.
      std::vector<double> tol(static_cast<size_t>(d.m * ldc), 0.0);
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) {
          double mag = std::abs(acc ? c0[i * ldc + j] : 0.0) + (t % 3 ? std::abs(bias[j]) : 0.0);
          for (int64_t p = 0; p < d.k; ++p)
            mag += std::abs(static_cast<float>(ta ? a[p * lda + i] : a[i * lda + p]) * static_cast<float>(tb ? b[j * ldb + p] : b[p * ldb + j]));
          tol[i * ldc + j] = two_orders_tolerance(d.k + 2, mag, DType::Float32);
        }
      INFO("m ", d.m, " n ", d.n, " k ", d.k, " ta ", ta, " tb ", tb, " beta ", acc);
      std::vector<std::vector<float>> results;
      on_each_path([&](Bf16Path) {
        std::vector<float> c = c0;
        const uint64_t flops0 = kernels::gemm_flops();
        kernels::gemm_bf16(ta, tb, d.m, d.n, d.k, a.data(), lda, b.data(), ldb, acc ? 1.0f : 0.0f, c.data(), ldc, t % 3 ? bias.data() : nullptr);
        CHECK(kernels::gemm_flops() - flops0 == static_cast<uint64_t>(2 * d.m * d.n * d.k));
        double worst = 0;
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) worst = std::max(worst, std::abs(c[i * ldc + j] - ref[i * ldc + j]) / tol[i * ldc + j]);
        CHECK(worst <= 1.0);
        for (int64_t i = 0; i < d.m; ++i)  // the leading dims' gaps are never written
          for (int64_t j = d.n; j < ldc; ++j) CHECK(c[i * ldc + j] == c0[i * ldc + j]);
        results.push_back(std::move(c));
      });
      if (results.size() == 2) {  // portable against native (oneDNN): two float32 orders of the same exact products
        double worst = 0;
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) worst = std::max(worst, std::abs(results[0][i * ldc + j] - results[1][i * ldc + j]) / tol[i * ldc + j]);
        CHECK(worst <= 1.0);
      }
    }
}

TEST_CASE("gemm_bf16 while decoding: blocks fixed by the shape, the same bits on 1 and 2 threads, on each path") {
  const int64_t m = 32, n = 768, k = 256;
  const std::vector<bfloat16> a = rounded(random_floats(m * k, 5)), b = rounded(random_floats(n * k, 6));
  kernels::SmallRowsGemmScope decoding;
  on_each_path([&](Bf16Path) {
    std::vector<float> one(m * n), two(m * n);
    set_num_threads(1);
    kernels::gemm_bf16(false, true, m, n, k, a.data(), k, b.data(), k, 0.0f, one.data(), n);
    set_num_threads(2);
    kernels::gemm_bf16(false, true, m, n, k, a.data(), k, b.data(), k, 0.0f, two.data(), n);
    CHECK(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()) == 0);
  });
}

// k > 1024 with B read transposed reaches the native kernel's packing of B^T in chunks of 512
// pairs (pack_b in bf16_tile.cpp): a chunk boundary inside k, and an odd k's padding in the last.
TEST_CASE("tile_gemm_bf16 against the plain reference on each path: float and bfloat16 operands, every layout, k past 1024") {
  struct Dims {
    int64_t m, n, k;
  };
  kernels::TileWorkspace ws;
  auto run = [&]<class TA, class TB>(Dims d, bool ta, bool tb, float alpha, float beta) {
    const int64_t lda = (ta ? d.m : d.k) + 1, ldb = (tb ? d.k : d.n) + 2, ldc = d.n + 3;
    const std::vector<float> af = random_floats((ta ? d.k : d.m) * lda, 11), bf = random_floats((tb ? d.n : d.k) * ldb, 12);
    std::vector<TA> a(af.size());
    std::vector<TB> b(bf.size());
    for (size_t i = 0; i < af.size(); ++i) a[i] = static_cast<TA>(af[i]);
    for (size_t i = 0; i < bf.size(); ++i) b[i] = static_cast<TB>(bf[i]);
    const std::vector<float> c0 = random_floats(d.m * ldc, 13);
    std::vector<float> ref = c0;
    kernels::tile_gemm_bf16_reference(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
    std::vector<double> tol(static_cast<size_t>(d.m * ldc), 0.0);
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        double mag = std::abs(beta * c0[i * ldc + j]);
        for (int64_t p = 0; p < d.k; ++p)
          mag += std::abs(alpha * af[ta ? p * lda + i : i * lda + p] * bf[tb ? j * ldb + p : p * ldb + j]) * (1 + 2 * kU);
        tol[i * ldc + j] = two_orders_tolerance(d.k + 2, mag, DType::Float32);
      }
    INFO("m ", d.m, " n ", d.n, " k ", d.k, " ta ", ta, " tb ", tb, " beta ", beta);
    std::vector<std::vector<float>> results;
    on_each_path([&](Bf16Path) {
      std::vector<float> c = c0;
      kernels::tile_gemm_bf16(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, ws);
      double worst = 0;
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          if (j >= d.n) {
            CHECK(c[i * ldc + j] == c0[i * ldc + j]);
            continue;
          }
          worst = std::max(worst, std::abs(c[i * ldc + j] - ref[i * ldc + j]) / tol[i * ldc + j]);
        }
      CHECK(worst <= 1.0);
      results.push_back(std::move(c));
    });
    if (results.size() == 2) {  // the portable path against vdpbf16ps
      double worst = 0;
      for (int64_t i = 0; i < d.m; ++i)
        for (int64_t j = 0; j < d.n; ++j) worst = std::max(worst, std::abs(results[0][i * ldc + j] - results[1][i * ldc + j]) / tol[i * ldc + j]);
      CHECK(worst <= 1.0);
    }
  };
  for (Dims d : {Dims{1, 1, 1}, Dims{5, 13, 7}, Dims{64, 13, 64}, Dims{64, 64, 13}, Dims{13, 64, 64}, Dims{70, 100, 33}, Dims{3, 21, 1025},
                 Dims{7, 17, 2051}, Dims{2, 5, 3072}})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      run.operator()<float, bfloat16>(d, ta, tb, 0.125f, 0.0f);
      run.operator()<bfloat16, bfloat16>(d, ta, tb, 1.0f, 1.0f);
      run.operator()<bfloat16, float>(d, ta, tb, 0.5f, 1.0f);
      run.operator()<float, float>(d, ta, tb, 1.0f, 0.0f);
    }
}

TEST_CASE("linear under bf16: output and gradients are float32 sums of the rounded operands' products, on each path") {
  on_each_path([&](Bf16Path) {
    const int64_t N = 37, in = 70, out = 45;
    Variable x(tensor_of(random_floats(N * in, 21), {N, in}), true), w(tensor_of(random_floats(out * in, 22, 0.2f), {out, in}), true),
        b(tensor_of(random_floats(out, 23), {out}), true);
    const Tensor g = tensor_of(random_floats(N * out, 24), {N, out});  // upstream gradient
    Variable y;
    {
      kernels::PrecisionScope bf16(Precision::BFloat16);
      y = linear(x, w, b);
      sum(y * Variable(g)).backward();
    }
    // float64 on the rounded operands: what the bf16 products compute, up to float32 accumulation.
    const Tensor x64 = rounded64(x.data()), w64 = rounded64(w.data()), g64 = rounded64(g);
    const Tensor y_ref = kernels::linear(x64, w64, b.data().to(DType::Float64));
    const Tensor gx_ref = kernels::matmul(g64, w64), gw_ref = kernels::matmul(g64.transpose(0, 1), x64);
    auto abs64 = [](const Tensor& t) {
      Tensor r = t.contiguous().clone();
      for (int64_t i = 0; i < r.numel(); ++i) r.flat_set(i, std::abs(r.flat_get(i)));
      return r;
    };
    // two_orders_tolerance per element, from the magnitudes |A| @ |B| (+ |bias|) of its terms.
    auto tolerance = [](Tensor mag, int64_t k) {
      for (int64_t i = 0; i < mag.numel(); ++i) mag.flat_set(i, two_orders_tolerance(k + 1, mag.flat_get(i), DType::Float32) + 1e-30);
      return mag;
    };
    const Tensor y_mag = kernels::linear(abs64(x64), abs64(w64), abs64(b.data().to(DType::Float64)));
    CHECK(worst_ratio(y.data(), y_ref, tolerance(y_mag, in)) <= 1.0);
    CHECK(worst_ratio(x.grad(), gx_ref, tolerance(kernels::matmul(abs64(g64), abs64(w64)), out)) <= 1.0);
    CHECK(worst_ratio(w.grad(), gw_ref, tolerance(kernels::matmul(abs64(g64).transpose(0, 1), abs64(x64)), N)) <= 1.0);
    CHECK(worst_ratio(b.grad(), kernels::sum(g.to(DType::Float64), {0}, false), Tensor::full({out}, 1e-5, DType::Float64)) <= 1.0);
    // And the rounding did happen: float32 products differ from these by about u = 2^-8 relative.
    const Tensor y32 = kernels::linear(x.data(), w.data(), b.data());
    double most = 0;
    for (int64_t i = 0; i < y32.numel(); ++i) most = std::max(most, std::abs(y32.flat_get(i) - y.data().flat_get(i)));
    CHECK(most > 1e-3);
  });
}

TEST_CASE("linear_cross_entropy under bf16 equals linear + cross_entropy under bf16, on each path") {
  on_each_path([&](Bf16Path) {
    const int64_t N = 50, D = 24, V = 31;
    kernels::PrecisionScope bf16(Precision::BFloat16);
    Tensor tgt = Tensor::empty({N}, DType::Int64);
    for (int64_t i = 0; i < N; ++i) tgt.flat_set(i, i % 7 == 0 ? 0 : (i * 5) % V);  // some ignored (0)
    const Tensor h0 = tensor_of(random_floats(N * D, 31), {N, D}), w0 = tensor_of(random_floats(V * D, 32, 0.3f), {V, D}),
                 b0 = tensor_of(random_floats(V, 33), {V});
    Variable h1(h0.clone(), true), w1(w0.clone(), true), b1(b0.clone(), true);
    Variable h2(h0.clone(), true), w2(w0.clone(), true), b2(b0.clone(), true);
    Variable fused = linear_cross_entropy(h1, w1, b1, tgt, 0, 0.1, 7);  // chunks of 7 rows
    Variable plain = cross_entropy(linear(h2, w2, b2), tgt, 0, 0.1);
    fused.backward();
    plain.backward();
    CHECK(fused.item() == doctest::Approx(plain.item()).epsilon(1e-6));
    for (auto [a, b] : {std::pair{h1.grad(), h2.grad()}, {w1.grad(), w2.grad()}, {b1.grad(), b2.grad()}})
      for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.flat_get(i) == doctest::Approx(b.flat_get(i)).epsilon(1e-5).scale(1e-3));
  });
}

// Several tiles (D from row_sums_of_p_dp), then the default blocks: one tile per head, where the
// backward makes D inside its tile.
TEST_CASE("fused attention under bf16: within the bfloat16 rounding of float64, far outside float32's, on each path") {
  for (const int64_t block : {7, 0}) {
    on_each_path([&](Bf16Path) {
      INFO("blocks ", block == 0 ? "default (one tile)" : "8 x 7");
      const int64_t B = 2, L = 19, S = 23, H = 2, dk = 16;
      const Tensor q0 = tensor_of(random_floats(B * L * H * dk, 41), {B, L, H * dk}), k0 = tensor_of(random_floats(B * S * H * dk, 42), {B, S, H * dk}),
                   v0 = tensor_of(random_floats(B * S * H * dk, 43), {B, S, H * dk}), g0 = tensor_of(random_floats(B * L * H * dk, 44), {B, L, H * dk});
      FusedAttentionOptions o;
      o.heads = o.kv_heads = H;
      o.scale = 1.0 / std::sqrt(double(dk));
      if (block != 0) o.block_q = 8, o.block_k = block;  // several tiles, none dividing the lengths
      auto run = [&](DType dtype, bool bf16) {
        std::optional<kernels::PrecisionScope> scope;
        if (bf16) scope.emplace(Precision::BFloat16);
        Variable q(q0.to(dtype), true), k(k0.to(dtype), true), v(v0.to(dtype), true);
        Variable out = fused_attention(q, k, v, o);
        sum(out * Variable(g0.to(dtype))).backward();
        return std::vector<Tensor>{out.data(), q.grad(), k.grad(), v.grad()};
      };
      const std::vector<Tensor> exact = run(DType::Float64, false), f32 = run(DType::Float32, false), b16 = run(DType::Float32, true);
      for (size_t i = 0; i < exact.size(); ++i) {
        double err32 = 0, err16 = 0, scale = max_abs(exact[i]);
        for (int64_t j = 0; j < exact[i].numel(); ++j) {
          err32 = std::max(err32, std::abs(f32[i].flat_get(j) - exact[i].flat_get(j)));
          err16 = std::max(err16, std::abs(b16[i].flat_get(j) - exact[i].flat_get(j)));
        }
        INFO("tensor ", i, ": float32 error ", err32 / scale, ", bf16 error ", err16 / scale, " of max |value| ", scale);
        CHECK(err16 <= 4 * kU * scale);  // each product's operands rounded once: about u of the largest value (docs/performance.md, bfloat16)
        CHECK(err16 > 16 * err32);        // and the products really were rounded
      }
    });
  }
}

namespace {
// Whether b (bfloat16) holds exactly the bits to_bf16_reference gives for a (float32), elementwise.
bool same_as_rounded(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const Tensor ac = a.contiguous();
  std::vector<bfloat16> want(static_cast<size_t>(ac.numel()));
  kernels::to_bf16_reference(ac.data<float>(), want.data(), ac.numel());
  const bfloat16* got = b.contiguous().data<bfloat16>();
  for (int64_t i = 0; i < ac.numel(); ++i)
    if (got[i].bits != want[static_cast<size_t>(i)].bits) return false;
  return true;
}
}  // namespace

TEST_CASE("to_bf16_and_column_sums: to_bf16's bits and sum(x, {0})'s bits in one pass, on each path, any thread count") {
  on_each_path([&](Bf16Path) {
    for (const Shape& shape : {Shape{1, 5}, Shape{37, 70}, Shape{3001, 33}}) {  // one row; one block; many blocks with a short last one
      const Tensor x = tensor_of(random_floats(shape_numel(shape), 61), shape);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        Tensor sums;
        const Tensor b = kernels::to_bf16_and_column_sums(x, sums);
        set_num_threads(0);
        CHECK(same_as_rounded(x, b));
        CHECK(sums.to_vector<float>() == kernels::sum(x, {0}, false).to_vector<float>());
      }
    }
  });
}

TEST_CASE("the bfloat16 copies written with an op's output (layer norm, add_layer_norm, relu + dropout, attention) are to_bf16's bits") {
  on_each_path([&](Bf16Path) {
    const Tensor x = tensor_of(random_floats(41 * 3 * 40, 62), {41, 3, 40}), y = tensor_of(random_floats(41 * 3 * 40, 63), {41, 3, 40});
    const Tensor w = tensor_of(random_floats(40, 64), {40}), b = tensor_of(random_floats(40, 65), {40});
    Tensor ob;
    kernels::LayerNormResult ln = kernels::layer_norm(x, w, b, 1e-5, &ob);
    CHECK(same_as_rounded(ln.out, ob));
    CHECK(ln.out.to_vector<float>() == kernels::layer_norm(x, w, b, 1e-5).out.to_vector<float>());  // the float32 output unchanged
    Generator g1(7);
    Tensor keep, ob2;
    kernels::LayerNormResult aln = kernels::add_layer_norm(x, y, 0.1, 1.0 / 0.9, g1, keep, w, b, 1e-5, &ob2);
    CHECK(same_as_rounded(aln.out, ob2));
    Generator g2(8);
    Tensor ob3;
    const Tensor rd = kernels::relu_dropout_forward(tensor_of(random_floats(3 * 3001, 66), {3, 3001}), 0.2, 1.25, g2, &ob3);  // chunks of 1,024 and a short one
    CHECK(same_as_rounded(rd, ob3));
    kernels::AttentionConfig cfg;
    cfg.heads = cfg.kv_heads = 2;
    cfg.scale = 0.25;
    cfg.out_bf16 = true;
    const Tensor q = tensor_of(random_floats(2 * 9 * 32, 67), {2, 9, 32}).to(DType::BFloat16);
    const Tensor k = tensor_of(random_floats(2 * 11 * 32, 68), {2, 11, 32}).to(DType::BFloat16);
    kernels::AttentionForward at = kernels::attention_forward(q, k, k, cfg);
    CHECK(same_as_rounded(at.out, at.out_bf16));
  });
}

TEST_CASE("linear under bf16 reads the bfloat16 copy its input's op wrote: the same bits as rounding the input itself") {
  on_each_path([&](Bf16Path) {
    kernels::PrecisionScope bf16(Precision::BFloat16);
    const Tensor x0 = tensor_of(random_floats(23 * 48, 71), {23, 48}), w0 = tensor_of(random_floats(17 * 48, 72, 0.2f), {17, 48});
    Variable x(x0, true), w(w0, true), nw(Tensor::ones({48}), true), nb(Tensor::zeros({48}), true);
    Variable h = layer_norm(x, nw, nb);
    REQUIRE(h.bf16_copy().defined());  // layer norm wrote it under bf16
    Variable plain(h.data().clone());  // the same values, without a copy: linear rounds them itself
    CHECK_FALSE(plain.bf16_copy().defined());
    CHECK(linear(h, w).data().to_vector<float>() == linear(plain, w).data().to_vector<float>());
    // set_data drops the copy (it would no longer match the data).
    Variable z = layer_norm(x, nw, nb);
    z.set_data(Tensor::zeros({23, 48}));
    CHECK_FALSE(z.bf16_copy().defined());
    // No copy outside bf16.
    kernels::PrecisionScope fp32(Precision::Float32);
    CHECK_FALSE(layer_norm(x, nw, nb).bf16_copy().defined());
  });
}

namespace {
// The tensor a node saved under `name` (undefined if it saved none by that name).
Tensor saved_by(const Variable& v, const std::string& name) {
  for (auto& [n, t] : v.grad_fn()->saved())
    if (name == n) return *t;
  return Tensor();
}
}  // namespace

TEST_CASE("under bf16 the feed-forward block's hidden layer is kept once, in bfloat16; the attention keeps no output") {
  on_each_path([&](Bf16Path) {
    kernels::PrecisionScope bf16(Precision::BFloat16);
    const int64_t N = 29, D = 24, F = 70;
    const Tensor x0 = tensor_of(random_floats(N * D, 81), {N, D}), w10 = tensor_of(random_floats(F * D, 82, 0.3f), {F, D}),
                 b10 = tensor_of(random_floats(F, 83), {F}), w20 = tensor_of(random_floats(D * F, 84, 0.2f), {D, F}),
                 b20 = tensor_of(random_floats(D, 85), {D}), up = tensor_of(random_floats(N * D, 86), {N, D});
    auto run = [&](bool keep_copy, bool& f32_freed) {
      Variable x(x0.clone(), true), w1(w10.clone(), true), b1(b10.clone(), true), w2(w20.clone(), true), b2(b20.clone(), true);
      Generator g(5);
      Variable h = relu_dropout(linear(x, w1, b1), 0.25, true, g);  // (N, F)
      REQUIRE(h.bf16_copy().defined());
      CHECK(saved_by(h, "out").dtype() == DType::BFloat16);  // relu_dropout's backward reads the copy's signs
      if (!keep_copy) h.set_bf16_copy(Tensor());               // the reference: linear rounds h itself and keeps it in float32
      const std::weak_ptr<Storage> f32 = h.data().storage();
      Variable y = linear(h, w2, b2);  // (N, D)
      CHECK(saved_by(y, "x2b").defined() == keep_copy);
      CHECK(saved_by(y, "x2").defined() == !keep_copy);
      h = Variable();
      f32_freed = f32.expired();
      sum(y * Variable(up)).backward();
      return std::vector<Tensor>{y.data(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
    };
    bool freed = false, freed_ref = false;
    const auto kept = run(true, freed), ref = run(false, freed_ref);
    CHECK(freed);           // only the bfloat16 copy outlives the forward
    CHECK_FALSE(freed_ref);  // the float32 hidden layer, kept by the linear
    for (size_t i = 0; i < kept.size(); ++i) CHECK(kept[i].to_vector<float>() == ref[i].to_vector<float>());
    // relu_dropout's backward from the copy's signs: the float32 output's, subnormals aside (bfloat16 flushes them to 0).
    const Tensor out = Tensor::of({1.0, -2.0, 0.0, -0.0, 3e-39, INFINITY, -INFINITY, NAN, 1e-30}, {9});
    const Tensor g = Tensor::full({9}, 2.0);
    const std::vector<float> want{3, 0, 0, 0, 0, 3, 0, 0, 3}, got = kernels::relu_dropout_backward(g, out.to(DType::BFloat16), 1.5).to_vector<float>();
    CHECK(got == want);
    CHECK(kernels::relu_dropout_backward(g, out, 1.5).to_vector<float>()[4] == 3.0f);  // float32: the subnormal passes
    // The fused attention keeps no output under bf16 (its backward's D comes from the tiles).
    const Tensor qkv0 = tensor_of(random_floats(2 * 7 * 48, 87), {2, 7, 48});
    FusedAttentionOptions o;
    o.heads = o.kv_heads = 2;
    o.scale = 0.25;
    Variable qkv(qkv0, true);
    Variable a = fused_self_attention(qkv, o);
    CHECK_FALSE(saved_by(a, "out").defined());
    sum(a * a).backward();
    CHECK(all_finite(qkv.grad()));
    kernels::PrecisionScope fp32(Precision::Float32);
    CHECK(saved_by(fused_self_attention(Variable(qkv0, true), o), "out").defined());
  });
}

TEST_CASE("Bf16WeightCache: one conversion per weight while it lives, none kept after, on each path") {
  on_each_path([&](Bf16Path) {
    Tensor w = tensor_of(random_floats(64, 51), {8, 8});
    {
      kernels::Bf16WeightCache cache;
      const Tensor a = kernels::bf16_weight(w), b = kernels::bf16_weight(w);
      CHECK(a.storage() == b.storage());  // converted once
      CHECK(kernels::bf16_weight(w.narrow(0, 0, 4)).storage() != a.storage());  // another view is another weight
    }
    const Tensor a = kernels::bf16_weight(w), b = kernels::bf16_weight(w);
    CHECK(a.storage() != b.storage());  // no scope: converted every time
  });
}

// The command line end to end: `train --precision bf16` runs on the portable path (forced here, as
// it is taken on a CPU without AVX512-BF16), says so, and trains as the native path does: the same
// rounding, so after 44 steps the validation losses differ only by the float32 sums' order.
TEST_CASE("train --precision bf16 on the portable path: runs, says so, and matches the native path's run where both run") {
  test::Setup setup;
  auto train = [&](const std::string& name, const std::vector<std::string>& env) {
    const std::filesystem::path out = setup.tmp.path / name;
    std::vector<std::string> args = setup.train_args(out, 2);
    args.insert(args.end(), {"--precision", "bf16"});
    test::ChildOptions o;
    o.env = env;
    const test::Ran r = test::run(test::gradflow_binary(), args, setup.tmp.path / (name + "-log"), o);
    INFO(r.err);
    REQUIRE(r.exit_code() == 0);
    return std::make_pair(r.err, test::load_state(out.string()));
  };
  const auto [err, portable] = train("portable", {"GRADFLOW_BF16=portable"});
  // It names why: the variable where the native path could run, else what stops the native path.
  const std::string why = kernels::bf16_native_available() ? "GRADFLOW_BF16=portable" : kernels::bf16_native_unavailable_reason();
  CHECK(err.find("train: --precision bf16 runs on the portable path (" + why + ")") != std::string::npos);
  CHECK(portable.step == 44);
  REQUIRE(std::isfinite(portable.best_valid_loss));
  if (kernels::bf16_native_available()) {
    const auto [native_err, native] = train("native", {"GRADFLOW_BF16=auto"});
    CHECK(native_err.find("portable path") == std::string::npos);
    CHECK(native.step == portable.step);
    CHECK(std::abs(native.best_valid_loss - portable.best_valid_loss) <= 1e-3 * native.best_valid_loss);
  } else {
    MESSAGE("the native bf16 path cannot run here (", kernels::bf16_native_unavailable_reason(), "): the portable run alone");
  }
}

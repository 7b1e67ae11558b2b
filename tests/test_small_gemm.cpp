// small_gemm and pack_transposed (tensor/kernels/small_gemm.h), the fused attention's one-tile
// products, against their plain references: every row and column count of a tile (the AVX-512
// blocks of 8/6/4 rows and 1-4 vectors, their masked last vectors and short last blocks), A read
// row-major and transposed, B and C inside wider rows, beta 0 and 1, float and double; the
// transposed packing bit for bit, from float, bfloat16 and double.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rounding.h"
#include "tensor/kernels/small_gemm.h"

using namespace gf;

namespace {

template <class T>
std::vector<T> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d;
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

template <class T>
void check_products() {
  const int64_t sizes[] = {1, 3, 7, 8, 13, 14, 16, 17, 31, 33, 48, 63, 64, 65, 70};
  uint64_t seed = 1;
  for (int64_t m : sizes)
    for (int64_t n : {1, 5, 14, 16, 17, 32, 40, 64, 70, 130})
      for (int64_t k : {1, 14, 64}) {
        for (bool ta : {false, true})
          for (T beta : {T(0), T(1)}) {
            INFO("m " << m << " n " << n << " k " << k << " ta " << ta << " beta " << beta);
            const int64_t lda = ta ? m + 3 : k + 2, ldb = n + 5, ldc = n + 7;
            const auto a = random_values<T>(static_cast<size_t>((ta ? k : m) * lda), seed++);
            const auto b = random_values<T>(static_cast<size_t>(k * ldb), seed++);
            auto c = random_values<T>(static_cast<size_t>(m * ldc), seed++), want = c;
            const int64_t rs = ta ? 1 : lda, cs = ta ? lda : 1;  // A (m, k) read in place, or the transpose of a (k, m) matrix
            const T alpha = T(0.75);
            kernels::small_gemm(m, n, k, alpha, a.data(), rs, cs, b.data(), ldb, beta, c.data(), ldc);
            kernels::small_gemm_reference(m, n, k, alpha, a.data(), rs, cs, b.data(), ldb, beta, want.data(), ldc);
            double worst = 0;
            for (int64_t r = 0; r < m; ++r)
              for (int64_t j = 0; j < ldc; ++j) {
                const size_t i = static_cast<size_t>(r * ldc + j);
                if (j >= n) {  // beyond n: never written
                  REQUIRE(c[i] == want[i]);
                  continue;
                }
                double mag = std::abs(static_cast<double>(beta) * want[i]);
                for (int64_t p = 0; p < k; ++p) mag += std::abs(alpha * a[r * rs + p * cs] * b[p * ldb + j]);
                const double err = std::abs(static_cast<double>(c[i]) - static_cast<double>(want[i]));
                worst = std::max(worst, err / (testing::two_orders_tolerance(k + 1, mag, std::is_same_v<T, float> ? DType::Float32 : DType::Float64) + 1e-300));
              }
            REQUIRE(worst <= 1.0);
          }
      }
}

template <class T, class X>
void check_packing(uint64_t seed) {
  for (int64_t rows : {1, 14, 16, 17, 40, 64})
    for (int64_t cols : {1, 13, 16, 20, 64, 70}) {
      const int64_t width = (rows + 15) / 16 * 16 + (rows % 3 == 0 ? 16 : 0), ld = cols + 9;
      const auto src = random_values<float>(static_cast<size_t>(rows * ld), seed++);
      std::vector<X> x(src.size());
      for (size_t i = 0; i < src.size(); ++i) x[i] = static_cast<X>(src[i]);
      std::vector<T> got(static_cast<size_t>(cols * width), T(7));
      kernels::pack_transposed(x.data(), ld, rows, cols, got.data(), width);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < width; ++r)
          REQUIRE(got[static_cast<size_t>(c * width + r)] == (r < rows ? static_cast<T>(x[static_cast<size_t>(r * ld + c)]) : T(0)));
    }
}

}  // namespace

TEST_CASE("small_gemm against its reference: every tile shape, A row-major or transposed, beta 0 and 1, float and double") {
  check_products<float>();
  check_products<double>();
}

TEST_CASE("pack_transposed: the transpose of a block, widened exactly, zeros up to the width") {
  check_packing<float, float>(100);
  check_packing<float, bfloat16>(200);
  check_packing<double, double>(300);
}

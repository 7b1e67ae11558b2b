// The float32 products' library (tensor/kernels/sgemm.h): OpenBLAS and oneDNN compute every layout
// the step uses to float32 rounding of each other; the choice is measured once per machine and
// cached, every later process reads the cache (so a run and its resume multiply alike), the first
// published choice wins, GRADFLOW_SGEMM forces one and refuses anything else, and `gradflow info`
// prints it.
#include <doctest/doctest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rounding.h"
#include "tensor/kernels/sgemm.h"
#include "tensor/kernels/signal_stack.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"

using namespace gf;

namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::string gradflow() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }

// `gradflow info` with extra environment: its exit code and output.
test::Ran info(const test::TempDir& logs, const std::vector<std::string>& env) {
  test::ChildOptions o;
  o.env = env;
  return test::run_child(gradflow(), {"info"}, logs.path, 120, o);
}

std::string products_line(const std::string& out) {
  const size_t at = out.find("float32 products in training:");
  REQUIRE(at != std::string::npos);
  return out.substr(at, out.find('\n', at) - at);
}

}  // namespace

TEST_CASE("dnnl_sgemm and cblas_sgemm agree to float32 rounding on every layout, beta 0 and 1, inside wider rows") {
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        const int64_t m = 37, n = 70, k = 129;
        const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
        const auto a = random_floats(static_cast<size_t>((ta ? k : m) * lda), seed++), b = random_floats(static_cast<size_t>((tb ? n : k) * ldb), seed++);
        auto c1 = random_floats(static_cast<size_t>(m * ldc), seed++), c2 = c1;
        kernels::sgemm_on(kernels::SgemmLibrary::OpenBlas, ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c1.data(), ldc);
        kernels::sgemm_on(kernels::SgemmLibrary::OneDnn, ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c2.data(), ldc);
        INFO("ta " << ta << " tb " << tb << " beta " << beta);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= n) {  // outside the product: untouched by both
              REQUIRE(c1[at] == c2[at]);
              continue;
            }
            double mag = std::abs(beta * c1[at]) + 1e-30;
            for (int64_t p = 0; p < k; ++p) mag += 0.5 * std::abs(a[ta ? p * lda + i : i * lda + p] * b[tb ? j * ldb + p : p * ldb + j]);
            REQUIRE(std::abs(c1[at] - c2[at]) <= testing::two_orders_tolerance(k + 1, mag, DType::Float32));
          }
      }
}

TEST_CASE("the sgemm choice: measured once, cached, read by later processes; GRADFLOW_SGEMM forces or is refused") {
  test::TempDir dir("gf_sgemm"), logs("gf_sgemm_logs");
  const std::string cache = "GRADFLOW_CACHE_DIR=" + (dir.path / "cache").string();
  const test::Ran first = info(logs, {cache, "GRADFLOW_SGEMM=auto"});
  REQUIRE(first.exit_code() == 0);
  const std::string line = products_line(first.out);
  CHECK(line.find("measured ") != std::string::npos);
  CHECK(line.find("cached in " + (dir.path / "cache").string()) != std::string::npos);
  CHECK(first.out.find("  tn 512 x 256 x 4096, one thread: openblas ") != std::string::npos);  // the measurements it chose from
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path / "cache")) files += e.path().filename().string().rfind("sgemm-", 0) == 0;
  CHECK(files == 1);
  // A second process reads the cache: the same choice and the same time of measurement.
  const test::Ran second = info(logs, {cache});
  REQUIRE(second.exit_code() == 0);
  CHECK(products_line(second.out) == line);
  // A damaged cache file is not read: measured again, and the file replaced with the new choice.
  for (const auto& e : std::filesystem::directory_iterator(dir.path / "cache")) std::ofstream(e.path(), std::ios::trunc) << "not a choice\n";
  const test::Ran damaged = info(logs, {cache});
  REQUIRE(damaged.exit_code() == 0);
  const std::string remeasured = products_line(damaged.out);
  CHECK(remeasured.find("cached in ") != std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(dir.path / "cache")) CHECK(test::slurp(e.path()).rfind("gradflow sgemm choice 1\n", 0) == 0);
  CHECK(products_line(info(logs, {cache}).out) == remeasured);
  // Forced.
  const test::Ran forced = info(logs, {cache, "GRADFLOW_SGEMM=onednn"});
  REQUIRE(forced.exit_code() == 0);
  CHECK(products_line(forced.out) ==
        "float32 products in training: x W^T onednn, g W onednn, g^T x onednn (GRADFLOW_SGEMM=onednn; GRADFLOW_SGEMM=openblas|onednn forces one)");
  const test::Ran bad = info(logs, {cache, "GRADFLOW_SGEMM=mkl"});
  CHECK(bad.exit_code() != 0);
  CHECK((bad.out + bad.err).find("GRADFLOW_SGEMM must be 'openblas', 'onednn', 'auto' or unset, got 'mkl'") != std::string::npos);
}

TEST_CASE("a thread that calls oneDNN gets a signal stack of its own, once, and a thread's own is kept") {
  std::thread([] {
    stack_t before{};
    REQUIRE(sigaltstack(nullptr, &before) == 0);
    const bool had_one = !(before.ss_flags & SS_DISABLE);  // a sanitizer gives each thread one
    gf::kernels::ensure_signal_stack();
    stack_t after{};
    REQUIRE(sigaltstack(nullptr, &after) == 0);
    CHECK(!(after.ss_flags & SS_DISABLE));
    if (had_one) CHECK(after.ss_sp == before.ss_sp);  // kept, not replaced
    else CHECK(after.ss_size >= 65536);
    gf::kernels::ensure_signal_stack();  // again: the same stack
    stack_t again{};
    REQUIRE(sigaltstack(nullptr, &again) == 0);
    CHECK(again.ss_sp == after.ss_sp);
  }).join();
}

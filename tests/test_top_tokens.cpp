// kernels::top_tokens (beam search's scan of a row for its n best entries, with the 16-wide
// skip test any_of_16_beats) against its plain reference, kernels::top_tokens_reference (sort
// everything): random rows of lengths that are and are not multiples of 16, ties, -inf entries,
// excluded tokens, n from 1 to past the row's length, float32 and float64.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "tensor/kernels/top_tokens.h"

using namespace gf;

namespace {

template <class T>
std::vector<T> random_row(int64_t V, uint64_t seed, bool ties) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<T> x(static_cast<size_t>(V));
  for (T& e : x) e = ties ? static_cast<T>(std::round(nd(rng) * 2)) : static_cast<T>(nd(rng) * 3);  // ties: few distinct values
  return x;
}

template <class T>
void expect_same(const std::vector<T>& x, T shift, int64_t n, std::span<const int64_t> never) {
  const auto V = static_cast<int64_t>(x.size());
  const auto got = kernels::top_tokens(x.data(), V, shift, n, never);
  const auto want = kernels::top_tokens_reference(x.data(), V, shift, n, never);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].token == want[i].token);
    CHECK(got[i].log_prob == want[i].log_prob);  // the same bits: x - shift in T
  }
}

template <class T>
void sweep() {
  const std::vector<int64_t> none, some = {0, 1, 10, 17, 999};  // e.g. <pad>, <bos>, others
  uint64_t seed = 1;
  for (int64_t V : {1, 5, 15, 16, 17, 31, 32, 33, 100, 1000, 1003})
    for (int64_t n : {1, 2, 5, 17, 2000})
      for (bool ties : {false, true}) {
        CAPTURE(V);
        CAPTURE(n);
        CAPTURE(ties);
        std::vector<T> x = random_row<T>(V, seed++, ties);
        expect_same(x, T(0), n, none);
        expect_same(x, static_cast<T>(4.25), n, some);  // a log_softmax shift
        for (int64_t v = 0; v < V; v += 3) x[static_cast<size_t>(v)] = -INFINITY;  // forbidden or masked entries
        expect_same(x, static_cast<T>(1.5), n, none);
        expect_same(x, T(0), n, some);
      }
}

}  // namespace

TEST_CASE("top_tokens equals its reference (sort everything), float32 and float64") {
  sweep<float>();
  sweep<double>();
}

TEST_CASE("top_tokens: the best entry last in a skipped-looking row, all -inf, n of 0") {
  std::vector<float> x(64, -5.0f);
  x[63] = 3.0f;  // in the last full block: the skip test must let it through
  x[20] = 2.0f;
  const auto top = kernels::top_tokens(x.data(), 64, 0.0f, 2, {});
  REQUIRE(top.size() == 2);
  CHECK(top[0].token == 63);
  CHECK(top[1].token == 20);
  std::vector<float> masked(40, -INFINITY);
  const auto all_masked = kernels::top_tokens(masked.data(), 40, 0.0f, 3, {});
  REQUIRE(all_masked.size() == 3);  // -inf entries are taken (callers pass over -inf), lowest tokens first
  CHECK(all_masked[0].token == 0);
  CHECK(all_masked[2].token == 2);
  CHECK(kernels::top_tokens(x.data(), 64, 0.0f, 0, {}).empty());
}

TEST_CASE("any_of_16_beats: strictly greater after the shift, as the scalar loop") {
  std::vector<float> x(16, 1.0f);
  CHECK_FALSE(kernels::any_of_16_beats(x.data(), 0.5f, 0.5f));  // 1 - 0.5 is not > 0.5
  x[15] = 1.0001f;
  CHECK(kernels::any_of_16_beats(x.data(), 0.5f, 0.5f));
  x[15] = NAN;
  CHECK_FALSE(kernels::any_of_16_beats(x.data(), 0.5f, 0.5f));  // NaN beats nothing
  std::vector<double> d(16, -INFINITY);
  CHECK_FALSE(kernels::any_of_16_beats(d.data(), 0.0, -1e300));
  d[3] = 0.0;
  CHECK(kernels::any_of_16_beats(d.data(), 0.0, -1e300));
}

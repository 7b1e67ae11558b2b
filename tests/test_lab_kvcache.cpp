// Lab `kvcache`: its measurements on a tiny translator: the cache-bytes formula against the
// buffers decoding allocates, fixed-length greedy decoding cached against recomputed (float64:
// the same tokens, logits to rounding), the comparison helpers on hand-made cases, and the
// exponent fit the timing claims use.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/kvcache.h"
#include "nn/masks.h"
#include "nn_test_util.h"

using namespace gf;
using namespace gf::lab;
using gf::testing::error_of;

namespace {

Tensor sources() { return Tensor::of({4, 5, 6, 7, 8, 9, 10, 0, 0, 0, 11, 5, 4, 0, 0}, {3, 5}, DType::Int64); }  // (3, 5), PAD-padded

}  // namespace

TEST_CASE("kv_bytes_per_token: 2 x layers x kv_heads x d_k x bytes") {
  CHECK(kv_bytes_per_token(2, 4, 16, DType::Float32) == 1024);
  CHECK(kv_bytes_per_token(2, 4, 16, DType::Float64) == 2048);
  CHECK(kv_bytes_per_token(6, 1, 64, DType::Float32) == 3072);
}

TEST_CASE("cache_bytes: the started caches hold rows x capacity x the formula (self) and rows x source x the formula (cross)") {
  NoGradGuard ng;
  for (int64_t kv : {4, 2, 1})
    for (DType dtype : {DType::Float32, DType::Float64}) {
      CAPTURE(kv);
      nn::Seq2SeqTransformer m(gf::testing::grouped_query_options(kv), 3);
      m.to(dtype);
      const Tensor src = sources();
      const Variable memory = m.encode(src, nn::make_pad_mask(src, 0));  // (3, 5, 8)
      const CacheBytes b = cache_bytes(m.transformer->decoder->start_cache(memory, 7));
      const int64_t per_token = kv_bytes_per_token(2, kv, 2, dtype);
      CHECK(b.self == 3 * 7 * per_token);
      CHECK(b.cross == 3 * 5 * per_token);
    }
}

TEST_CASE("decode_fixed: in float64 cached and recomputed decoding pick the same tokens, their logits equal to rounding") {
  nn::Seq2SeqTransformer m(gf::testing::grouped_query_options(2), 4);
  m.to(DType::Float64);
  m.eval();
  const Decoded cached = decode_fixed(m, sources(), 6, true);
  const Decoded recomputed = decode_fixed(m, sources(), 6, false);
  REQUIRE(cached.tokens.size() == 3);
  CHECK(cached.tokens[0].size() == 6);
  CHECK(cached.logits.size() == 6);
  CHECK(cached.tokens == recomputed.tokens);
  CHECK(differing_tokens(cached, recomputed) == 0);
  CHECK(relative_logit_difference(cached, recomputed) < 1e-13);
  // Row 1 alone (its three real tokens, no padding) against its row of the padded batch.
  const Decoded alone = decode_fixed(m, sources().narrow(0, 1, 1).narrow(1, 0, 3).contiguous(), 6, true);
  CHECK(differing_tokens(cached, alone, 1) == 0);
  CHECK(relative_logit_difference(cached, alone, 1) < 1e-13);
  // ... and not against another row.
  CHECK(relative_logit_difference(cached, alone, 0) > 1e-3);
}

TEST_CASE("decode_fixed with `follow` feeds those tokens: the logits of a decoding that chose them") {
  nn::Seq2SeqTransformer m(gf::testing::grouped_query_options(4), 5);
  m.to(DType::Float64);
  m.eval();
  std::vector<std::vector<int64_t>> forced{{5, 6, 7, 8}, {9, 9, 9, 9}, {4, 11, 4, 11}};
  const Decoded a = decode_fixed(m, sources(), 4, true, &forced);
  const Decoded b = decode_fixed(m, sources(), 4, false, &forced);
  CHECK(relative_logit_difference(a, b) < 1e-13);
  // The first step sees only <bos>: the same as a free decoding's; later steps differ from it.
  const Decoded free_run = decode_fixed(m, sources(), 4, true);
  CHECK(gf::testing::max_abs_diff(a.logits[0], free_run.logits[0]) == 0.0);
  CHECK(relative_logit_difference(a, free_run) > 1e-6);
  std::vector<std::vector<int64_t>> short_rows{{5}, {9}, {4}};
  GF_CHECK_CONTAINS(error_of([&] { decode_fixed(m, sources(), 4, true, &short_rows); }), "`follow` must hold 3 rows of at least 4 tokens");
}

TEST_CASE("relative_logit_difference and differing_tokens on hand-made decodings") {
  Decoded a{{{1, 2}, {3, 4}}, {Tensor::of({1, -4, 2, 0}, {2, 2}, DType::Float64), Tensor::of({0, 1, 0, 2}, {2, 2}, DType::Float64)}};
  Decoded b{{{1, 5}}, {Tensor::of({0, 1}, {1, 2}, DType::Float64), Tensor::of({0, 2.5}, {1, 2}, DType::Float64)}};
  // b is one row, compared with a's row 1: |2 - 0|, |0 - 1|, |0 - 0|, |2 - 2.5| -> 2, over that row's largest |logit| 2
  // (row 0's -4 is not compared).
  CHECK(relative_logit_difference(a, b, 1) == doctest::Approx(1.0));
  // Against row 0: |1 - 0|, |-4 - 1|, |0 - 0|, |1 - 2.5| -> 5, over 4.
  CHECK(relative_logit_difference(a, b, 0) == doctest::Approx(1.25));
  CHECK(differing_tokens(a, b, 1) == 2);  // 3 vs 1, 4 vs 5
  CHECK(differing_tokens(a, b, 0) == 1);  // 2 vs 5
}

TEST_CASE("the exponent fit: loglog_slope recovers a power law's exponent and skips points it cannot take the log of") {
  std::vector<double> x{32, 64, 128, 256, 512}, y;
  for (double t : x) y.push_back(3e-5 * std::pow(t, 1.7));
  CHECK(loglog_slope(x, y) == doctest::Approx(1.7).epsilon(1e-12));
  std::vector<double> flat(x.size(), 0.25);
  CHECK(std::abs(loglog_slope(x, flat)) < 1e-12);
  x.push_back(0), y.push_back(5);  // x = 0: skipped
  CHECK(loglog_slope(x, y) == doctest::Approx(1.7).epsilon(1e-12));
  CHECK(std::isnan(loglog_slope({1.0}, {2.0})));
}

// kernels::attend_one (one query position per row over a KV cache) against its plain reference,
// kernels::attend_one_reference: random inputs in float32 and float64, head widths that are and are
// not multiples of the 16-lane vector width (64 takes the compile-time width), grouped-query heads,
// shared key/value rows and reordered position rows, bool and float masks with fully blocked rows.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "gradcheck_util.h"
#include "nn_test_util.h"
#include "tensor/kernels/attend_one.h"

using namespace gf;
using namespace gf::testing;

namespace {

// Every row of a (R, len) bool mask: row 0 open, row 1 fully blocked, row 2 blocked at its end
// (keys never read), the rest scattered.
Tensor bool_mask(int64_t R, int64_t len, uint64_t seed) {
  Tensor m = Tensor::zeros({R, len}, DType::Bool);  // (R, len)
  std::mt19937_64 rng(seed);
  for (int64_t r = 1; r < R; ++r)
    for (int64_t s = 0; s < len; ++s) m.data<bool>()[r * len + s] = r == 1 || (r == 2 ? s >= len / 2 : rng() % 3 == 0);
  return m;
}

// A float mask (R, len): random biases, row 1 all -inf (fully blocked by the added mask), row 2
// with a few -inf.
Tensor float_mask(int64_t R, int64_t len, uint64_t seed, DType dtype) {
  Tensor m = randn({R, len}, seed, 1.0, dtype);  // (R, len)
  for (int64_t s = 0; s < len; ++s) {
    if (R > 1) m.flat_set(len + s, -INFINITY);
    if (R > 2 && s % 3 == 0) m.flat_set(2 * len + s, -INFINITY);
  }
  return m;
}

// Random q (R, H, 1, d_k) and a cache k, v (rows, KV, cap, d_k); q and k of spread qk_sd.
struct Inputs {
  Tensor q, k, v;
};
Inputs random_inputs(const Shape& q_shape, const Shape& kv_shape, uint64_t seed, DType dtype, double qk_sd = 1.0) {
  return {randn(q_shape, seed, qk_sd, dtype), randn(kv_shape, seed + 1, qk_sd, dtype), randn(kv_shape, seed + 2, 1.0, dtype)};
}

// Scores of order 1 and values of order 1: float32's rounding of the scores, the sums and the
// exp leave the outputs within 1e-5 of the double reference; float64 within 1e-12.
double tolerance(DType dtype) { return dtype == DType::Float32 ? 1e-5 : 1e-12; }

// The kernel's output against the reference's for one configuration.
void expect_matches(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::AttendOneConfig& cfg, double scores_size = 1) {
  const Tensor got = kernels::attend_one(q, k, v, cfg);            // (R, 1, H*d_k)
  const Tensor want = kernels::attend_one_reference(q, k, v, cfg);  // (R, 1, H*d_k)
  CHECK(all_finite(got));
  CHECK(max_abs_diff(got, want) < tolerance(q.dtype()) * scores_size);
}

}  // namespace

TEST_CASE("attend_one equals its reference: dtypes, head widths, grouped heads, masks") {
  const int64_t R = 5, H = 4, cap = 40;
  for (DType dtype : {DType::Float32, DType::Float64})
    for (int64_t dk : {1, 3, 17, 64, 70})
      for (int64_t KV : {4, 2, 1})
        for (int64_t len : {1, 15, 33}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(dk);
          CAPTURE(KV);
          CAPTURE(len);
          const uint64_t seed = static_cast<uint64_t>(dk * 1000 + KV * 100 + len);
          const auto [q, k, v] = random_inputs({R, H, 1, dk}, {R, KV, cap, dk}, seed, dtype);  // (R, KV, cap, d_k) cache
          kernels::AttendOneConfig cfg;
          cfg.len = len, cfg.scale = 1.0 / std::sqrt(static_cast<double>(dk));
          for (const Tensor& mask : {Tensor(), bool_mask(R, len, seed), float_mask(R, len, seed, dtype)}) {
            cfg.mask = mask;
            expect_matches(q, k, v, cfg);
          }
        }
}

TEST_CASE("attend_one: fully blocked rows give zeros, not NaN; len 0 too") {
  const int64_t R = 3, H = 2, dk = 20, len = 7;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const auto [q, k, v] = random_inputs({R, H, 1, dk}, {R, H, len, dk}, 1, dtype);
    kernels::AttendOneConfig cfg;
    cfg.len = len, cfg.scale = 0.3;
    for (const Tensor& mask : {bool_mask(R, len, 4), float_mask(R, len, 4, dtype)}) {
      cfg.mask = mask;
      const Tensor out = kernels::attend_one(q, k, v, cfg);  // (3, 1, 40)
      CHECK(all_finite(out));
      for (int64_t j = 0; j < H * dk; ++j) CHECK(out.flat_get(H * dk + j) == 0.0);  // row 1
      CHECK(out.flat_get(0) != 0.0);                                               // row 0 is not
    }
    cfg.len = 0, cfg.mask = Tensor();
    const Tensor none = kernels::attend_one(q, k, v, cfg);  // no key at all
    for (int64_t i = 0; i < none.numel(); ++i) CHECK(none.flat_get(i) == 0.0);
    CHECK(max_abs_diff(none, kernels::attend_one_reference(q, k, v, cfg)) == 0.0);
  }
}

TEST_CASE("attend_one: large scores (a near one-hot softmax) and one key") {
  const int64_t R = 2, H = 2, dk = 16, len = 9;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const auto [q, k, v] = random_inputs({R, H, 1, dk}, {R, H, len, dk}, 11, dtype, 3.0);
    kernels::AttendOneConfig cfg;
    cfg.len = len, cfg.scale = 1.0;  // scores of spread ~36: most weights are tiny, some subnormal
    // A score of size 36 is rounded 36 times as coarsely as one of size 1: so is the tolerance.
    expect_matches(q, k, v, cfg, 36);
    cfg.len = 1;  // softmax of one key is 1: the output is that key's value
    const Tensor one = kernels::attend_one(q, k, v, cfg);  // (R, 1, H*d_k)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < dk; ++j) CHECK(one.flat_get((r * H + h) * dk + j) == v.flat_get(((r * H + h) * len) * dk + j));
  }
}

TEST_CASE("attend_one: shared key/value rows (kv_rows) and reordered positions (position_rows)") {
  const int64_t R = 4, Bk = 3, H = 4, KV = 2, cap = 12, len = 10, dk = 24;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const auto [q, k, v] = random_inputs({R, H, 1, dk}, {Bk, KV, cap, dk}, 21, dtype);  // cache (3, 2, 12, 24)
    const std::vector<int64_t> kv_rows = {2, 0, 0, 1};
    std::vector<int64_t> position_rows(static_cast<size_t>(R * cap));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < cap; ++p) position_rows[static_cast<size_t>(r * cap + p)] = (r + p) % Bk;
    kernels::AttendOneConfig cfg;
    cfg.len = len, cfg.scale = 0.2, cfg.mask = bool_mask(R, len, 24);
    cfg.kv_rows = kv_rows;
    expect_matches(q, k, v, cfg);
    cfg.kv_rows = {}, cfg.position_rows = position_rows;
    expect_matches(q, k, v, cfg);
    // Row r's positions in one buffer row are the same as kv_rows naming that row.
    for (int64_t r = 0; r < R; ++r)
      for (int64_t p = 0; p < cap; ++p) position_rows[static_cast<size_t>(r * cap + p)] = kv_rows[static_cast<size_t>(r)];
    const Tensor by_positions = kernels::attend_one(q, k, v, cfg);
    cfg.kv_rows = kv_rows, cfg.position_rows = {};
    CHECK(max_abs_diff(by_positions, kernels::attend_one(q, k, v, cfg)) == 0.0);
  }
}

TEST_CASE("attend_one never reads keys and values blocked at the end of a row") {
  const int64_t R = 3, H = 2, dk = 5, len = 8;
  const auto [q, k, v] = random_inputs({R, H, 1, dk}, {R, H, len, dk}, 31, DType::Float32);
  kernels::AttendOneConfig cfg;
  cfg.len = len, cfg.scale = 0.4, cfg.mask = bool_mask(R, len, 34);  // row 2: keys [4, 8) blocked
  const Tensor want = kernels::attend_one(q, k, v, cfg);
  Tensor kn = k.clone(), vn = v.clone();  // NaN where row 2 must not read: 0 * NaN would reach the output
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s = len / 2; s < len; ++s)
      for (int64_t j = 0; j < dk; ++j) kn.flat_set(((2 * H + h) * len + s) * dk + j, NAN), vn.flat_set(((2 * H + h) * len + s) * dk + j, NAN);
  CHECK(max_abs_diff(kernels::attend_one(q, kn, vn, cfg), want) == 0.0);
}

// A bf16 cache (--kv-cache bf16) holds values that float32 holds exactly, and the kernel widens each
// one before the same float32 sums: the output must equal, bit for bit, the float32 kernel's on the
// widened cache, whatever the rows, positions and masks; and the reference reads it alike.
TEST_CASE("attend_one over a bfloat16 cache: bit-identical to float32 over the same values") {
  const int64_t R = 6, H = 4, cap = 24;
  for (int64_t dk : {3, 64, 70})
    for (int64_t KV : {4, 1})
      for (int64_t len : {1, 17}) {
        CAPTURE(dk);
        CAPTURE(KV);
        CAPTURE(len);
        const uint64_t seed = static_cast<uint64_t>(7000 + dk * 100 + KV * 10 + len);
        const auto [q, k32, v32] = random_inputs({R, H, 1, dk}, {R, KV, cap, dk}, seed, DType::Float32);
        const Tensor k = k32.to(DType::BFloat16), v = v32.to(DType::BFloat16);  // (R, KV, cap, d_k) bf16 cache
        const Tensor kw = k.to(DType::Float32), vw = v.to(DType::Float32);      // the same values in float32
        std::vector<int64_t> positions(static_cast<size_t>(R * cap));
        for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>((i * 5 + 1) % R);
        for (int rows_kind = 0; rows_kind < 2; ++rows_kind)
          for (const Tensor& mask : {Tensor(), bool_mask(R, len, seed), float_mask(R, len, seed, DType::Float32)}) {
            kernels::AttendOneConfig cfg;
            cfg.len = len, cfg.scale = 1.0 / std::sqrt(static_cast<double>(dk)), cfg.mask = mask;
            if (rows_kind == 1) cfg.position_rows = positions;
            const Tensor got = kernels::attend_one(q, k, v, cfg);  // (R, 1, H*d_k)
            CHECK(max_abs_diff(got, kernels::attend_one(q, kw, vw, cfg)) == 0.0);
            CHECK(max_abs_diff(got, kernels::attend_one_reference(q, k, v, cfg)) < tolerance(DType::Float32));
          }
      }
}

TEST_CASE("attend_one refuses what it cannot read, naming the shapes") {
  Tensor q = randn({2, 4, 1, 3}, 41, 1.0, DType::Float32);
  Tensor k = randn({3, 2, 5, 3}, 42, 1.0, DType::Float32);
  kernels::AttendOneConfig cfg;
  cfg.len = 5;
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, k, k, cfg); }), "2 query rows, 3 key/value rows, 0 row indices and 0 position rows");
  const std::vector<int64_t> rows = {0, 3};
  cfg.kv_rows = rows;
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, k, k, cfg); }), "key/value row 3 out of range for 3 rows");
  cfg.kv_rows = {};
  cfg.len = 6;
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, k.narrow(0, 0, 2), k.narrow(0, 0, 2), cfg); }), "(Bk, KV, >= 6, d_k)");
  cfg.len = 5;
  Tensor k3 = randn({2, 3, 5, 3}, 43, 1.0, DType::Float32);  // 3 key/value heads do not divide 4
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, k3, k3, cfg); }), "with KV dividing H");
  const Tensor kb = k.narrow(0, 0, 2).to(DType::BFloat16);  // (2, 2, 5, 3)
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q.to(DType::Float64), kb, kb, cfg); }),
                    "keys and values must be in q's dtype, or bfloat16 under a float32 q (a bf16 KV cache); got q float64, k bfloat16");
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, kb, k.narrow(0, 0, 2), cfg); }), "attend_one");
  cfg.mask = Tensor::zeros({2, 5}, DType::Int64);
  GF_CHECK_CONTAINS(error_of([&] { kernels::attend_one(q, k.narrow(0, 0, 2), k.narrow(0, 0, 2), cfg); }),
                    "the mask must be bool or floating, got int64");
}

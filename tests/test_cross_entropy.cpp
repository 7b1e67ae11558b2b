#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/matmul.h"
#include "tensor/storage.h"
#include "gradcheck_util.h"
#include "nn_test_util.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/cross_entropy.h"
#include "tensor/kernels/reduce.h"

using namespace gf;
using namespace gf::testing;

namespace {
Tensor targets(std::vector<int64_t> t) { return Tensor::from_vector<int64_t>(t, {static_cast<int64_t>(t.size())}); }

// Row 0: logits (2, 1, 0.5); row 1: (0, 0, 0).
Tensor sample_logits(DType dt) { return Tensor::of({2.0, 1.0, 0.5, 0.0, 0.0, 0.0}, {2, 3}, dt); }
}  // namespace

TEST_CASE("cross_entropy forward values by hand") {
  const double lse0 = std::log(std::exp(2.0) + std::exp(1.0) + std::exp(0.5));  // 2.464359
  const double nll0 = lse0 - 2.0;                                                // -log 0.628532 = 0.464359
  const double nll0_c2 = lse0 - 0.5;                                             // target 2 in row 0
  const double nll1 = std::log(3.0);                                             // uniform row
  for (DType dt : {DType::Float32, DType::Float64}) {
    Variable logits(sample_logits(dt));
    CHECK(cross_entropy(logits, targets({0, 2})).item() == doctest::Approx(0.781486).epsilon(1e-5));
    CHECK(cross_entropy(logits, targets({0, 2})).item() == doctest::Approx((nll0 + nll1) / 2).epsilon(1e-6));
    CHECK(cross_entropy(logits, targets({2, 1})).item() == doctest::Approx((nll0_c2 + nll1) / 2).epsilon(1e-6));
    CHECK(cross_entropy(logits, targets({0, 2})).dtype() == dt);
    // ignore_index: the mean is over the remaining rows only.
    CHECK(cross_entropy(logits, targets({0, -100})).item() == doctest::Approx(nll0).epsilon(1e-6));
    CHECK(cross_entropy(logits, targets({0, 2}), 2).item() == doctest::Approx(nll0).epsilon(1e-6));  // custom index
    // label smoothing 0.1: (1 - 0.1) * nll + 0.1 * mean over classes of -log p.
    const double smooth0 = lse0 - (2.0 + 1.0 + 0.5) / 3;  // 1.297692
    const double ls0 = 0.9 * nll0 + 0.1 * smooth0;         // 0.547692
    CHECK(ls0 == doctest::Approx(0.547692).epsilon(1e-5));
    CHECK(cross_entropy(logits, targets({0, 2}), -100, 0.1).item() == doctest::Approx((ls0 + nll1) / 2).epsilon(1e-6));
    // Both together.
    CHECK(cross_entropy(logits, targets({-100, 0}), -100, 0.1).item() == doctest::Approx(nll1).epsilon(1e-6));
    CHECK(cross_entropy(logits, targets({0, -1}), -1, 0.1).item() == doctest::Approx(ls0).epsilon(1e-6));
    // Full smoothing: the target no longer matters.
    CHECK(cross_entropy(logits, targets({1, 0}), -100, 1.0).item() == doctest::Approx((smooth0 + nll1) / 2).epsilon(1e-6));
  }
  // Huge logits do not overflow.
  Variable big(Tensor::of({1000.0, 0.0}, {1, 2}));
  CHECK(cross_entropy(big, targets({1})).item() == doctest::Approx(1000.0));
  CHECK(cross_entropy(big, targets({0})).item() == doctest::Approx(0.0));
}

TEST_CASE("cross_entropy backward: softmax minus smoothed one-hot over the counted rows") {
  Variable logits(sample_logits(DType::Float64), true);
  Variable loss = cross_entropy(logits, targets({0, -100, }), -100, 0.1);
  loss.backward();
  const double e = std::exp(2.0) + std::exp(1.0) + std::exp(0.5);
  const double p[3] = {std::exp(2.0) / e, std::exp(1.0) / e, std::exp(0.5) / e};
  const double want[3] = {p[0] - (0.9 + 0.1 / 3), p[1] - 0.1 / 3, p[2] - 0.1 / 3};  // count = 1
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(logits.grad().at({0, j}) == doctest::Approx(want[j]).epsilon(1e-12));
    CHECK(logits.grad().at({1, j}) == 0.0);  // ignored row
  }
  // The upstream gradient scales it (loss * 3).
  Variable l2(sample_logits(DType::Float64), true);
  (cross_entropy(l2, targets({0, 1})) * 3.0).backward();
  CHECK(l2.grad().at({1, 1}) == doctest::Approx(3.0 * (1.0 / 3 - 1) / 2).epsilon(1e-12));
}

TEST_CASE("cross_entropy with every target ignored returns 0 (PyTorch: NaN) and a zero gradient") {
  Variable logits(sample_logits(DType::Float64), true);
  Variable loss = cross_entropy(logits, targets({-100, -100}), -100, 0.1);
  CHECK(loss.item() == 0.0);
  loss.backward();
  for (int64_t i = 0; i < 6; ++i) CHECK(logits.grad().flat_get(i) == 0.0);
}

TEST_CASE("gradcheck: cross_entropy with ignore_index and label smoothing") {
  Tensor t = targets({1, 4, -100, 0, 3});
  auto ce = [t](const std::vector<Variable>& in) { return cross_entropy(in[0], t); };
  auto ce_ls = [t](const std::vector<Variable>& in) { return cross_entropy(in[0], t, -100, 0.2); };
  Tensor t3 = targets({1, 3, 2, 0, 3});  // ignore_index 3
  auto ce_chain = [t3](const std::vector<Variable>& in) { return cross_entropy(in[0] * in[1], t3, 3, 0.05) * 2.5; };
  GF_CHECK_GRADS(ce, (std::vector<Variable>{leaf(randn({5, 6}, 1, 2.0))}));
  GF_CHECK_GRADS(ce_ls, (std::vector<Variable>{leaf(randn({5, 6}, 2, 2.0))}));
  GF_CHECK_GRADS(ce_chain, (std::vector<Variable>{leaf(randn({5, 6}, 3)), leaf(randn({6}, 4))}));
  // Non-contiguous logits.
  GF_CHECK_GRADS(ce_ls, (std::vector<Variable>{leaf(randn({6, 5}, 5).transpose(0, 1))}));
}

TEST_CASE("cross_entropy backward writes over logits nothing else holds, and only then") {
  // logits = x @ w: an intermediate whose buffer only the loss's Node keeps after forward. A hook
  // on it sees the gradient arrive and tells whether it sits in the logits' own buffer.
  Tensor tv = targets({3, -100, 0, 7, 2, 5});
  auto run = [&](bool hold_logits, bool twice) {
    Variable x(randn({6, 4}, 11), true), w(randn({4, 9}, 12), true);
    Variable logits = matmul(x, w);  // (6, 9)
    const Storage* buffer = logits.data().storage().get();
    int in_buffer = 0;
    logits.register_hook([&](const Tensor& g) {
      in_buffer += g.storage().get() == buffer;
      return Tensor();
    });
    Variable loss = cross_entropy(logits, tv, -100, 0.1);
    if (!hold_logits) logits = Variable();
    loss.backward(twice);
    if (twice) loss.backward();  // the saved logits must still be intact for the second pass
    return std::make_pair(w.grad().to_vector<double>(), in_buffer);
  };
  auto [g_free, in_place_free] = run(false, false);
  auto [g_held, in_place_held] = run(true, false);
  CHECK(in_place_free == 1);  // nothing else sees the logits: the gradient takes their buffer
  CHECK(in_place_held == 0);  // the caller still holds them: a new buffer
  CHECK(g_free == g_held);    // the same numbers either way
  // retain_graph: the first backward must not consume the logits.
  auto [g_twice, in_place_twice] = run(false, true);
  CHECK(in_place_twice == 1);  // only the second, last, backward writes over them
  for (size_t i = 0; i < g_held.size(); ++i) CHECK(g_twice[i] == doctest::Approx(2 * g_held[i]).epsilon(1e-14));
}

TEST_CASE("cross_entropy: float32 matches float64 on a large batch") {
  Tensor logits = randn({300, 1000}, 9, 3.0);
  std::vector<int64_t> tv(300);
  for (int64_t i = 0; i < 300; ++i) tv[i] = i % 7 == 0 ? -100 : (i * 37) % 1000;
  Tensor t = targets(tv);
  const double l64 = kernels::cross_entropy(logits, t, -100, 0.1).loss.item();
  const double l32 = kernels::cross_entropy(logits.to(DType::Float32), t, -100, 0.1).loss.item();
  CHECK(l32 == doctest::Approx(l64).epsilon(1e-6));
  CHECK(kernels::cross_entropy(logits, t, -100, 0.1).count == 300 - 43);
}

TEST_CASE("cross_entropy_and_backward: the loss, lse, gradient and its column sums of the two kernels and sum, bit for bit") {
  // 700 x 900 is cut into many row blocks; 3 x 900 into one; ignored rows and label smoothing.
  for (DType dt : {DType::Float32, DType::Float64})
    for (int64_t n : {700, 3})
      for (double ls : {0.0, 0.1}) {
        CAPTURE(n);
        CAPTURE(ls);
        const int64_t c = 900;
        Tensor logits = randn({n, c}, 21, 3.0).to(dt);  // (n, C)
        std::vector<int64_t> tv(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) tv[i] = i % 5 == 1 ? -100 : (i * 31) % c;
        Tensor t = targets(tv);
        const kernels::CrossEntropyResult want = kernels::cross_entropy(logits, t, -100, ls);
        const Tensor want_grad = kernels::cross_entropy_backward(logits, want.lse, t, -100, ls, 0.25);  // (n, C)
        const Tensor want_sums = kernels::sum(want_grad, {0}, false);                                   // (C)
        Tensor fused = logits.clone(), sums = Tensor::empty({c}, dt);
        const kernels::CrossEntropyResult got = kernels::cross_entropy_and_backward(fused, t, -100, ls, 0.25, &sums);
        CHECK(got.total == want.total);
        CHECK(got.count == want.count);
        CHECK(max_abs_diff(got.lse, want.lse) == 0.0);
        CHECK(max_abs_diff(fused, want_grad) == 0.0);
        CHECK(max_abs_diff(sums, want_sums) == 0.0);
        Tensor again = logits.clone();
        kernels::cross_entropy_and_backward(again, t, -100, ls, 0.25);  // no column sums asked for
        CHECK(max_abs_diff(again, want_grad) == 0.0);
      }
}

TEST_CASE("cross_entropy_and_backward with rows_to_bf16: each row's gradient rounded in the same pass, as to_bf16 rounds it, on each path") {
  std::vector<kernels::Bf16Path> paths{kernels::Bf16Path::Portable};
  if (kernels::bf16_native_available()) paths.push_back(kernels::Bf16Path::Native);
  for (kernels::Bf16Path path : paths) {
    kernels::Bf16PathScope scope(path);
    for (int64_t c : {900, 7, 1000}) {  // spans of 256 with a short last one; a row shorter than one span
      CAPTURE(c);
      const int64_t n = 40;
      Tensor logits = randn({n, c}, 23, 3.0).to(DType::Float32);  // (n, C)
      std::vector<int64_t> tv(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) tv[i] = i % 5 == 1 ? -100 : (i * 31) % c;
      Tensor t = targets(tv);
      Tensor plain = logits.clone(), rounded = logits.clone(), s1 = Tensor::empty({c}), s2 = Tensor::empty({c});
      const double l1 = kernels::cross_entropy_and_backward(plain, t, -100, 0.1, 0.5, &s1).total;
      const double l2 = kernels::cross_entropy_and_backward(rounded, t, -100, 0.1, 0.5, &s2, true).total;
      CHECK(l1 == l2);
      CHECK(max_abs_diff(s1, s2) == 0.0);  // the column sums of the float32 gradient, before rounding
      const float* g = plain.data<float>();
      const auto* b = reinterpret_cast<const bfloat16*>(rounded.data<float>());
      std::vector<bfloat16> want(static_cast<size_t>(c));
      for (int64_t i = 0; i < n; ++i) {
        kernels::to_bf16_reference(g + i * c, want.data(), c);
        for (int64_t j = 0; j < c; ++j) REQUIRE(b[i * 2 * c + j].bits == want[static_cast<size_t>(j)].bits);  // rows 2C bfloat16 apart
      }
    }
  }
}

TEST_CASE("cross_entropy errors") {
  Variable logits(Tensor::zeros({4, 5}));
  CHECK_THROWS_WITH_AS(cross_entropy(logits, targets({0, 1, 7, 2})),
                       "cross_entropy: target 7 at row 2 is out of range for 5 classes (logits (4, 5), ignore_index -100)",
                       std::out_of_range);
  CHECK_THROWS_AS(cross_entropy(logits, targets({0, 1, -1, 2})), std::out_of_range);
  CHECK_THROWS_WITH(cross_entropy(logits, targets({0, 1, 2})),
                    "cross_entropy: logits (4, 5) and target (3,): expected logits (N, C) and target (N,)");
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::zeros({4})), doctest::Contains("target must be int64"));
  CHECK_THROWS_WITH(cross_entropy(logits, targets({0, 1, 2, 3}), -100, 1.5), doctest::Contains("label_smoothing"));
}

namespace {
// The unfused reference: linear, then cross_entropy over the whole (N, V) logits.
Variable unfused_loss(const Variable& h, const Variable& w, const Variable& b, const Tensor& t, double ls) {
  return cross_entropy(linear(h, w, b), t, -100, ls);
}
Tensor some_targets(int64_t n, int64_t v) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = i % 5 == 2 ? -100 : (i * 7 + 3) % v;
  return targets(t);
}
}  // namespace

TEST_CASE("linear_cross_entropy: the loss and gradients of linear then cross_entropy, for any chunking") {
  const int64_t N = 37, D = 5, V = 11;
  Tensor t = some_targets(N, V);
  for (int64_t chunk : {1, 4, 36, 37, 0}) {
    for (bool with_bias : {true, false}) {
      CAPTURE(chunk);
      CAPTURE(with_bias);
      Variable h1(randn({N, D}, 41), true), w1(randn({V, D}, 42), true), b1 = with_bias ? Variable(randn({V}, 43), true) : Variable();
      Variable h2(h1.data().clone(), true), w2(w1.data().clone(), true), b2 = with_bias ? Variable(b1.data().clone(), true) : Variable();
      Variable fused = linear_cross_entropy(h1, w1, b1, t, -100, 0.1, chunk);
      Variable plain = unfused_loss(h2, w2, b2, t, 0.1);
      CHECK(fused.item() == doctest::Approx(plain.item()).epsilon(1e-14));
      (fused * 2.5).backward();  // an upstream gradient other than 1 scales every gradient
      (plain * 2.5).backward();
      auto close = [](const Tensor& a, const Tensor& b) {
        double worst = 0;
        for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(a.flat_get(i) - b.flat_get(i)));
        return worst;
      };
      CHECK(close(h1.grad(), h2.grad()) < 1e-14);
      CHECK(close(w1.grad(), w2.grad()) < 1e-14);
      if (with_bias) CHECK(close(b1.grad(), b2.grad()) < 1e-14);
    }
  }
  // Without grad mode: the loss alone.
  NoGradGuard ng;
  Variable h(randn({N, D}, 44), true), w(randn({V, D}, 45), true), b(randn({V}, 46), true);
  Variable l = linear_cross_entropy(h, w, b, t, -100, 0.0, 5);
  CHECK_FALSE(l.requires_grad());
  CHECK(l.item() == doctest::Approx(unfused_loss(h, w, b, t, 0.0).item()).epsilon(1e-14));
}

TEST_CASE("gradcheck: linear_cross_entropy across chunks, with ignore_index and label smoothing") {
  Tensor t = some_targets(9, 6);
  auto fn = [t](const std::vector<Variable>& in) { return linear_cross_entropy(in[0] * 1.5, in[1], in[2], t, -100, 0.2, 4) * 0.7; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({9, 4}, 47)), leaf(randn({6, 4}, 48)), leaf(randn({6}, 49))}));
  auto no_bias = [t](const std::vector<Variable>& in) { return linear_cross_entropy(in[0], in[1], Variable(), t, -100, 0.0, 2); };
  GF_CHECK_GRADS(no_bias, (std::vector<Variable>{leaf(randn({9, 4}, 50)), leaf(randn({6, 4}, 51).transpose(0, 1).contiguous().transpose(0, 1))}));
}

TEST_CASE("linear_cross_entropy never holds the whole (N, V) logits") {
  const int64_t N = 400, D = 8, V = 1000;  // float64 logits: 3.2 MB
  Tensor t = some_targets(N, V);
  auto peak_of = [&](bool fused) {
    Variable h(randn({N, D}, 52), true), w(randn({V, D}, 53), true), b(randn({V}, 54), true);
    reset_peak_memory();
    const int64_t before = memory_stats().live_bytes;
    Variable loss = fused ? linear_cross_entropy(h, w, b, t, -100, 0.1, 50) : unfused_loss(h, w, b, t, 0.1);
    loss.backward();
    return memory_stats().peak_bytes - before;
  };
  const int64_t fused = peak_of(true), plain = peak_of(false);
  MESSAGE("peak above the inputs: fused ", fused, " bytes, unfused ", plain, " bytes");
  CHECK(fused < N * V * 8 / 2);            // a 50-row chunk of logits, and the gradients
  CHECK(plain - fused > N * V * 8 / 2);   // the unfused ops hold all N rows of logits at once
}

TEST_CASE("linear_cross_entropy errors name the op and the shapes") {
  Variable h(randn({4, 3}, 55)), w(randn({5, 2}, 56));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, Variable(), targets({0, 1, 2, 3})),
                    "linear_cross_entropy: h (4, 3), weight (5, 2) and target (4,): expected h (N, D), weight (V, D) and target (N,)");
  Variable w3(randn({5, 3}, 57)), b(randn({4}, 58));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w3, b, targets({0, 1, 2, 3})), "linear_cross_entropy: bias (4,) does not match weight (5, 3)");
  CHECK_THROWS_WITH(linear_cross_entropy(h, w3, Variable(), targets({0, 1, 2, 7}), -100, 0.0, 2),
                    "linear_cross_entropy: target 7 at row 3 is out of range for 5 classes (weight (5, 3), ignore_index -100)");
}

#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/unary.h"
#include "nn/ffn.h"
#include "gradcheck_util.h"
#include "tensor/kernels/random.h"
#include "tensor/parallel.h"

using namespace gf;
using namespace gf::testing;

TEST_CASE("Generator: seeded, reproducible, positioned") {
  Generator a(42), b(42), c(43);
  const uint64_t first = a.next_u64();
  CHECK(first == b.next_u64());
  CHECK(first != c.next_u64());
  CHECK(a.offset() == 1);
  CHECK(a.at(0) == first);  // counter-based: position 0 of the stream
  a.seed(42);
  CHECK(a.next_u64() == first);
  for (int i = 0; i < 1000; ++i) {
    const double u = a.next_double();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    REQUIRE(a.next_below(7) < 7);
  }
  CHECK_THROWS_AS(a.next_below(0), std::invalid_argument);
  // SplitMix64's published first number for seed 0: the generator is mix64(seed + n * gamma).
  Generator z(0);
  CHECK(z.next_u64() == 0xE220A8397B1DCDAFULL);
  static_assert(mix64(0) == 0);
}

TEST_CASE("uniform and normal fills have the right range and moments") {
  Generator gen(7);
  Tensor u = kernels::uniform({100000}, -2.0, 3.0, gen, DType::Float64);
  double lo = 1e9, hi = -1e9, sum = 0;
  for (double v : u.to_vector<double>()) lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
  CHECK(lo >= -2.0);
  CHECK(hi < 3.0);
  CHECK(lo < -1.99);
  CHECK(hi > 2.99);
  CHECK(sum / 1e5 == doctest::Approx(0.5).epsilon(0.02));  // mean 0.5, sd of the mean ~0.005

  Tensor z = kernels::randn({100001}, gen, DType::Float32);  // odd count: the last Box-Muller pair is cut
  double m = 0, sq = 0;
  for (float v : z.to_vector<float>()) m += v, sq += double(v) * v;
  m /= z.numel();
  CHECK(std::abs(m) < 0.02);                             // sd of the mean ~0.003
  CHECK(sq / z.numel() - m * m == doctest::Approx(1.0).epsilon(0.02));

  // Fills of a strided view land in the view.
  Tensor base = Tensor::zeros({4, 6});
  Tensor view = base.transpose(0, 1);
  kernels::uniform_(view, 1.0, 2.0, gen);
  for (int64_t i = 0; i < base.numel(); ++i) CHECK(base.flat_get(i) >= 1.0);

  CHECK_THROWS_WITH(kernels::uniform({2}, 1.0, 0.0, gen), doctest::Contains("uniform_: lo"));
}

TEST_CASE("random fills do not depend on the thread count") {
  Generator g1(99), g2(99);
  set_num_threads(1);
  Tensor a = kernels::randn({200000}, g1);
  Tensor ma = kernels::keep_mask({200000}, 0.3, g1);
  set_num_threads(2);
  Tensor b = kernels::randn({200000}, g2);
  Tensor mb = kernels::keep_mask({200000}, 0.3, g2);
  set_num_threads(0);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(ma.to_vector<bool>() == mb.to_vector<bool>());
}

TEST_CASE("dropout: seeded masks, inverted scaling, identity in eval") {
  Tensor x = kernels::uniform({50000}, 1.0, 2.0, default_generator(), DType::Float64);
  Variable xv(x);
  const double p = 0.25;
  Generator g1(5), g2(5), g3(6);
  Tensor y1 = dropout(xv, p, true, g1).data();
  Tensor y2 = dropout(xv, p, true, g2).data();
  Tensor y3 = dropout(xv, p, true, g3).data();
  CHECK(y1.to_vector<double>() == y2.to_vector<double>());  // same seed, same mask
  CHECK(y1.to_vector<double>() != y3.to_vector<double>());
  int64_t dropped = 0;
  bool scaled = true;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = y1.flat_get(i);
    if (v == 0.0) ++dropped;
    else scaled &= v == x.flat_get(i) * (1.0 / (1.0 - p));  // survivors exactly x / (1 - p)
  }
  CHECK(scaled);
  // 25% of 50000 dropped; the standard deviation of the count is ~97.
  CHECK(std::abs(dropped - 12500) < 500);

  // Eval mode and p = 0 are the identity: the same tensor, no graph.
  Generator g4(1);
  CHECK(dropout(xv, p, false, g4).data().storage() == x.storage());
  CHECK(dropout(xv, 0.0, true, g4).data().storage() == x.storage());
  CHECK(g4.offset() == 0);  // and draw nothing
  // p = 1 drops everything (no division by zero).
  Tensor all = dropout(xv, 1.0, true, g4).data();
  for (int64_t i = 0; i < 100; ++i) CHECK(all.flat_get(i) == 0.0);

  CHECK_THROWS_WITH(dropout(xv, 1.5, true, g4), "dropout: probability 1.5 is outside [0, 1] (input (50000,))");
}

TEST_CASE("dropout backward applies the same mask and scale") {
  Variable x(randn({4, 50}, 1), true);
  Generator gen(11);
  Variable y = dropout(x, 0.5, true, gen);
  Tensor up = randn({4, 50}, 2);
  y.backward(up);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool kept = y.data().flat_get(i) != 0.0;
    CHECK(x.grad().flat_get(i) == doctest::Approx(kept ? 2.0 * up.flat_get(i) : 0.0));
  }
  // gradcheck: the generator is reseeded per call so every evaluation uses the same mask.
  auto fn = [](const std::vector<Variable>& in) {
    static Generator g;
    g.seed(3);
    return dropout(in[0] * in[1], 0.4, true, g);
  };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({3, 5}, 4)), leaf(randn({5, 3}, 5).transpose(0, 1))}));
}

TEST_CASE("dropout_forward draws keep_mask's mask and gives apply_mask's output, and the integer test is to_unit's") {
  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    Generator g1(5), g2(5);
    Tensor x = kernels::uniform({3, 70001}, -1.0, 1.0, g1);  // (3, 70001)
    g2.reserve(static_cast<uint64_t>(x.numel()));             // g2 at g1's position
    Tensor mask;
    Tensor out = kernels::dropout_forward(x, p, 2.0, g1, mask);  // (3, 70001)
    Tensor ref_mask = kernels::keep_mask(x.shape(), p, g2);      // (3, 70001)
    CHECK(mask.to_vector<bool>() == ref_mask.to_vector<bool>());
    CHECK(out.to_vector<float>() == kernels::apply_mask(x, ref_mask, 2.0).to_vector<float>());
    CHECK(g1.offset() == g2.offset());
  }
  Generator g(11);
  const uint64_t t = kernels::keep_threshold(0.3);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t bits = g.next_u64();
    REQUIRE(kernels::keeps(bits, t) == (Generator::to_unit(bits) >= 0.3));
  }
}

TEST_CASE("relu_dropout is dropout(relu(x)): the same numbers, draws and gradients, keeping only its output") {
  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    for (DType dt : {DType::Float32, DType::Float64}) {
      Tensor xt = randn({7, 3001}, 21, 1.0, dt);  // (7, 3001): chunks and threads split it unevenly
      xt.flat_set(5, NAN);                        // relu lets NaN through, and so must the fused op
      Variable x1(xt, true), x2(xt.clone(), true);
      Generator g1(8), g2(8);
      Variable fused = relu_dropout(x1, p, true, g1);
      Variable plain = dropout(relu(x2), p, true, g2);
      CHECK(g1.offset() == g2.offset());
      const auto a = fused.data().to_vector<double>(), b = plain.data().to_vector<double>();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) REQUIRE((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));
      Tensor up = randn({7, 3001}, 22, 1.0, dt);
      fused.backward(up);
      plain.backward(up);
      CHECK(x1.grad().to_vector<double>() == x2.grad().to_vector<double>());
    }
  }
  // Not training, or p == 0: relu alone, no draws.
  Generator g(3);
  Variable x(randn({4, 5}, 23));
  CHECK(relu_dropout(x, 0.3, false, g).data().to_vector<double>() == relu(x).data().to_vector<double>());
  CHECK(g.offset() == 0);
  CHECK_THROWS_WITH(relu_dropout(x, -0.5, true, g), "relu_dropout: probability -0.5 is outside [0, 1] (input (4, 5))");
}

TEST_CASE("gradcheck: relu_dropout") {
  // The generator is reseeded per call so every evaluation uses the same mask; inputs are kept
  // away from relu's kink at 0, where finite differences are not a derivative.
  auto fn = [](const std::vector<Variable>& in) {
    static Generator g;
    g.seed(3);
    return relu_dropout(in[0] * in[1], 0.4, true, g);
  };
  Tensor a = randn({3, 5}, 24), b = randn({3, 5}, 25);
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(a.flat_get(i) * b.flat_get(i)) < 0.05) a.flat_set(i, 0.5), b.flat_set(i, i % 2 ? 0.5 : -0.5);
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(a), leaf(b)}));
}

TEST_CASE("the feed-forward layer's fused relu + dropout draws and computes as the two ops did") {
  Generator init(4);
  nn::FFN ffn(8, 32, "relu", 0.25, init);
  ffn.train();
  Variable x(randn({2, 5, 8}, 26, 1.0, DType::Float32));
  default_generator().seed(17);
  Variable fused = ffn.forward(x);  // (2, 5, 8)
  default_generator().seed(17);
  Variable plain = ffn.linear2->forward(ffn.dropout->forward(relu(ffn.linear1->forward(x))));  // (2, 5, 8)
  CHECK(fused.data().to_vector<float>() == plain.data().to_vector<float>());
}

#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/arith.h"
#include "gradcheck_util.h"

using namespace gf;
using namespace gf::testing;

TEST_CASE("add/sub/mul/div broadcast forward values") {
  Variable a(Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}));
  Variable b(Tensor::of({10, 20, 30}, {3}));
  CHECK((a + b).data().at({1, 2}) == 36);
  CHECK((a - b).data().at({0, 1}) == -18);
  CHECK((a * b).data().at({1, 0}) == 40);
  CHECK((b / a).data().at({0, 2}) == doctest::Approx(10));
  CHECK((a * 2.0 + 1.0).data().at({1, 1}) == 11);
  CHECK((1.0 - a).data().at({0, 0}) == 0);
}

TEST_CASE("broadcast mismatch names the op and both shapes") {
  Variable a(Tensor::zeros({2, 3})), b(Tensor::zeros({4}));
  CHECK_THROWS_WITH(a + b, doctest::Contains("add: (2, 3) and (4,) cannot be broadcast"));
}

TEST_CASE("gradcheck: arithmetic with broadcasting and transposed inputs") {
  auto fn = [](const std::vector<Variable>& in) { return (in[0] + in[1]) * in[2] - in[0] / in[3] + (-in[1]) * 0.5; };
  Variable a = leaf(randn({3, 4}, 1));
  Variable b = leaf(randn({4}, 2));
  Variable c = leaf(randn({1, 1}, 3));
  Tensor dt = randn({4, 3}, 4);
  for (int64_t i = 0; i < dt.numel(); ++i) dt.flat_set(i, 1.5 + std::abs(dt.flat_get(i)));  // away from 0
  Variable d = leaf(dt.transpose(0, 1));  // non-contiguous (3, 4)
  CHECK_FALSE(d.data().is_contiguous());
  GF_CHECK_GRADS(fn, (std::vector<Variable>{a, b, c, d}));
}

#include <doctest/doctest.h>

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "gradcheck_util.h"

using namespace gf;
using namespace gf::testing;

TEST_CASE("sum / mean / max forward values") {
  // [[1, 5, 3], [4, 2, 6]]
  Variable x(Tensor::of({1, 5, 3, 4, 2, 6}, {2, 3}, DType::Float64));
  CHECK(sum(x).data().ndim() == 0);
  CHECK(sum(x).item() == 21);
  CHECK(sum(x, {0}).data().to_vector<double>() == std::vector<double>{5, 7, 9});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1});
  CHECK(sum(x, {-1}).data().to_vector<double>() == std::vector<double>{9, 12});
  CHECK(mean(x).item() == 3.5);
  CHECK(mean(x, {1}).data().to_vector<double>() == std::vector<double>{3, 4});
  CHECK(mean(x, {0, 1}, true).shape() == Shape{1, 1});
  CHECK(max(x, 1).data().to_vector<double>() == std::vector<double>{5, 6});
  CHECK(max(x, 0).data().to_vector<double>() == std::vector<double>{4, 5, 6});
  CHECK(max(x, -1, true).shape() == Shape{2, 1});
}

TEST_CASE("backward by hand: sum spreads ones, mean spreads 1/n, max picks the first argmax") {
  Variable x = leaf(Tensor::of({1, 7, 7, 2, 0, 3}, {2, 3}, DType::Float64));
  sum(mean(x, {1})).backward();
  for (double g : x.grad().to_vector<double>()) CHECK(g == doctest::Approx(1.0 / 3));
  x.zero_grad();
  sum(max(x, 1)).backward();  // row 0 ties at 7: the first one gets the gradient
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0, 0, 1});
  x.zero_grad();
  sum(max(x, 0, true)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 1, 0, 0});
}

TEST_CASE("gradcheck: sum over every dim set, keepdim or not, transposed input") {
  Tensor base = randn({4, 2, 3}, 21);
  Variable x = leaf(base.permute({1, 2, 0}));  // (2, 3, 4), non-contiguous
  REQUIRE_FALSE(x.data().is_contiguous());
  for (bool keep : {false, true})
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {0, 2}, {-1, -2}, {0, 1, 2}}) {
      CAPTURE(keep);
      CAPTURE(dims.size());
      GF_CHECK_GRADS([=](const std::vector<Variable>& in) { return sum(in[0], dims, keep); }, std::vector<Variable>{x});
      GF_CHECK_GRADS([=](const std::vector<Variable>& in) { return mean(in[0], dims, keep); }, std::vector<Variable>{x});
    }
}

TEST_CASE("gradcheck: max along each dim, and reductions after broadcasting") {
  Variable x = leaf(randn({3, 4, 2}, 22).transpose(0, 2));  // (2, 4, 3)
  for (int64_t d : {0, 1, 2, -1})
    for (bool keep : {false, true})
      GF_CHECK_GRADS([=](const std::vector<Variable>& in) { return max(in[0], d, keep); }, std::vector<Variable>{x});
  Variable a = leaf(randn({3, 1}, 23)), b = leaf(randn({4}, 24));
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return mean(in[0] * in[1], {1}) + max(in[0] + in[1], 1); },
                 (std::vector<Variable>{a, b}));
}

TEST_CASE("reduction errors name the op and the shape") {
  Variable x(Tensor::zeros({2, 3}, DType::Float64));
  CHECK_THROWS_WITH(sum(x, {2}), doctest::Contains("sum: dim 2 is out of range for shape (2, 3)"));
  CHECK_THROWS_WITH(mean(x, {-3}), doctest::Contains("mean: dim -3 is out of range for shape (2, 3)"));
  CHECK_THROWS_WITH(max(x, 5), doctest::Contains("max: dim 5 is out of range for shape (2, 3)"));
  CHECK_THROWS_WITH(sum(x, {1, 1}), doctest::Contains("sum: dim 1 given twice"));
}

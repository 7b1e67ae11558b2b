#include <doctest/doctest.h>

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "gradcheck_util.h"
#include "tensor/kernels/indexing.h"

using namespace gf;
using namespace gf::testing;

namespace {
// 0, 1, 2, ... as float64 in `shape`.
Variable iota(const Shape& shape, bool grad = false) {
  Tensor t = Tensor::arange(shape_numel(shape), DType::Float64).reshape(shape);
  return Variable(t, grad);
}
bool shares(const Variable& a, const Variable& b) { return a.data().storage() == b.data().storage(); }
}  // namespace

TEST_CASE("views: reshape, transpose, permute, narrow, unsqueeze, squeeze, expand share storage") {
  Variable x = iota({2, 3, 4});
  Variable r = reshape(x, {4, -1});
  CHECK(r.shape() == Shape{4, 6});
  CHECK(shares(r, x));
  CHECK(r.data().at({1, 0}) == 6);

  Variable t = transpose(x, 0, 2);  // (4, 3, 2)
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(shares(t, x));
  CHECK(t.data().at({3, 1, 1}) == x.data().at({1, 1, 3}));

  Variable p = permute(x, {2, 0, 1});  // (4, 2, 3)
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(shares(p, x));
  CHECK(p.data().at({3, 1, 2}) == x.data().at({1, 2, 3}));  // 23

  Variable n = narrow(x, 1, 1, 2);  // (2, 2, 4)
  CHECK(n.shape() == Shape{2, 2, 4});
  CHECK(shares(n, x));
  CHECK(n.data().at({1, 0, 0}) == 16);
  CHECK(narrow(x, -1, -2, 2).data().at({0, 0, 0}) == 2);  // negative dim and start

  CHECK(unsqueeze(x, 1).shape() == Shape{2, 1, 3, 4});
  CHECK(unsqueeze(x, -1).shape() == Shape{2, 3, 4, 1});
  CHECK(squeeze(unsqueeze(x, 0), 0).shape() == Shape{2, 3, 4});
  CHECK(shares(squeeze(unsqueeze(x, 0), 0), x));

  Variable e = expand(iota({3, 1}), {2, 3, 4});
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.data().at({1, 2, 3}) == 2);
}

TEST_CASE("reshape of a transposed tensor copies; contiguous copies only when needed") {
  Variable x = iota({2, 3});
  Variable t = transpose(x, 0, 1);  // (3, 2): [[0, 3], [1, 4], [2, 5]]
  Variable r = reshape(t, {6});
  CHECK_FALSE(shares(r, x));
  CHECK(r.data().to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Variable c = contiguous(t);
  CHECK(c.data().is_contiguous());
  CHECK_FALSE(shares(c, x));
  CHECK(c.data().to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(shares(contiguous(x), x));
}

TEST_CASE("concat forward values, any dim, int64 too") {
  Variable a = iota({2, 2}), b(Tensor::of({10, 11, 12, 13, 14, 15}, {2, 3}, DType::Float64));
  Variable c = concat({a, b}, 1);  // (2, 5)
  CHECK(c.shape() == Shape{2, 5});
  CHECK(c.data().to_vector<double>() == std::vector<double>{0, 1, 10, 11, 12, 2, 3, 13, 14, 15});
  Variable d = concat({a, transpose(a, 0, 1), a}, 0);  // (6, 2), a non-contiguous middle part
  CHECK(d.data().to_vector<double>() == std::vector<double>{0, 1, 2, 3, 0, 2, 1, 3, 0, 1, 2, 3});
  Tensor ints = kernels::concat({Tensor::arange(2), Tensor::arange(3)}, 0);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 1, 2});
}

TEST_CASE("backward by hand: narrow pads with zeros, expand sums, concat splits") {
  Variable x = leaf(Tensor::zeros({2, 4}, DType::Float64));
  narrow(x, 1, 1, 2).backward(Tensor::of({1, 2, 3, 4}, {2, 2}, DType::Float64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 2, 0, 0, 3, 4, 0});

  Variable s = leaf(Tensor::zeros({3, 1}, DType::Float64));
  sum(expand(s, {2, 3, 5})).backward();
  CHECK(s.grad().to_vector<double>() == std::vector<double>{10, 10, 10});

  Variable a = leaf(Tensor::zeros({1, 2}, DType::Float64)), b(Tensor::zeros({2, 2}, DType::Float64));
  concat({a, b}, 0).backward(Tensor::of({1, 2, 3, 4, 5, 6}, {3, 2}, DType::Float64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 2});
  CHECK_FALSE(b.grad().defined());  // b does not require grad
}

TEST_CASE("gradcheck: every shape op, on transposed inputs") {
  Variable x = leaf(randn({4, 3, 2}, 31).permute({2, 1, 0}));  // (2, 3, 4), non-contiguous
  REQUIRE_FALSE(x.data().is_contiguous());
  using Fn = Variable (*)(const Variable&);
  std::vector<Fn> fns = {
      [](const Variable& v) { return reshape(v, {3, -1}); },
      [](const Variable& v) { return reshape(contiguous(v), {6, 4}); },
      [](const Variable& v) { return transpose(v, 0, 2); },
      [](const Variable& v) { return transpose(v, -1, 1) * 2.0; },
      [](const Variable& v) { return permute(v, {1, 2, 0}); },
      [](const Variable& v) { return contiguous(v); },
      [](const Variable& v) { return narrow(v, 2, 1, 2); },
      [](const Variable& v) { return narrow(v, 0, 1, 1) + narrow(v, 0, 0, 1); },
      [](const Variable& v) { return concat({v, narrow(v, 1, 0, 1), v}, 1); },
      [](const Variable& v) { return concat({transpose(v, 0, 2), transpose(v, 0, 2)}, -1); },
      [](const Variable& v) { return squeeze(unsqueeze(v, 1), 1) * unsqueeze(v, 0); },
      [](const Variable& v) { return expand(narrow(v, 1, 0, 1), {5, 2, 3, 4}); },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    CAPTURE(i);
    Fn f = fns[i];
    GF_CHECK_GRADS([f](const std::vector<Variable>& in) { return f(in[0]); }, std::vector<Variable>{x});
  }
}

TEST_CASE("gradcheck: concat of several inputs, some without grad") {
  Variable a = leaf(randn({2, 3}, 32)), b = leaf(randn({3, 2}, 33).transpose(0, 1)), c(randn({2, 1}, 34));
  GF_CHECK_GRADS([](const std::vector<Variable>& in) { return concat({in[0], in[2], in[1], in[0]}, 1); },
                 (std::vector<Variable>{a, b, c}));
}

TEST_CASE("shape errors name the op and the shapes") {
  Variable x = iota({2, 3});
  CHECK_THROWS_WITH(reshape(x, {4}), doctest::Contains("reshape: cannot view (2, 3) (6 elements) as (4,)"));
  CHECK_THROWS_WITH(reshape(x, {4, -1}), doctest::Contains("reshape: cannot view (2, 3) as (4, -1)"));
  CHECK_THROWS_WITH(transpose(x, 0, 2), doctest::Contains("transpose: dim 2 is out of range for shape (2, 3)"));
  CHECK_THROWS_WITH(permute(x, {0, 0}), doctest::Contains("permute: dim 0 repeated"));
  CHECK_THROWS_WITH(narrow(x, 1, 2, 2), doctest::Contains("narrow: [2, 4) is outside dim 1 of shape (2, 3)"));
  CHECK_THROWS_WITH(squeeze(x, 0), doctest::Contains("squeeze: dim 0 of shape (2, 3) is not 1"));
  CHECK_THROWS_WITH(expand(x, {2, 4}), doctest::Contains("expand: cannot expand (2, 3) to (2, 4)"));
  CHECK_THROWS_WITH(concat({x, iota({3, 2})}, 0),
                    doctest::Contains("concat: tensor 1 (3, 2) and tensor 0 (2, 3) differ outside dim 0"));
  CHECK_THROWS_WITH(concat({x, iota({6})}, 0), doctest::Contains("concat: tensor 1 (6,) and tensor 0 (2, 3)"));
  CHECK_THROWS_WITH(concat({}, 0), doctest::Contains("concat: no tensors given"));
  CHECK_THROWS_WITH(concat({x, Variable(Tensor::zeros({2, 3}))}, 0), doctest::Contains("concat: dtypes differ"));
}

#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "gradcheck_util.h"
#include "tensor/kernels/indexing.h"

using namespace gf;
using namespace gf::testing;

namespace {
Tensor ids(std::vector<int64_t> v, const Shape& shape) { return Tensor::from_vector<int64_t>(v, shape); }
Tensor bools(std::vector<bool> v, const Shape& shape) { return Tensor::from_vector<bool>(v, shape); }
}  // namespace

TEST_CASE("index_select gathers rows for indices of any shape") {
  // weight row r = [10r, 10r + 1]
  Variable w(Tensor::of({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}, DType::Float64));
  Variable out = index_select(w, ids({3, 0, 3, 1, 2, 2}, {2, 3}));
  CHECK(out.shape() == Shape{2, 3, 2});
  CHECK(out.data().to_vector<double>() == std::vector<double>{30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21});
  CHECK(index_select(w, ids({2}, {})).data().to_vector<double>() == std::vector<double>{20, 21});  // 0-d index
  Variable w1(Tensor::of({5, 6, 7}, {3}, DType::Float64));
  CHECK(index_select(w1, ids({2, 2, 0}, {3})).data().to_vector<double>() == std::vector<double>{7, 7, 5});
}

TEST_CASE("index_select backward: repeated indices accumulate, padding_idx gets nothing") {
  Variable w = leaf(Tensor::zeros({4, 2}, DType::Float64));
  Tensor idx = ids({1, 3, 1, 1, 0, 3}, {3, 2});
  index_select(w, idx).backward(Tensor::ones({3, 2, 2}, DType::Float64));
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 3, 3, 0, 0, 2, 2});
  w.zero_grad();
  index_select(w, idx, /*padding_idx=*/1).backward(Tensor::ones({3, 2, 2}, DType::Float64));
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 1, 0, 0, 0, 0, 2, 2});
}

TEST_CASE("gradcheck: index_select with repeats, padding and a transposed table") {
  Variable w = leaf(randn({3, 5}, 41).transpose(0, 1));  // (5, 3), non-contiguous
  Tensor idx = ids({4, 0, 4, 2, 2, 2, 1, 0}, {2, 4});
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return index_select(in[0], idx); }, std::vector<Variable>{w});
  // With row 2 as padding the other rows' gradients must stay exact. (Row 2's analytic gradient
  // is zero by design, unlike its numeric one, so the outputs that read it are zeroed here; the
  // zero itself is checked by hand in the test above.)
  Tensor pad_rows = Tensor::empty({2, 4, 1}, DType::Bool);  // positions whose index is 2
  for (int64_t i = 0; i < 8; ++i) pad_rows.flat_set(i, idx.flat_get(i) == 2);
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return masked_fill(index_select(in[0], idx, 2), pad_rows, 0.0); },
                 std::vector<Variable>{w});
}

TEST_CASE("index_add_ in parallel equals the serial scatter-add exactly (no races)") {
  const int64_t rows = 7, width = 300, n = 5000;
  Tensor idx = Tensor::empty({n}, DType::Int64);
  for (int64_t i = 0; i < n; ++i) idx.data<int64_t>()[i] = (i * 5 + i / 3) % rows;  // many repeats
  Tensor src = randn({n, width}, 42, 1.0, DType::Float32);
  Tensor dst = Tensor::zeros({rows, width}, DType::Float32);
  kernels::index_add_(dst, idx, src, /*skip_index=*/3);
  std::vector<float> ref(rows * width, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = idx.data<int64_t>()[i];
    if (r == 3) continue;
    for (int64_t c = 0; c < width; ++c) ref[r * width + c] += src.data<float>()[i * width + c];
  }
  CHECK(dst.to_vector<float>() == ref);
}

TEST_CASE("index_select errors name the op, the index and the table size") {
  Variable w(Tensor::zeros({5, 4}, DType::Float64));
  CHECK_THROWS_WITH(index_select(w, ids({0, 1, 5}, {3})),
                    doctest::Contains("index_select: index 5 at position 2 is out of range for a table of 5 rows "
                                      "(weight (5, 4))"));
  CHECK_THROWS_WITH(index_select(w, ids({-1}, {1})), doctest::Contains("index_select: index -1 at position 0"));
  CHECK_THROWS_WITH(index_select(w, Tensor::zeros({2})), doctest::Contains("index_select (indices): expected int64, got float32"));
  CHECK_THROWS_WITH(index_select(w, ids({0}, {1}), 5),
                    doctest::Contains("index_select: padding_idx 5 is outside a table of 5 rows (weight (5, 4))"));
  Tensor dst = Tensor::zeros({5, 4});
  CHECK_THROWS_WITH(kernels::index_add_(dst, ids({0, 1}, {2}), Tensor::zeros({2, 3})),
                    doctest::Contains("index_add_: source (2, 3) should be indices (2,) + destination rows (4,) = (2, 4)"));
}

TEST_CASE("masked_fill forward: broadcast mask, -inf fill, zero gradient where masked") {
  Variable x = leaf(Tensor::of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64));
  Tensor mask = bools({false, true, true}, {1, 3});
  Variable y = masked_fill(x, mask, -INFINITY);
  CHECK(y.data().at({1, 0}) == 4);
  CHECK(y.data().at({0, 1}) == -INFINITY);
  CHECK(y.data().at({1, 2}) == -INFINITY);
  masked_fill(x, mask, 7.5).backward(Tensor::full({2, 3}, 2.0, DType::Float64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 0, 2, 0, 0});
}

TEST_CASE("gradcheck: masked_fill with broadcast masks on a transposed input") {
  Variable x = leaf(randn({4, 2, 3}, 43).permute({1, 2, 0}));  // (2, 3, 4)
  Tensor m1 = bools({true, false, false, true}, {4});
  Tensor m2 = bools({false, true, true, false, true, false}, {2, 3, 1});
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return masked_fill(in[0], m1, -3.0); }, std::vector<Variable>{x});
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return masked_fill(in[0], m2, 0.0) * 2.0; },
                 std::vector<Variable>{x});
}

TEST_CASE("where: broadcast forward and gradients summed to each input's shape") {
  Tensor cond = bools({true, false, true}, {3, 1});
  Variable a = leaf(Tensor::of({1, 2}, {2}, DType::Float64));
  Variable b = leaf(Tensor::of({10, 20, 30, 40, 50, 60}, {3, 2}, DType::Float64));
  Variable y = where(cond, a, b);  // (3, 2)
  CHECK(y.data().to_vector<double>() == std::vector<double>{1, 2, 30, 40, 1, 2});
  y.backward(Tensor::ones({3, 2}, DType::Float64));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 2});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 0, 1, 1, 0, 0});
}

TEST_CASE("gradcheck: where with broadcasting and transposed inputs") {
  Tensor cond = bools({true, false, false, true, true, false, true, false, false, true, false, true}, {3, 4});
  Variable a = leaf(randn({4, 3}, 44).transpose(0, 1));  // (3, 4), non-contiguous
  Variable b = leaf(randn({4}, 45));
  Variable c = leaf(randn({2, 1, 1}, 46));
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return where(cond, in[0], in[1]); }, (std::vector<Variable>{a, b}));
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return where(cond, in[2], in[0] * in[1]); },
                 (std::vector<Variable>{a, b, c}));
  Tensor cond_row = bools({true, false, true, false}, {4});
  GF_CHECK_GRADS([&](const std::vector<Variable>& in) { return where(cond_row, in[1], in[2]); },
                 (std::vector<Variable>{a, b, c}));
}

TEST_CASE("masked_fill / where errors name the op and both shapes") {
  Variable x(Tensor::zeros({2, 3}, DType::Float64));
  CHECK_THROWS_WITH(masked_fill(x, Tensor::zeros({2, 3}, DType::Int64), 0),
                    doctest::Contains("masked_fill (mask): expected bool, got int64 for shape (2, 3)"));
  CHECK_THROWS_WITH(masked_fill(x, bools({true, false, true, false}, {4}), 0),
                    doctest::Contains("masked_fill: mask (4,) cannot be broadcast to input (2, 3)"));
  CHECK_THROWS_WITH(masked_fill(x, Tensor::zeros({2, 2, 3}, DType::Bool), 0),
                    doctest::Contains("masked_fill: mask (2, 2, 3) cannot be broadcast to input (2, 3)"));
  Variable b(Tensor::zeros({4}, DType::Float64));
  CHECK_THROWS_WITH(where(Tensor::zeros({2, 3}, DType::Bool), x, b),
                    doctest::Contains("where: condition (2, 3), a (2, 3) and b (4,) cannot be broadcast together"));
  CHECK_THROWS_WITH(where(Tensor::zeros({2, 3}), x, x), doctest::Contains("where (condition): expected bool, got float32"));
  CHECK_THROWS_WITH(where(Tensor::zeros({2, 3}, DType::Bool), x, Variable(Tensor::zeros({2, 3}))),
                    doctest::Contains("where: dtypes differ"));
}

TEST_CASE("scatter_add_along adds several sources per slot") {
  // out (2, 3) along dim 1 from index/src (2, 2)
  Tensor idx = ids({2, 2, 0, 1}, {2, 2});
  Tensor src = Tensor::of({1, 2, 3, 4}, {2, 2}, DType::Float64);
  Tensor out = kernels::scatter_add_along({2, 3}, 1, idx, src);
  CHECK(out.to_vector<double>() == std::vector<double>{0, 0, 3, 3, 4, 0});
  CHECK_THROWS_WITH(kernels::scatter_add_along({2, 3}, 1, ids({3, 0, 0, 0}, {2, 2}), src),
                    doctest::Contains("scatter_add_along: index 3 at position 0 is out of range for dim 1 of size 3 (output (2, 3))"));
  CHECK_THROWS_WITH(kernels::scatter_add_along({2, 3}, 0, idx, src),
                    doctest::Contains("scatter_add_along: index (2, 2) and source (2, 2) must match output (2, 3) in every dim but 0"));
}

#include <doctest/doctest.h>

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "gradcheck_util.h"
#include "tensor/kernels/random.h"
#include "tensor/kernels/reduce.h"

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

TEST_CASE("max's indices over long rows: the first largest, or the first NaN (PyTorch's rule), any length") {
  // The scalar rule the kernel's vectorised passes must agree with.
  auto expected = [](const std::vector<float>& p) {
    int64_t best = 0;
    for (size_t j = 1; j < p.size(); ++j)
      if (p[j] > p[best] || (p[j] != p[j] && p[best] == p[best])) best = static_cast<int64_t>(j);
    return best;
  };
  Generator gen(5);
  for (int64_t n : {1, 15, 16, 17, 33, 70, 5921}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<float> row(static_cast<size_t>(n));
      for (auto& x : row) x = static_cast<float>(static_cast<int>(gen.next_u64() % 7));  // small integers: many ties
      const size_t at = static_cast<size_t>(gen.next_u64() % static_cast<uint64_t>(n));
      if (kind == 1) row[at] = NAN;                                   // one NaN anywhere
      if (kind == 2) row[at] = NAN, row[n - 1] = NAN;                 // the first of two NaNs
      if (kind == 3) std::fill(row.begin(), row.end(), -INFINITY);    // every token forbidden
      if (kind == 4) row[at] = INFINITY;
      for (DType dt : {DType::Float32, DType::Float64}) {
        Tensor t = Tensor::from_vector(row, {1, n}).to(dt);
        const int64_t got = kernels::max(t, 1, false).indices.data<int64_t>()[0];
        CAPTURE(n);
        CAPTURE(kind);
        CHECK(got == expected(row));
      }
    }
  }
}

TEST_CASE("sum over leading dims of a tall tensor: every row counted, as a plain double sum") {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3001, 256}, {700, 5921}, {5, 3}, {0, 4}}) {
    Tensor t = randn({rows, cols}, 31).to(DType::Float32);  // (rows, cols): many row blocks, a partial last one
    Tensor s = kernels::sum(t, {0}, false);                 // (cols,)
    const float* p = t.data<float>();
    for (int64_t j = 0; j < cols; ++j) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += p[r * cols + j];
      CAPTURE(rows);
      CHECK(s.data<float>()[j] == doctest::Approx(want).epsilon(1e-6));
    }
  }
}

// The autograd engine itself: accumulation, deep graphs, no-grad, hooks, retain_grad, anomaly.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/unary.h"
#include "autograd/profile.h"
#include "gradcheck_util.h"

using namespace gf;
using namespace gf::testing;

TEST_CASE("a tensor used twice gets the sum of both gradients (residual connection)") {
  Variable x(Tensor::of({1, 2, 3}, {3}, DType::Float64), true);
  Variable w(Tensor::of({2, 2, 2}, {3}, DType::Float64), true);
  Variable h = x * w;       // f(x)
  Variable y = h + x;       // residual: y = x*w + x
  y.backward(Tensor::ones({3}, DType::Float64));
  // dy/dx = w + 1 = 3, dy/dw = x
  CHECK(x.grad().at({0}) == 3);
  CHECK(x.grad().at({2}) == 3);
  CHECK(w.grad().at({1}) == 2);
}

TEST_CASE("gradients accumulate across backward calls into leaves") {
  Variable x(Tensor::of({1, 2}, {2}, DType::Float64), true);
  (x * 3.0).backward(Tensor::ones({2}, DType::Float64));
  (x * 4.0).backward(Tensor::ones({2}, DType::Float64));
  CHECK(x.grad().at({0}) == 7);
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("backward through a 100,000-op chain does not overflow the stack") {
  Variable x(Tensor::of({1.0}, {1}, DType::Float64), true);
  Variable y = x;
  for (int i = 0; i < 100000; ++i) y = (i % 2) ? y * 1.0 : y + 0.0;
  y.backward();
  CHECK(x.grad().item() == 1.0);
}

TEST_CASE("dropping an un-backwarded 100,000-op chain does not overflow the stack") {
  Variable x(Tensor::of({1.0}, {1}, DType::Float64), true);
  {
    Variable y = x;
    for (int i = 0; i < 100000; ++i) y = y + 1.0;
    CHECK(y.item() == 100001.0);
  }
  CHECK(x.requires_grad());
}

TEST_CASE("the graph is freed after backward; a second backward says so") {
  Variable x(Tensor::of({2.0}, {1}, DType::Float64), true);
  Variable y = x * x;
  y.backward();
  CHECK(x.grad().item() == 4.0);
  CHECK_THROWS_WITH(y.backward(), doctest::Contains("already freed"));
  Variable z = x * x;
  z.backward(true);  // retain_graph
  z.backward();
  CHECK(x.grad().item() == 4.0 + 8.0);
}

TEST_CASE("NoGradGuard records no graph; detach cuts it") {
  Variable x(Tensor::of({1, 2}, {2}), true);
  {
    NoGradGuard ng;
    Variable y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  Variable y = x * 2.0;
  CHECK(y.requires_grad());
  Variable d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.data().storage() == y.data().storage());
}

TEST_CASE("EnableGradGuard records a graph inside a NoGradGuard and restores the mode") {
  Variable x(Tensor::of({1, 2}, {2}), true);
  NoGradGuard ng;
  {
    EnableGradGuard eg;
    CHECK(GradMode::enabled());
    Variable y = x * 2.0;
    CHECK(y.requires_grad());
    CHECK_FALSE(y.is_leaf());
  }
  CHECK_FALSE(GradMode::enabled());
  CHECK_FALSE((x * 2.0).requires_grad());
}

TEST_CASE("requires_grad_ on leaves only; int tensors cannot require grad") {
  Variable x(Tensor::of({1, 2}, {2}));
  CHECK_FALSE(x.requires_grad());
  x.requires_grad_();
  CHECK(x.requires_grad());
  Variable y = x * 2.0;
  CHECK_THROWS_WITH(y.requires_grad_(false), doctest::Contains("leaf"));
  Variable ids(Tensor::of({1, 2}, {2}, DType::Int64));
  CHECK_THROWS(ids.requires_grad_());
}

TEST_CASE("retain_grad keeps an intermediate gradient; hooks see and can replace it") {
  Variable x(Tensor::of({1, 2, 3}, {3}, DType::Float64), true);
  Variable h = x * 2.0;   // intermediate
  h.retain_grad();
  Tensor seen;
  h.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return Tensor();  // keep it
  });
  Variable y = h * h;  // dy/dh = 2h = 4x
  y.backward(Tensor::ones({3}, DType::Float64));
  REQUIRE(h.grad().defined());
  CHECK(h.grad().at({2}) == 12);
  CHECK(seen.at({1}) == 8);
  CHECK(x.grad().at({0}) == 8);  // 2 * 4x

  // A hook that doubles the gradient flowing through an intermediate.
  Variable x2(Tensor::of({1.0}, {1}, DType::Float64), true);
  Variable h2 = x2 * 3.0;
  int handle = h2.register_hook([](const Tensor& g) { return Tensor::full(g.shape(), 2.0 * g.item(), g.dtype()); });
  (h2 * 1.0).backward();
  CHECK(x2.grad().item() == 6.0);
  // Removed, the hook no longer runs: a fresh graph gives the plain gradient 3.
  h2.remove_hook(handle);
  x2.zero_grad();
  Variable h3 = x2 * 3.0;
  int calls = 0;
  const int counting = h3.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  h3.remove_hook(counting);
  (h3 * 1.0).backward();
  CHECK(calls == 0);
  CHECK(x2.grad().item() == 3.0);
}

TEST_CASE("hooks on leaves see the gradient before it accumulates") {
  Variable x(Tensor::of({1.0}, {1}, DType::Float64), true);
  double got = 0;
  x.register_hook([&](const Tensor& g) {
    got = g.item();
    return Tensor();
  });
  (x * 5.0).backward();
  CHECK(got == 5.0);
}

TEST_CASE("backward needs a scalar or an upstream gradient of the right shape") {
  Variable x(Tensor::of({1, 2}, {2}), true);
  Variable y = x * 2.0;
  CHECK_THROWS_WITH(y.backward(), doctest::Contains("(2,)"));
  CHECK_THROWS_WITH(y.backward(Tensor::ones({3})), doctest::Contains("does not match"));
  Variable c(Tensor::of({1, 2}, {2}));
  CHECK_THROWS_WITH(c.backward(Tensor::ones({2})), doctest::Contains("does not require grad"));
}

TEST_CASE("anomaly mode names the op that first produced NaN in forward, and where") {
  Variable x(Tensor::of({0.0, 1.0}, {2}, DType::Float64), true);
  AnomalyGuard ag;
  NameScope scope("encoder.layers.0");
  CHECK_THROWS_WITH(x / x, doctest::Contains("div"));
  CHECK_THROWS_WITH(x / x, doctest::Contains("encoder.layers.0"));
}

TEST_CASE("anomaly reports name the scalar op that ran and the nested scope it ran in") {
  Variable x(Tensor::of({std::nan("")}, {1}, DType::Float64), true);
  AnomalyGuard ag;
  NameScope outer("decoder.layers.0");
  NameScope inner("self_attn");
  CHECK_THROWS_WITH_AS(x + 1.0, doctest::Contains("anomaly: forward of add_scalar (inputs (1,), op #"), std::runtime_error);
  CHECK_THROWS_WITH(x + 1.0, doctest::Contains("created in decoder.layers.0/self_attn) produced NaN at element 0"));
  CHECK_THROWS_WITH(x * 2.0, doctest::Contains("anomaly: forward of mul_scalar"));
}

TEST_CASE("add_scalar records an add_scalar Node that passes the gradient through") {
  Variable x(Tensor::of({1, 2}, {2}, DType::Float64), true);
  Variable y = x + 3.0;
  CHECK(std::string(y.grad_fn()->name()) == "add_scalar");
  y.backward(Tensor::of({5, 7}, {2}, DType::Float64));
  CHECK(x.grad().at({0}) == 5);
  CHECK(x.grad().at({1}) == 7);
}

TEST_CASE("anomaly mode stops at a non-finite gradient in backward") {
  Variable x(Tensor::of({0.0, 1.0}, {2}, DType::Float64), true);
  Variable one(Tensor::of({1.0, 1.0}, {2}, DType::Float64));
  AnomalyGuard ag;
  Variable y = one / x;  // forward gives inf (allowed: masks use -inf), backward -1/x^2 = -inf
  CHECK_THROWS_WITH(y.backward(Tensor::ones({2}, DType::Float64)), doctest::Contains("non-finite gradient"));
}

TEST_CASE("without anomaly mode NaN flows silently (so the mode is what catches it)") {
  Variable x(Tensor::of({0.0}, {1}, DType::Float64), true);
  Variable y = x / x;
  CHECK(std::isnan(y.item()));
}

TEST_CASE("profile: each op's forward and backward calls, and the bytes it wrote") {
  Variable a(Tensor::ones({3, 4}, DType::Float64), true), b(Tensor::ones({4, 5}, DType::Float64), true);
  profile::start();
  Variable y = relu(matmul(a, b));  // (3, 5)
  y.backward(Tensor::ones({3, 5}, DType::Float64));
  profile::stop();
  const auto r = profile::results();
  REQUIRE(r.count("matmul") == 1);
  REQUIRE(r.count("relu") == 1);
  CHECK(r.at("matmul").forward_calls == 1);
  CHECK(r.at("matmul").backward_calls == 1);
  CHECK(r.at("matmul").forward_bytes == 3 * 5 * 8);
  CHECK(r.at("matmul").backward_bytes == (3 * 4 + 4 * 5) * 8);  // the gradients of a and b
  CHECK(r.at("relu").forward_bytes == 3 * 5 * 8);
  CHECK(r.at("matmul").forward_flops == 2 * 3 * 5 * 4);  // (3, 4) @ (4, 5)
  CHECK(r.at("matmul").backward_flops == 2 * (3 * 4 * 5 + 4 * 5 * 3));  // grad_a = g b^T, grad_b = a^T g
  CHECK(r.at("relu").forward_flops == 0);
  CHECK(r.at("relu").backward_flops == 0);
  CHECK(r.at("matmul").forward_seconds >= 0);
  Variable z = relu(a);  // after stop(): not recorded
  CHECK(profile::results().at("relu").forward_calls == 1);
}

TEST_CASE("op names: one per Op, distinct, and a Node's name is its Op's") {
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(Op::Count); ++i) {
    const char* n = op_name(static_cast<Op>(i));
    REQUIRE(n != nullptr);
    CHECK(std::string(n).size() > 0);
    names.insert(n);
  }
  CHECK(names.size() == static_cast<size_t>(Op::Count));
  Variable a(Tensor::ones({2, 3}, DType::Float64), true);
  CHECK(std::string(transpose(a, 0, 1).grad_fn()->name()) == "transpose");
  CHECK(transpose(a, 0, 1).grad_fn()->kind() == Op::Transpose);
  CHECK(std::string(permute(a, {1, 0}).grad_fn()->name()) == "permute");
  CHECK(std::string(unsqueeze(a, 0).grad_fn()->name()) == "unsqueeze");
  CHECK(std::string(sigmoid(a).grad_fn()->name()) == "sigmoid");
  CHECK(std::string(exp(a).grad_fn()->name()) == op_name(Op::Exp));
}

TEST_CASE("a leaf takes its first gradient without a copy only when no other tensor shares it") {
  // c = a + b hands the same upstream tensor to both leaves, and `up` is the caller's: neither may
  // become a leaf's .grad, or the next backward's accumulation would write into the others.
  Variable a(randn({3, 4}, 31), true), b(randn({3, 4}, 32), true);
  Tensor up = randn({3, 4}, 33);
  const std::vector<double> up_before = up.to_vector<double>();
  for (int pass = 0; pass < 2; ++pass) (a + b).backward(up);
  CHECK(up.to_vector<double>() == up_before);
  CHECK(a.grad().storage() != b.grad().storage());
  CHECK(a.grad().storage() != up.storage());
  for (int64_t i = 0; i < 12; ++i) {
    CHECK(a.grad().flat_get(i) == 2 * up_before[i]);
    CHECK(b.grad().flat_get(i) == 2 * up_before[i]);
  }
  // A gradient made for this leaf alone (w's, from x @ w) becomes .grad as it is: the hook on w
  // sees the buffer arrive, and .grad is that buffer.
  Variable x(randn({2, 3}, 34)), w(randn({3, 5}, 35), true);
  const Storage* arrived = nullptr;
  w.register_hook([&](const Tensor& g) {
    arrived = g.storage().get();
    return Tensor();
  });
  sum(matmul(x, w)).backward();
  CHECK(arrived != nullptr);
  CHECK(w.grad().storage().get() == arrived);
  const std::vector<double> once = w.grad().to_vector<double>();
  sum(matmul(x, w)).backward();  // accumulates into it
  for (size_t i = 0; i < once.size(); ++i) CHECK(w.grad().flat_get(static_cast<int64_t>(i)) == 2 * once[i]);
}

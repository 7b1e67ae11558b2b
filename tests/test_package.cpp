// The umbrella header (gradflow.h, installed as <gradflow/gradflow.h>) compiles on its own, first
// in its translation unit, and reaches every layer of the public API. scripts/test_examples.sh
// checks the installed package itself.
#include "gradflow.h"

#include <doctest/doctest.h>

using namespace gf;

TEST_CASE("gradflow.h alone reaches tensor, autograd, nn, optim and train") {
  Variable x(Tensor::of({1, 2, 3}, {3}), true);
  Variable y = sum(x * x);  // ()
  y.backward();
  CHECK(x.grad().flat_get(2) == doctest::Approx(6.0));
  nn::Linear layer(3, 2);
  optim::Adam adam(layer.named_parameters(), {});
  CHECK(adam.steps() == 0);
  CHECK(nn::feedforward_names().rfind("standard", 0) == 0);
  train::RunConfig config;
  CHECK(config.layer.feedforward == "standard");
  CHECK(train::Vocab().size() == 4);
}

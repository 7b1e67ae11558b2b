// gradflow demo: a small network learns y = sin(3x) and shows the gradients autograd computes,
// including one read from an intermediate tensor with retain_grad().
#include <fmt/core.h>

#include <cmath>

#include "app/commands.h"
#include "train/loop/step.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"

namespace gf::app {

Flags demo_flags() {
  Flags flags("demo", "Trains a 1-32-32-1 tanh network on y = sin(3x) and prints the loss and per-layer gradient norms.");
  flags.add_int("steps", 300, "training steps");
  flags.add_int("seed", 1, "random seed");
  return flags;
}

void check_demo_flags(const Flags& flags) {
  GF_CHECK_AS(UsageError, flags.integer("steps") >= 1, "demo: --steps must be positive, got {}", flags.integer("steps"));
}

namespace {
std::vector<Variable> opt_params(const std::vector<std::pair<std::string, Variable>>& named) {
  std::vector<Variable> p;
  for (const auto& [n, v] : named) p.push_back(v);
  return p;
}
}  // namespace

int cmd_demo(int argc, char** argv) {
  Flags flags = demo_flags();
  if (!flags.parse(argc, argv)) return 0;
  check_demo_flags(flags);
  const int64_t steps = flags.integer("steps");
  Generator gen(static_cast<uint64_t>(flags.integer("seed")));

  const int64_t N = 256;
  Tensor xs = kernels::uniform({N, 1}, -1.0, 1.0, gen);  // (N, 1)
  Tensor ys = Tensor::empty({N, 1});                     // (N, 1)
  for (int64_t i = 0; i < N; ++i) ys.flat_set(i, std::sin(3.0 * xs.flat_get(i)));
  Variable x(xs), y(ys);

  nn::Linear l1(1, 32, true, gen), l2(32, 32, true, gen), l3(32, 1, true, gen);
  std::vector<std::pair<std::string, Variable>> named;
  for (auto [name, layer] : {std::pair<const char*, nn::Linear*>{"l1", &l1}, {"l2", &l2}, {"l3", &l3}})
    for (auto& [n, p] : layer->named_parameters()) named.emplace_back(std::string(name) + "." + n, p);
  optim::Adam opt = train::make_adam(named, 1e-2);

  fmt::print("step      loss   |grad l1.weight|  |grad l2.weight|  |grad l3.weight|  |grad hidden|\n");
  auto norm = [](const Tensor& g) {
    double s = 0;
    for (int64_t i = 0; i < g.numel(); ++i) s += g.flat_get(i) * g.flat_get(i);
    return std::sqrt(s);
  };
  for (int64_t step = 1; step <= steps; ++step) {
    Variable h2;
    auto forward = [&] {
      Variable h1 = tanh(l1.forward(x));  // (N, 32)
      h2 = tanh(l2.forward(h1));          // (N, 32)
      h2.retain_grad();                   // read the gradient flowing into this activation
      Variable diff = l3.forward(h2) - y;  // (N, 1)
      return mean(diff * diff);           // ()
    };
    train::StepHooks hooks;
    hooks.observe = [&](double loss, double) {  // the gradients, read after backward and before Adam's update
      if (step == 1 || step % (steps / 10 > 0 ? steps / 10 : 1) == 0)
        fmt::print("{:4d}  {:9.5f}  {:16.5f}  {:16.5f}  {:16.5f}  {:12.5f}\n", step, loss, norm(l1.weight.grad()), norm(l2.weight.grad()),
                   norm(l3.weight.grad()), norm(h2.grad()));
    };
    train::train_step(opt, opt_params(named), forward, 0, 1e-2, hooks);
  }
  return 0;
}

}  // namespace gf::app

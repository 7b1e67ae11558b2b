#pragma once
// One training step, the one every training loop of gradflow takes (the trainer, the labs, `bench`,
// `demo`, `parity`), in the four lines of llm.c:
//
//   adam.zero_grad();                      // the last step's gradients, dropped before the forward
//   Variable loss = forward();             // forward
//   loss.backward();                       // backward
//   optim::clipped_update(adam, ...);      // clip, the scheduled rate, Adam's update
//
// and hooks for what a loop adds: the gradients summed across processes, statistics read between
// backward and the update, the rule that keeps a step's update out (a non-finite loss or gradient),
// or an update of its own (a bf16 master copy).
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "optim/adam.h"
#include "train/run/run_config.h"

namespace gf::train {

struct StepHooks {
  // After backward, before the gradient norm: e.g. the gradients and the loss summed across
  // processes (the trainer's data parallelism), which may change the loss the step reports.
  std::function<void(double& loss)> reduce;
  // The loss and the global gradient norm before clipping, read before the update (gradient
  // statistics, a lab's probe, `demo`'s printout).
  std::function<void(double loss, double grad_norm)> observe;
  // Whether the update is made. Default: only with a finite loss and gradient norm; a step without
  // its update leaves the weights as they were (and its gradients in place, for the caller to read).
  std::function<bool(double loss, double grad_norm)> accept;
  // The update in place of Adam's at `lr` after clipping (a lab's bf16-stored weights).
  std::function<void(double lr, double grad_norm)> update;
};

struct StepResult {
  double loss = 0;       // the batch's loss (after `reduce`)
  double grad_norm = 0;  // the global gradient norm before clipping
  bool updated = false;  // false: `accept` kept the update out
};

// One step: zero_grad, forward() (an undefined Variable: this process has no part of the batch, no
// backward), backward, reduce, the gradient norm, observe, accept, then clipping to `clip` (0: none),
// the rate `lr` and Adam's update (or hooks.update).
StepResult train_step(optim::Adam& adam, const std::vector<Variable>& params, const std::function<Variable()>& forward, double clip,
                      double lr, const StepHooks& hooks = {});

// Adam as gradflow's recipes make it, from RunConfig's defaults (betas 0.9 and 0.98, eps 1e-9: the
// Transformer paper's), the one copy of them; `c` for a recipe that sets its own.
optim::AdamOptions adam_options(double lr, const RunConfig& c = {});
optim::Adam make_adam(const std::vector<std::pair<std::string, Variable>>& named, double lr, const RunConfig& c = {});

}  // namespace gf::train

#include "train/loop/step.h"

#include <cmath>

namespace gf::train {

StepResult train_step(optim::Adam& adam, const std::vector<Variable>& params, const std::function<Variable()>& forward, double clip,
                      double lr, const StepHooks& hooks) {
  StepResult r;
  adam.zero_grad();
  if (Variable loss = forward(); loss.defined()) {
    loss.backward();
    r.loss = loss.item();
  }
  if (hooks.reduce) hooks.reduce(r.loss);
  r.grad_norm = optim::grad_norm(params);
  if (hooks.observe) hooks.observe(r.loss, r.grad_norm);
  r.updated = hooks.accept ? hooks.accept(r.loss, r.grad_norm) : std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (!r.updated) return r;
  if (hooks.update) {
    if (clip > 0) optim::clip_grad_norm(params, clip, r.grad_norm);
    hooks.update(lr, r.grad_norm);
  } else {
    optim::clipped_update(adam, params, clip, lr, r.grad_norm);
  }
  return r;
}

optim::AdamOptions adam_options(double lr, const RunConfig& c) { return {.lr = lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.adam_eps}; }

optim::Adam make_adam(const std::vector<std::pair<std::string, Variable>>& named, double lr, const RunConfig& c) {
  return optim::Adam(named, adam_options(lr, c));
}

}  // namespace gf::train

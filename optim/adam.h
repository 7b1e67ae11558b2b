#pragma once
// Adam (Kingma & Ba 2015) with PyTorch's update rule, bias correction and optional decoupled
// weight decay (AdamW). State is kept per parameter and can be saved and restored by name, so a
// resumed run continues exactly.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace gf::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled (AdamW)
};

class Adam {
 public:
  // named: (name, parameter) pairs; names key the saved state. Duplicates (tied weights) are
  // updated once.
  Adam(const std::vector<std::pair<std::string, Variable>>& named, AdamOptions opt);

  void step();       // one update from the parameters' .grad (parameters without grad are skipped)
  // The same, reading every gradient times grad_scale (clipping's coefficient) without writing it:
  // the bits of clip_grad_norm's g *= coef followed by step(), in one pass over the parameters.
  void step_scaled(double grad_scale);
  void zero_grad();  // drops the gradients
  void set_lr(double lr) { options_.lr = lr; }
  double lr() const { return options_.lr; }
  int64_t steps() const { return step_; }

  // "exp_avg.NAME" and "exp_avg_sq.NAME" tensors; step count in "step".
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  struct Slot {
    std::string name;
    Variable param;
    Tensor m, v;  // same shape as param
  };
  std::vector<Slot> slots_;
  AdamOptions options_;
  int64_t step_ = 0;
};

// The global L2 norm of all gradients (parameters without one are skipped); NaN or Inf when any
// gradient element is.
double grad_norm(const std::vector<Variable>& params);

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before
// clipping (as torch.nn.utils.clip_grad_norm_). known_norm: grad_norm(params), if already computed.
double clip_grad_norm(const std::vector<Variable>& params, double max_norm, std::optional<double> known_norm = {});

// Linear warmup then inverse square root decay, as the reference's LambdaLR:
// factor(step) = min((step + 1) / warmup, sqrt(warmup / (step + 1))); lr = base * factor.
double warmup_inverse_sqrt(double base_lr, int64_t step, int64_t warmup);

// The update after backward, as the trainer makes it: clip the global gradient norm to `clip`
// (0: no clipping), set the learning rate of 0-based `step` by warmup_inverse_sqrt, one Adam step.
// The clipping is folded into Adam's pass (Adam::step_scaled): the weights and moments get exactly
// the bits of clip_grad_norm then step(), but the gradients themselves are left unclipped.
// The PyTorch parity cases of kind seq2seq_train check exactly this function.
struct UpdateInfo {
  double grad_norm;  // before clipping (NaN when clip is 0 and no known_norm was given: not computed)
  double lr;         // the rate used
};
// known_norm: grad_norm(params), when the caller has computed it (the trainer checks it first).
UpdateInfo scheduled_update(Adam& adam, const std::vector<Variable>& params, double clip, double base_lr, int64_t step, int64_t warmup,
                            std::optional<double> known_norm = {});
// The same update at a rate the caller chose (optim/schedule.h's LrSchedule: the trainer's
// --schedule); scheduled_update is this at warmup_inverse_sqrt's rate.
UpdateInfo clipped_update(Adam& adam, const std::vector<Variable>& params, double clip, double lr, std::optional<double> known_norm = {});

}  // namespace gf::optim

#pragma once
// The learning-rate schedules `gradflow train --schedule` chooses from. Each warms up linearly over
// `warmup` steps to the peak rate; then
//   inverse-sqrt: decays as sqrt(warmup / (step + 1)) (the Transformer paper's; warmup_inverse_sqrt);
//   constant: holds the peak rate (PyTorch's constant schedule with warm-up; warmup 0: no warm-up);
//   wsd: warm-up, stable, decay (Hägele et al. 2024, arXiv:2405.18392): holds the peak rate until
//        the last `decay_fraction` of the run's budget, then decays to 0 as 1 - sqrt(x), x going
//        from 0 to 1 over that last part (the paper's "1-sqrt" cooldown).
// The budget's progress is a fraction in [0, 1] the caller measures (the trainer: time spent over
// --minutes, or steps over --steps, or batches over --epochs; whichever is the largest), so the
// schedule itself knows no clock.
#include <cstdint>
#include <string>
#include <vector>

namespace gf::optim {

// The names --schedule accepts, the default first.
const std::vector<std::string>& schedule_names();

// wsd's factor of the peak rate at 0-based `step`, with `progress` of the budget spent before it:
// min((step + 1) / warmup, 1), and over the last decay_fraction of the budget also at most
// 1 - sqrt((progress - (1 - decay_fraction)) / decay_fraction), which reaches 0 at progress 1.
// progress is clamped to [0, 1]; decay_fraction in (0, 1].
double wsd_factor(int64_t step, int64_t warmup, double progress, double decay_fraction);

struct LrSchedule {
  std::string name = "inverse-sqrt";  // or "wsd", "constant"
  int64_t warmup = 1;
  double decay_fraction = 0.15;  // wsd only

  // The rate of 0-based `step`; `progress` (wsd only) is the fraction of the budget spent before it.
  // Throws std::invalid_argument for an unknown name.
  double lr(double base_lr, int64_t step, double progress) const;
  // Whether the rate depends on the budget's progress (and so on the clock with a time budget).
  bool uses_progress() const { return name == "wsd"; }
};

}  // namespace gf::optim

#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "optim/adam.h"
#include "tensor/check.h"

namespace gf::optim {

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"inverse-sqrt", "wsd", "constant"};
  return names;
}

double wsd_factor(int64_t step, int64_t warmup, double progress, double decay_fraction) {
  const double s = static_cast<double>(step + 1), w = static_cast<double>(std::max<int64_t>(warmup, 1));
  double f = std::min(1.0, s / w);
  const double p = std::isnan(progress) ? 0.0 : std::clamp(progress, 0.0, 1.0);
  const double d = std::clamp(decay_fraction, 1e-12, 1.0);
  const double start = 1.0 - d;
  // x = (p - start) / d, computed from the share of the decay left so that the end is exactly 0.
  if (p > start) f = std::min(f, 1.0 - std::sqrt(1.0 - std::clamp((1.0 - p) / d, 0.0, 1.0)));
  return f;
}

double LrSchedule::lr(double base_lr, int64_t step, double progress) const {
  if (name == "inverse-sqrt") return warmup_inverse_sqrt(base_lr, step, warmup);
  if (name == "wsd") return base_lr * wsd_factor(step, warmup, progress, decay_fraction);
  if (name == "constant") return warmup > 0 ? base_lr * std::min(1.0, static_cast<double>(step + 1) / static_cast<double>(warmup)) : base_lr;
  GF_FAIL_AS(std::invalid_argument, "unknown learning-rate schedule '{}'", name);
}

}  // namespace gf::optim

#include "train/loop/early_stop.h"

#include <fmt/core.h>

namespace gf::train {

EarlyStop early_stop(const std::vector<CurvePoint>& valid_curve, int64_t patience) {
  EarlyStop e;
  e.evaluations = static_cast<int64_t>(valid_curve.size());
  e.best.loss = RunState{}.best_valid_loss;  // as the trainer's best checkpoint: below this to count
  for (const CurvePoint& p : valid_curve) {
    if (p.loss < e.best.loss) {  // NaN never is
      e.best = p;
      e.since_best = 0;
    } else {
      e.since_best += 1;
    }
  }
  e.stop = patience > 0 && e.since_best >= patience;
  return e;
}

std::string EarlyStop::reason(int64_t patience) const {
  const std::string best_at = since_best < evaluations ? fmt::format("best {:.4f} at step {}", best.loss, static_cast<int64_t>(best.step))
                                                       : std::string("no finite loss yet");
  return fmt::format("validation loss has not improved for {} evaluation{} ({}; --patience {})", since_best, since_best == 1 ? "" : "s", best_at,
                     patience);
}

}  // namespace gf::train

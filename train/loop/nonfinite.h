#pragma once
// A step whose loss or gradient norm is NaN or Inf never reaches the weights. The trainer re-runs
// the batch in anomaly mode to name the first op that made a NaN (with several processes, each
// re-runs its own part and rank 0 gathers the reports), then asks this policy what to do: stop,
// naming the step, the batch, the op and what to check; or, with --skip-nonfinite, warn and go on
// with the next batch, unless kMaxBadInARow batches in a row failed (the model has diverged).
// Every process holds the same summed loss and norm, so all take the same decision together.
#include <cstdint>
#include <string>

#include "train/run/checkpoint.h"
#include "train/run/run_config.h"

namespace gf::train {

class NonFiniteSteps {
 public:
  static constexpr int kMaxBadInARow = 10;

  NonFiniteSteps(const RunConfig& config, std::string dir, bool skip) : config_(config), dir_(std::move(dir)), skip_(skip) {}

  void good_step() { bad_in_a_row_ = 0; }

  // A bad step. `what` describes it ("step 7 (epoch 1, batch 7 of 24) gave loss nan and gradient
  // norm nan"), `anomaly` is the anomaly-mode report ("" when no op made a NaN). Returns when the
  // step is to be skipped (state.skipped_nonfinite counted; the warning is printed by `root`);
  // throws distributed::AgreedError when the run stops. `saved_step`: the last checkpoint's step.
  void bad_step(const std::string& what, const std::string& anomaly, RunState& state, int64_t saved_step, bool root);

 private:
  const RunConfig& config_;
  std::string dir_;
  bool skip_;
  int bad_in_a_row_ = 0;
};

}  // namespace gf::train

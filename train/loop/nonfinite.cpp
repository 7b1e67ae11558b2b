#include "train/loop/nonfinite.h"

#include <fmt/core.h>

#include "tensor/check.h"
#include "train/distributed/comm.h"

namespace gf::train {

void NonFiniteSteps::bad_step(const std::string& what, const std::string& anomaly, RunState& state, int64_t saved_step, bool root) {
  const std::string found = anomaly.empty() ? "anomaly mode, re-running that batch, found no op whose output or gradient is NaN "
                                              "(so a value overflowed to Inf)"
                                            : "anomaly mode, re-running that batch: " + anomaly;
  ++bad_in_a_row_;
  if (skip_ && bad_in_a_row_ < kMaxBadInARow) {
    state.skipped_nonfinite += 1;
    if (root)
      fmt::print(stderr, "warning: skipped {}; the weights were not updated ({} step(s) skipped so far). {}\n", what, state.skipped_nonfinite,
                 found);
    return;
  }
  const std::string last = state.model_file.empty() ? "no checkpoint was written yet"
                                                    : fmt::format("the last checkpoint ({}, step {}) is untouched", state.model_file, saved_step);
  GF_FAIL_AS(distributed::AgreedError,  // every process stops here alike
             "train: {}{}.\n  {}.\n  Check the masks before the learning rate: a fully masked attention row or an empty sequence is the "
             "usual cause of a NaN; if they are right, lower --lr (now {}) or set --clip (now {}).\n  The weights were not updated by that "
             "step and {} in {}.{}",
             what, bad_in_a_row_ > 1 ? fmt::format(", bad batch number {} in a row: the model has diverged, skipping cannot help", bad_in_a_row_) : "",
             found, config_.lr, config_.clip, last, dir_, skip_ ? "" : " --skip-nonfinite skips such steps instead of stopping.");
}

}  // namespace gf::train

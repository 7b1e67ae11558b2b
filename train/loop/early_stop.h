#pragma once
// --patience N: the run ends once N validation evaluations (one after each epoch) in a row have not
// lowered the validation loss below its best. The count is read off the validation curve that
// state.json keeps, so a resumed run continues it where the checkpoint left it; config.json keeps N
// (a resume may give --patience again). Every process holds the same agreed validation losses, so
// all of them stop together.
#include <cstdint>
#include <string>
#include <vector>

#include "train/run/checkpoint.h"

namespace gf::train {

struct EarlyStop {
  int64_t evaluations = 0;       // validation evaluations on the curve
  int64_t since_best = 0;        // evaluations after the best one (all of them when none was finite)
  CurvePoint best{0, 0};         // the best evaluation (step, loss); meaningful when evaluations > since_best
  bool stop = false;             // patience > 0 and since_best >= patience

  // "validation loss has not improved for 3 evaluations (best 1.2345 at step 400; --patience 3)".
  std::string reason(int64_t patience) const;
};

// The verdict on `valid_curve` (state.json's, oldest first): an evaluation improves when its loss
// is below every earlier one, as the trainer's best checkpoint (best.safetensors) is chosen.
EarlyStop early_stop(const std::vector<CurvePoint>& valid_curve, int64_t patience);

}  // namespace gf::train

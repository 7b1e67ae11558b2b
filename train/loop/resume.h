#pragma once
// Resuming a run folder: the newest checkpoint that loads. state.json names the latest checkpoint,
// state.prev.json the one before (train/run/checkpoint.h); when the latest one's files are
// damaged on disk, the run falls back to the previous one and says so.
#include <string>

#include "nn/module.h"
#include "optim/adam.h"
#include "train/run/checkpoint.h"

namespace gf::train {

// Loads the weights and optimizer state of the newest loadable checkpoint in `dir` into `model` and
// `adam`, and returns its run state. Warns on stderr when it fell back to the previous checkpoint;
// throws std::runtime_error listing what failed for each one tried when none loads, and naming the
// missing state.json when there is none.
RunState resume_checkpoint(const std::string& dir, nn::Module& model, optim::Adam& adam);

// best.safetensors is read only by the final report: a missing or damaged one is reported now (a
// warning), and `state.best_valid_loss` is reset so that the next validation writes it again.
void check_best_weights(const std::string& dir, RunState& state);

}  // namespace gf::train

#pragma once
// What a training run writes into its folder, and when (the checkpoint policy):
//   - a checkpoint (weights, Adam state, then state.json: train/run/checkpoint.h) at the end of
//     every epoch and when a budget or a signal stops the run midway, then loss.svg;
//   - best.safetensors after a validation that improved on the best so far (and at the end when
//     no validation ran);
//   - with --average-last K, the last K epochs' weights (epoch-NNNN.safetensors), and at the end
//     their mean, average.safetensors.
// Weights or Adam state holding a NaN or Inf are never written: the error names the tensor and the
// files already there stay. With several processes rank 0 alone writes; the others keep only the
// step of the last checkpoint, which they all agree on.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "nn/module.h"
#include "optim/adam.h"
#include "tensor/io/safetensors.h"
#include "train/run/checkpoint.h"
#include "train/loop/grad_stats.h"
#include "train/run/run_config.h"

namespace gf::train {

class RunWriter {
 public:
  // `writes`: this process writes the folder (rank 0).
  RunWriter(const RunConfig& config, std::string dir, bool writes);

  // The checkpoint of `state` at its step (sets its model_file and optim_file), then the pictures.
  void checkpoint(RunState& state, const nn::Module& model, const optim::Adam& adam, const GradStatsRecorder* grad_stats);
  // Whether the last checkpoint (written, or resumed from) is of this step.
  bool saved(int64_t step) const { return saved_step_ == step; }
  int64_t saved_step() const { return saved_step_; }
  // The checkpoint resume loaded: the last one known good, which the next save keeps as the fallback.
  void resumed_at(const RunState& loaded) { saved_step_ = loaded.step, last_good_ = loaded; }

  void best(const nn::Module& model, int64_t step);
  void best_if_missing(const nn::Module& model, int64_t step);  // at the end of a run that never validated
  // The finished epoch's weights join the last --average-last kept; older ones go.
  void keep_epoch(int64_t epoch, const nn::Module& model, int64_t step);
  // average.safetensors from the kept epochs (at least 2, with --average-last > 1): the mean it
  // wrote and the files it came from; nothing otherwise.
  struct Average {
    SafetensorsFile mean;
    std::vector<std::string> files;
  };
  std::optional<Average> average();

 private:
  void save_weights(const std::string& file, const std::map<std::string, Tensor>& weights, int64_t step) const;
  void check_finite(const std::map<std::string, Tensor>& tensors, const std::string& what, int64_t step) const;

  const RunConfig& config_;
  std::string dir_;
  bool writes_;
  std::map<std::string, std::string> file_meta_;  // every file's safetensors metadata: the format and the config
  int saves_ = 0;                                 // checkpoints written by this process
  int64_t saved_step_ = -1;                       // the step of the last checkpoint written or resumed from
  std::optional<RunState> last_good_;             // that checkpoint's state, once one loaded or was written
};

}  // namespace gf::train

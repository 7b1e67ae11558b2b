#pragma once
// The training loop of the translator: teacher forcing (input tgt[:, :-1], labels tgt[:, 1:]),
// label-smoothed cross-entropy that ignores PAD, Adam with a warm-up schedule (inverse-square-root
// decay, or warm-up-stable-decay over the budget: optim/schedule.h), gradient clipping, validation
// each epoch (and --patience's early stop), atomic checkpoints, and exact resumption.
#include <cstdint>
#include <string>
#include <vector>

#include "train/data/line_reader.h"
#include "train/run/run_config.h"
#include "train/run/run_data.h"

namespace gf::train {

struct TrainOptions {
  std::string out;          // run folder (created); required
  bool resume = false;      // continue the run in `out`
  int64_t samples = 5;      // sample translations printed at the end
  bool final_eval = true;   // decode the test split at the end (BLEU, exact match)
  bool quiet = false;       // no progress output
  int64_t grad_stats = 0;   // > 0: gradient statistics at step 1 and every this many steps (train/loop/grad_stats.h)
  bool skip_nonfinite = false;  // skip a step whose loss or gradient is NaN/Inf instead of stopping
  bool handle_signals = false;  // SIGINT/SIGTERM save a checkpoint and end the run (train/loop/interrupt.h)
  double max_memory = 0;        // bytes the model may need (train/run/memory_estimate.h); 0: what the machine has available
  size_t max_line_bytes = kMaxLineBytes;  // a longer line in the data is an error naming its file and line
  BuiltinCorpus builtin_corpus;           // the corpus of a run without --data (korean/builtin_corpus.h); none: such a run is an error
};

struct TrainResult {
  int64_t steps = 0, epochs_done = 0;
  std::vector<std::pair<int64_t, double>> step_losses;  // (step, loss) of the steps run in this call
  double valid_loss = 0;                                // last validation NLL per token
  double test_bleu = -1, test_exact = -1;               // -1: not measured
  double train_seconds = 0;
  double tokens_per_second = 0;                         // target tokens, this call
  std::string stopped_early;                            // why --patience ended the run ("" when it did not)
};

// Throws std::runtime_error on bad data, an unwritable run folder, a run folder another run holds
// (RunFolderInUse, train/loop/run_lock.h), a model too large for the memory (before building it),
// or a NaN/Inf loss or gradient (naming the step and the op); with options.handle_signals, throws Interrupted (interrupt.h) after
// saving a checkpoint on SIGINT/SIGTERM.
TrainResult train_translator(const RunConfig& config, const TrainOptions& options);

}  // namespace gf::train

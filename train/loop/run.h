#pragma once
// Internal to the trainer, not a public header: one training run, as train_translator runs it.
// trainer.cpp holds its start (data, vocabularies, model, resume, the checks every process agrees
// on), the end of each epoch and the end of the run; step_loop.cpp the loop over steps. The
// policies live in their own units: run_writer.h (what is written when), resume.h (which checkpoint
// to continue from), nonfinite.h (a NaN step: stop or skip), distributed/replicas.h (the processes
// stay identical), test_seam.h (where tests inject faults).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "train/data/batching.h"
#include "train/run/run_data.h"
#include "train/run/run_subwords.h"
#include "train/distributed/comm.h"
#include "train/distributed/grad_buckets.h"
#include "train/loop/grad_stats.h"
#include "train/run/model.h"
#include "train/loop/nonfinite.h"
#include "train/loop/progress.h"
#include "train/loop/run_lock.h"
#include "train/loop/run_writer.h"
#include "train/loop/trainer.h"

namespace gf::train {

double now_seconds();

class Run {
 public:
  Run(const RunConfig& config, const TrainOptions& opt);
  TrainResult go();

 private:
  // ---- trainer.cpp: the start, the end of each epoch, the end
  void setup();
  void prepare_run_folder();
  void setup_vocabularies();
  void build_model();
  void agree_on_setup() const;
  void resume_everywhere();
  void print_setup() const;
  void end_epoch();
  double validation_loss();
  void finish(bool stopped);
  void write_average();
  void report();
  double allreduce_seconds() const { return buckets_ ? buckets_->seconds() : 0.0; }
  std::string allreduce_share(double allreduce, double steps) const;

  // ---- step_loop.cpp: the steps
  struct StopVote {
    bool budget_spent;
    int signal;
  };
  StopVote agree_stop();
  bool out_of_budget() { return state_.epoch > clock_.max_epochs || agree_stop().budget_spent; }
  double budget_progress() const;
  bool run_epoch();
  struct StepResult {
    double loss, grad_norm;  // loss NaN: the step was skipped
  };
  StepResult step(const Batch& batch, size_t bi, size_t batches);
  Variable forward_loss(const Batch& part, int64_t global_tokens);
  double non_finite_step(const Batch& mine, int64_t global_tokens, double loss, double norm, size_t bi, size_t batches);
  std::string first_bad_op(const Batch& mine, int64_t global_tokens);
  void record(double loss, const Batch& batch);
  void show_progress(size_t bi, size_t first, size_t batches, double grad_norm);
  double elapsed() const { return clock_.seconds_before + now_seconds() - clock_.start; }
  bool interrupted() const { return agreed_signal_ != 0; }

  static constexpr int kCurveEvery = 20;  // steps averaged into one point of the training curve

  // What the run is. rank 0 logs, writes the run folder and holds its lock.
  const distributed::World& world_ = distributed::world();
  const bool root_ = world_.rank == 0;
  RunConfig config_;
  const TrainOptions& opt_;
  optim::LrSchedule schedule_;  // config_'s --schedule
  std::shared_ptr<RunFolderLock> lock_;  // rank 0, for the whole run

  // The data: every process reads it and builds the same plan (agree_on_setup checks).
  RunData data_;
  RunSegmenters segmenters_;  // whitespace, or the run's subword models
  Vocab src_vocab_, tgt_vocab_;
  std::vector<EncodedPair> train_pairs_, valid_pairs_;
  std::unique_ptr<BatchPlan> plan_, valid_plan_;  // hold indices into the pairs above

  // The model and what updates it.
  std::unique_ptr<TranslationModel> net_;
  std::unique_ptr<optim::Adam> adam_;
  std::vector<Variable> params_;
  std::unique_ptr<distributed::GradientBuckets> buckets_;  // with several processes
  std::unique_ptr<GradStatsRecorder> grad_stats_;          // with --grad-stats

  // Policies.
  RunWriter writer_;
  NonFiniteSteps nonfinite_;

  // Where the run is.
  RunState state_;
  TrainResult result_;
  Progress progress_;
  int agreed_signal_ = 0;       // SIGINT/SIGTERM that reached any process (agree_stop)
  bool stopped_early_ = false;  // --patience ended the run (train/loop/early_stop.h)
  bool poison_step_ = false;    // the test seam made this step's loss NaN
  struct Clock {
    double start = 0, seconds_before = 0, epoch_start = 0;  // seconds_before: trained before a resume
    int64_t max_epochs = 1;
    double budget_seconds = 0;
    double time_fraction = 0;  // of --minutes spent, as the processes agreed at the last stop vote (0 without it)
  } clock_;
  struct Tally {  // this call's and this epoch's counts, and the running means the logs show
    int64_t tokens_this_call = 0, epoch_tokens = 0, recent_n = 0;
    double recent_loss = 0, curve_sum = 0;
    int curve_n = 0;
    double epoch_step_seconds = 0, call_step_seconds = 0, epoch_allreduce_start = 0;
  } tally_;
};

}  // namespace gf::train

#include "train/loop/trainer.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "optim/adam.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "tensor/kernels/random.h"
#include "tensor/kernels/reduce.h"
#include "train/loop/average.h"
#include "train/loop/batch_loss.h"
#include "train/data/batching.h"
#include "train/eval/bleu.h"
#include "train/eval/score.h"
#include "train/loop/checkpoint.h"
#include "train/loop/grad_stats.h"
#include "train/loop/interrupt.h"
#include "train/loop/model.h"
#include "train/loop/progress.h"
#include "train/data/run_data.h"
#include "train/data/run_subwords.h"
#include "train/distributed/batch_split.h"
#include "train/distributed/comm.h"
#include "train/distributed/grad_buckets.h"
#include "tensor/parallel.h"
#include "train/plot/svg_plot.h"
#include "train/decode/translator.h"

namespace gf::train {
namespace fs = std::filesystem;
namespace dist = distributed;

namespace {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A well-mixed 64-bit seed for (run seed, step, process): dropout masks depend only on these. Rank
// 0's is the one-process run's, so one process trains as it always did.
uint64_t step_seed(uint64_t seed, int64_t step, int rank) {
  const uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 0x632BE59BD9B4E019ULL);
  return rank == 0 ? z : mix64(z + static_cast<uint64_t>(rank) * 0xD1B54A32D192ED03ULL);
}

// GRADFLOW_TEST_BUCKET_BYTES=N: smaller gradient buckets, so that a tiny test model has several.
size_t bucket_bytes() {
  const char* b = std::getenv("GRADFLOW_TEST_BUCKET_BYTES");
  return b ? static_cast<size_t>(std::atoll(b)) : dist::GradientBuckets::kDefaultBucketBytes;
}

// For the distributed fault tests: GRADFLOW_TEST_RANK=R limits the GRADFLOW_TEST_* faults to rank R.
bool test_fault_here() {
  const char* r = std::getenv("GRADFLOW_TEST_RANK");
  return !r || std::atoi(r) == dist::world().rank;
}

// GRADFLOW_TEST_THROW_AT_STEP=N: an error on this process alone before step N (a failing rank).
void maybe_throw_at(int64_t step) {
  const char* k = std::getenv("GRADFLOW_TEST_THROW_AT_STEP");
  if (k && std::atoll(k) == step && test_fault_here())
    GF_FAIL_AS(std::runtime_error, "train: GRADFLOW_TEST_THROW_AT_STEP: a test fault on this process before step {}", step);
}

// For the crash test: GRADFLOW_TEST_KILL_IN_SAVE=N kills the process during the N-th checkpoint,
// after the new weights are written and before state.json names them.
void maybe_die_in_save(int save_index) {
  const char* k = std::getenv("GRADFLOW_TEST_KILL_IN_SAVE");
  if (k && std::atoi(k) == save_index) std::raise(SIGKILL);
}

// One training run: setup (data, vocabularies, model, optimizer, resume), the step loop, the end
// of each epoch (validation, best weights, checkpoint) and the final report.
class Run {
 public:
  Run(const RunConfig& config, const TrainOptions& opt) : config_(config), opt_(opt) {}

  TrainResult go() {
    std::optional<InterruptGuard> signals;
    if (opt_.handle_signals) signals.emplace();
    setup();
    if (root_) print_setup();
    start_ = now_seconds();
    seconds_before_ = state_.train_seconds;
    bool stopped = false;
    while (!stopped && !out_of_budget()) {
      stopped = run_epoch();
      if (!stopped) end_epoch();
    }
    progress_.clear();
    finish(stopped);
    if (interrupted())
      throw Interrupted(agreed_signal_, fmt::format("interrupted by {} at step {}; checkpoint saved in {}; continue with: gradflow train --resume {}",
                                                    agreed_signal_ == SIGINT ? "Ctrl-C (SIGINT)" : "SIGTERM", state_.step, opt_.out, opt_.out));
    if (opt_.final_eval && !data_.test.empty() && root_) report();
    return result_;
  }

 private:
  // ---------------------------------------------------------------- setup
  // Every process reads the data and builds the same plan; rank 0 alone writes the run folder.
  void setup() {
    if (root_) prepare_run_folder();
    data_ = load_run_data(config_);
    GF_CHECK_AS(std::runtime_error, !data_.train.empty(), "train: the training split ({}) is empty{}", data_.train_name,
                data_.skipped_empty ? fmt::format(" ({} pairs with an empty side were skipped while reading)", data_.skipped_empty) : "");
    GF_CHECK_AS(std::runtime_error, !data_.valid.empty(), "train: the validation split ({}) is empty", data_.valid_name);
    setup_vocabularies();
    train_pairs_ = encode_pairs(segment_pairs(data_.train, segmenters_), src_vocab_, tgt_vocab_);
    valid_pairs_ = encode_pairs(segment_pairs(data_.valid, segmenters_), src_vocab_, tgt_vocab_);
    plan_ = std::make_unique<BatchPlan>(train_pairs_, config_.max_tokens, config_.max_len);
    // config_.max_tokens is the global batch's limit; validation batches are one process's share.
    valid_plan_ = std::make_unique<BatchPlan>(valid_pairs_, std::max<int64_t>(1, config_.max_tokens / world_.size), config_.max_len);

    net_ = make_translation_model(config_, src_vocab_, tgt_vocab_, config_.seed);
    net_->module().train();
    adam_ = std::make_unique<optim::Adam>(net_->module().named_parameters(),
                                          optim::AdamOptions{.lr = config_.lr, .beta1 = config_.beta1, .beta2 = config_.beta2, .eps = config_.adam_eps});
    params_ = net_->module().parameters();
    if (opt_.resume) resume_everywhere();
    else state_.epoch = 1;
    share_weights();
    if (dist::several()) buckets_ = std::make_unique<dist::GradientBuckets>(params_, bucket_bytes());
    if (opt_.grad_stats > 0 && root_) grad_stats_ = std::make_unique<GradStatsRecorder>(*net_, opt_.out, opt_.grad_stats, opt_.resume ? state_.step : 0);
    max_epochs_ = config_.epochs > 0 ? config_.epochs : (config_.steps == 0 && config_.minutes <= 0 ? 1 : INT64_MAX);
    budget_seconds_ = config_.minutes > 0 ? config_.minutes * 60.0 : INFINITY;
    file_meta_ = {{"format", "gradflow"}, {"config", config_.to_json()}};
  }

  // Checkpoints go into the run folder: one that cannot be written is refused now, not after the
  // first epoch's training.
  void prepare_run_folder() const {
    std::error_code ec;
    fs::create_directories(opt_.out, ec);
    GF_CHECK_AS(std::runtime_error, !ec, "train: cannot create the run folder '{}': {}", opt_.out, ec.message());
    const std::string probe = run_file(opt_.out, ".write-check");
    try {
      write_file_atomic(probe, "");
    } catch (const std::exception& e) {
      GF_FAIL_AS(std::runtime_error, "train: cannot write in the run folder '{}': {}", opt_.out, e.what());
    }
    fs::remove(probe, ec);
    if (const size_t n = remove_abandoned_temp_files(opt_.out))
      fmt::print(stderr, "train: removed {} temporary file(s) left in {} by a run killed while saving\n", n, opt_.out);
  }

  // Whitespace vocabularies are counted from the training split; subword models are learnt from
  // it, and their pieces are the vocabularies. A resumed run reads back what the first one saved.
  void setup_vocabularies() {
    if (opt_.resume) {
      RunVocabularies v = load_run_vocabularies(config_, opt_.out);
      segmenters_ = std::move(v.segmenters);
      src_vocab_ = std::move(v.src);
      tgt_vocab_ = std::move(v.tgt);
      return;
    }
    if (config_.subwords > 0 && root_) {
      segmenters_ = train_run_subwords(config_, data_.train, opt_.out, max_threads());
      std::tie(src_vocab_, tgt_vocab_) = subword_vocabularies(segmenters_);
    } else if (config_.subwords == 0) {
      std::tie(src_vocab_, tgt_vocab_) = build_vocabularies(config_, data_.train);
    }
    if (root_) {
      src_vocab_.save(run_file(opt_.out, "vocab.src.txt"));
      tgt_vocab_.save(run_file(opt_.out, "vocab.tgt.txt"));
      write_file_atomic(run_file(opt_.out, "config.json"), config_.to_json());
    }
    // Subword training is not reproducible across processes: the others read rank 0's models
    // (the run folder must be the same on every machine: one machine, or a shared file system).
    if (config_.subwords > 0 && dist::several()) {
      dist::quiet_barrier();
      if (!root_) {
        RunVocabularies v = load_run_vocabularies(config_, opt_.out);
        segmenters_ = std::move(v.segmenters);
        src_vocab_ = std::move(v.src);
        tgt_vocab_ = std::move(v.tgt);
      }
    }
  }

  // Rank 0 loads the checkpoint (with resume()'s fallback); the others take its run state and
  // optimizer state, so every process continues from the same one.
  void resume_everywhere() {
    if (root_) resume();
    if (!dist::several()) return;
    std::string state = root_ ? state_to_json(state_) : "";
    dist::broadcast(state);
    if (!root_) state_ = state_from_json(state, "rank 0's run state");
    saved_step_ = state_.step;
    share_optimizer_state();
  }

  void share_optimizer_state() {
    std::map<std::string, Tensor> optimizer = adam_->state_dict();  // the same names and shapes everywhere
    for (auto& [name, t] : optimizer) {
      if (!root_) t = t.clone();  // received into a copy: state_dict() shares the optimizer's storage
      dist::broadcast_bytes(t.raw_data(), t.nbytes());
    }
    if (!root_) adam_->load_state_dict(optimizer);
  }

  // The processes' weights stay equal because every one makes the same update from the same
  // summed gradient. Checked once an epoch (a sum over the weights, compared by allreduce); should
  // they ever differ (an MPI whose allreduce gave processes different bits), rank 0's are sent again.
  void check_replicas() {
    if (!dist::several()) return;
    double sum = 0;
    for (const Variable& p : params_) {
      const Tensor w = p.data().contiguous();
      const float* pw = w.data<float>();
      for (int64_t i = 0; i < w.numel(); ++i) sum += pw[i];
    }
    double range[2] = {sum, -sum};  // max and -min
    dist::allreduce_max(range);
    if (range[0] == -range[1] || !std::isfinite(sum)) return;  // NaN weights are refused when saved (check_finite)
    if (root_)
      fmt::print(stderr, "warning: the processes' weights differ after step {} (sums {} to {}); rank 0's are sent to all\n", state_.step,
                 -range[1], range[0]);
    share_weights();
    share_optimizer_state();
  }

  // Every process starts from rank 0's weights, after initialisation or resume, bit for bit.
  void share_weights() {
    if (!dist::several()) return;
    for (const Variable& p : params_) {
      const Tensor& w = p.data();
      GF_CHECK_AS(std::logic_error, w.is_contiguous(), "train: parameter {} is not contiguous", shape_str(w.shape()));
      dist::broadcast_bytes(w.raw_data(), w.nbytes());
    }
  }

  // From state.json's checkpoint, or, when its files cannot be loaded, from state.prev.json's.
  void resume() {
    const std::vector<SavedState> saved = saved_states(opt_.out);
    if (saved.empty()) (void)load_state(opt_.out);  // throws its "has no state.json" error
    std::string failures;  // one line per saved state tried
    for (const SavedState& st : saved) {
      const std::string load_error = st.error.empty() ? try_load_checkpoint(st.state) : "";
      if (st.error.empty() && load_error.empty()) {
        state_ = st.state;
        saved_step_ = state_.step;
        if (!failures.empty())
          fmt::print(stderr, "warning: resuming from the previous checkpoint ({}, step {}) because the newer one cannot be loaded:{}\n",
                     st.path, state_.step, failures);
        check_best_weights();
        return;
      }
      const std::string why = st.error.empty() ? fmt::format("{}: {}", fs::path(st.path).filename().string(), load_error) : st.error;
      failures += (saved.size() > 1 ? "\n  " : " ") + why;
    }
    GF_FAIL_AS(std::runtime_error, "train --resume: no loadable checkpoint in '{}':{}", opt_.out, failures);
  }

  // Loads the weights and optimizer state a saved state names; returns what failed, or "".
  std::string try_load_checkpoint(const RunState& st) {
    try {
      net_->module().load_state_dict(load_safetensors(run_file(opt_.out, st.model_file)).tensors, true);
      adam_->load_state_dict(load_safetensors(run_file(opt_.out, st.optim_file)).tensors);
      GF_CHECK_AS(std::runtime_error, adam_->steps() == st.step, "optimizer state is at step {} but the run state says {}", adam_->steps(), st.step);
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  // best.safetensors is read only by the final report: a damaged one is found now, not after the
  // whole run, and the next validation writes it again.
  void check_best_weights() {
    const std::string best = run_file(opt_.out, "best.safetensors");
    std::string problem = "is missing";
    if (fs::exists(best)) {
      try {
        (void)load_safetensors(best);
        return;
      } catch (const std::exception& e) {
        problem = fmt::format("cannot be read ({})", e.what());
      }
    }
    fmt::print(stderr, "warning: {} {}; the next validation writes it again\n", best, problem);
    state_.best_valid_loss = 1e300;
  }

  void print_setup() const {
    std::FILE* log = stdout;
    fmt::print(log, "data: {}\n", config_.data_description());
    fmt::print(log, "  train {} pairs ({} batches of <= {} tokens{}; {} skipped over --max-len {}), valid {}, test {}{}\n", plan_->pairs_used(),
               plan_->size(), config_.max_tokens,
               dist::several() ? fmt::format(", each split over {} processes (train/distributed/batch_split.h)", world_.size) : "",
               plan_->skipped_too_long(), config_.max_len, valid_plan_->pairs_used(), data_.test.size(),
               data_.skipped_empty ? fmt::format(" ({} empty lines skipped)", data_.skipped_empty) : "");
    const std::string kind = config_.subwords > 0 ? fmt::format("SentencePiece {}{}, {}", config_.subword_type, config_.joint_vocab ? " joint" : "",
                                                                fmt::join(subword_model_files(config_), " "))
                                                  : fmt::format("whitespace tokens, min freq {}", config_.min_freq);
    fmt::print(log, "  vocab: source {}, target {} ({})\n", src_vocab_.size(), tgt_vocab_.size(), kind);
    const nn::TransformerLayerOptions& l = config_.layer;
    fmt::print(log, "model: {}, d_model {}, heads {} (kv {}), layers {}{}, ff {}, {}, {} {}, dropout {}, {} parameters\n", config_.arch, l.d_model,
               l.nhead, l.key_value_heads(), config_.layers, config_.arch == "decoder-only" ? "" : fmt::format("+{}", config_.layers),
               l.dim_feedforward, l.activation, l.norm_first ? "pre" : "post", l.norm, l.dropout, net_->module().num_parameters());
    std::string budget;
    if (config_.epochs) budget += fmt::format(" {} epochs", config_.epochs);
    if (config_.steps) budget += fmt::format(" {} steps", config_.steps);
    if (config_.minutes > 0) budget += fmt::format(" {} minutes", config_.minutes);
    fmt::print(log, "train: lr {} warmup {} label smoothing {} clip {}, budget:{}{}\n", config_.lr, config_.warmup, config_.label_smoothing,
               config_.clip, budget.empty() ? " 1 epoch" : budget,
               opt_.resume ? fmt::format(" (resuming at step {}, epoch {})", state_.step, state_.epoch) : "");
    std::fflush(log);
  }

  // ---------------------------------------------------------------- the step loop
  double elapsed() const { return seconds_before_ + now_seconds() - start_; }
  // Whether to stop before the next step, decided by every process together (an allreduce): the
  // step budget (the same everywhere), the time budget on any process's clock, and a signal that
  // reached any process. Every process calls this at the same points.
  struct StopVote {
    bool budget_spent;
    int signal;  // agreed_signal_
  };
  StopVote agree_stop() {
    double votes[2] = {elapsed() >= budget_seconds_ ? 1.0 : 0.0, opt_.handle_signals ? static_cast<double>(interrupt_signal()) : 0.0};
    dist::allreduce_max(votes);
    if (votes[1] != 0) agreed_signal_ = static_cast<int>(votes[1]);
    return {(config_.steps > 0 && state_.step >= config_.steps) || votes[0] != 0, agreed_signal_};
  }
  bool out_of_budget() { return state_.epoch > max_epochs_ || agree_stop().budget_spent; }

  // Runs the rest of the current epoch; true when the budget stopped it midway.
  bool run_epoch() {
    const std::vector<size_t> order = plan_->epoch_order(config_.seed, static_cast<uint64_t>(state_.epoch));
    epoch_start_ = now_seconds();
    epoch_tokens_ = 0;
    epoch_step_seconds_ = 0;
    epoch_allreduce_start_ = allreduce_seconds();
    const size_t first = static_cast<size_t>(state_.batch_in_epoch);  // > 0 after a mid-epoch resume
    for (size_t bi = first; bi < order.size(); ++bi) {
      if (const StopVote v = agree_stop(); v.budget_spent || v.signal) return true;
      const Batch batch = plan_->batch(order[bi]);
      const double t0 = now_seconds();
      const double loss = step(batch, bi, order.size());
      epoch_step_seconds_ += now_seconds() - t0;
      call_step_seconds_ += now_seconds() - t0;
      state_.batch_in_epoch = static_cast<int64_t>(bi) + 1;
      if (std::isfinite(loss)) record(loss, batch);  // a skipped step has none
      if (!opt_.quiet && root_) show_progress(bi, first, order.size());
    }
    return false;
  }

  // One optimizer step on a (global) batch; returns its loss. Dropout masks depend only on (seed,
  // step, process). A loss or gradient that is NaN or Inf never reaches the weights
  // (non_finite_step); with several processes the loss and norm tested are the summed ones, which
  // every process holds alike, so all of them skip or stop together.
  double step(const Batch& batch, size_t bi, size_t batches) {
    maybe_throw_at(state_.step + 1);
    const Batch mine = dist::batch_part(train_pairs_, batch, world_.rank, world_.size);  // the batch itself with one process
    default_generator().seed(step_seed(config_.seed, state_.step, world_.rank));
    if (grad_stats_) grad_stats_->begin_step(state_.step + 1, mine);
    const double l = backward_share(mine, batch.tgt_tokens);
    const double norm = optim::grad_norm(params_);
    if (grad_stats_) grad_stats_->after_backward();
    if (!std::isfinite(l) || !std::isfinite(norm)) return non_finite_step(mine, batch.tgt_tokens, l, norm, bi, batches);
    bad_in_a_row_ = 0;
    optim::scheduled_update(*adam_, params_, config_.clip, config_.lr, state_.step, config_.warmup, norm);
    if (grad_stats_) grad_stats_->after_update(l, adam_->lr());
    state_.step += 1;
    return l;
  }

  // Forward and backward of this process's part of the batch; with several processes, then the
  // gradients (in buckets) and the loss summed over all of them. Returns the global batch's loss.
  double backward_share(const Batch& mine, int64_t global_tokens) {
    double loss_value = 0;  // an empty part adds nothing
    // The last step's gradients are dropped before the forward, not after it: they are not held
    // beside this step's activations, which lowers the step's peak memory by a model's worth.
    adam_->zero_grad();
    if (mine.rows > 0) {
      Variable loss = forward_loss(mine, global_tokens);
      loss.backward();
      loss_value = loss.item();
    }
    if (!buckets_) return loss_value;
    buckets_->allreduce();
    dist::allreduce_sum(std::span<double>(&loss_value, 1));
    return loss_value;
  }

  // The model's loss is a mean over the part's target tokens. With several processes it is weighted
  // by the part's share of the global batch's tokens, so that the sum over the processes, of the
  // losses and of their gradients, is the global batch's mean: the one-process run's.
  Variable forward_loss(const Batch& part, int64_t global_tokens) {
    Variable loss = net_->loss(part, config_.label_smoothing);
    if (dist::several()) loss = loss * (static_cast<double>(part.tgt_tokens) / static_cast<double>(global_tokens));
    return poison_pending() ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
  }

  // For the fault tests: GRADFLOW_TEST_NAN_AT_STEP=N makes the first batch tried as step N give a
  // NaN loss, made by an op of the graph (so anomaly mode finds it), as one bad batch would.
  bool poison_pending() const {
    static const long long at = [] {
      const char* v = std::getenv("GRADFLOW_TEST_NAN_AT_STEP");
      return v ? std::atoll(v) : -1LL;
    }();
    return !poisoned_ && state_.step + 1 == at && test_fault_here();
  }

  // The step's loss or gradient norm is NaN/Inf. The weights are left as they were; the batch is
  // re-run in anomaly mode to name the first op that made a NaN. Then the run stops, or, with
  // --skip-nonfinite, goes on to the next batch (unless every batch fails: the model has diverged).
  double non_finite_step(const Batch& mine, int64_t global_tokens, double loss, double norm, size_t bi, size_t batches) {
    const std::string anomaly = gathered(first_bad_op(mine, global_tokens));
    poisoned_ = poisoned_ || poison_pending();
    adam_->zero_grad();
    if (grad_stats_) {  // the diverging step's picture is the one wanted
      grad_stats_->after_update(loss, adam_->lr());
      grad_stats_->write_svg();
    }
    const std::string what = fmt::format("step {} (epoch {}, batch {} of {}) gave loss {} and gradient norm {}", state_.step + 1, state_.epoch,
                                         bi + 1, batches, loss, norm);
    const std::string found = anomaly.empty() ? "anomaly mode, re-running that batch, found no op whose output or gradient is NaN "
                                                "(so a value overflowed to Inf)"
                                              : "anomaly mode, re-running that batch: " + anomaly;
    ++bad_in_a_row_;
    if (opt_.skip_nonfinite && bad_in_a_row_ < kMaxBadInARow) {
      state_.skipped_nonfinite += 1;
      progress_.clear();
      if (root_)
        fmt::print(stderr, "warning: skipped {}; the weights were not updated ({} step(s) skipped so far). {}\n", what, state_.skipped_nonfinite,
                   found);
      return NAN;
    }
    const std::string last = state_.model_file.empty() ? "no checkpoint was written yet"
                                                       : fmt::format("the last checkpoint ({}, step {}) is untouched", state_.model_file, saved_step_);
    GF_FAIL_AS(dist::AgreedError,  // every process stops here alike
               "train: {}{}.\n  {}.\n  Check the masks before the learning rate: a fully masked attention row or an empty sequence is the "
               "usual cause of a NaN; if they are right, lower --lr (now {}) or set --clip (now {}).\n  The weights were not updated by that "
               "step and {} in {}.{}",
               what, bad_in_a_row_ > 1 ? fmt::format(", bad batch number {} in a row: the model has diverged, skipping cannot help", bad_in_a_row_) : "",
               found, config_.lr, config_.clip, last, opt_.out, opt_.skip_nonfinite ? "" : " --skip-nonfinite skips such steps instead of stopping.");
  }

  // With several processes, rank 0 gets each process's anomaly report, naming its rank.
  static std::string gathered(const std::string& report) {
    if (!dist::several()) return report;
    std::string all;
    const std::vector<std::string> reports = dist::gather(report);
    for (size_t r = 0; r < reports.size(); ++r)
      if (!reports[r].empty()) all += fmt::format("{}rank {}: {}", all.empty() ? "" : "; ", r, reports[r]);
    return all;
  }

  // Re-runs this process's part with the same dropout masks in anomaly mode; returns its report, or "".
  std::string first_bad_op(const Batch& mine, int64_t global_tokens) {
    if (mine.rows == 0) return "";
    default_generator().seed(step_seed(config_.seed, state_.step, world_.rank));
    AnomalyGuard anomaly;
    std::string report;
    try {
      Variable loss = forward_loss(mine, global_tokens);
      adam_->zero_grad();
      loss.backward();
    } catch (const std::exception& e) {
      report = e.what();
    }
    return report;
  }

  // Never write NaN/Inf weights or optimizer state over good ones.
  void check_finite(const std::map<std::string, Tensor>& tensors, const std::string& file) const {
    for (const auto& [name, t] : tensors) {
      const int64_t i = kernels::first_nonfinite(t, true);
      GF_CHECK_AS(std::runtime_error, i < 0,
                  "train: not writing {}: {} holds a NaN or Inf (element {}) after step {}; an update overflowed: lower --lr (now {}) or set "
                  "--clip. Files already in {} are untouched.",
                  file, name, i, state_.step, config_.lr, opt_.out);
    }
  }

  void save_weights(const std::string& file, const std::map<std::string, Tensor>& weights) {
    check_finite(weights, file);
    save_safetensors(file, weights, file_meta_);
  }

  // The loss into the result, the recent average and the 20-step training curve.
  void record(double loss, const Batch& batch) {
    result_.step_losses.emplace_back(state_.step, loss);
    tokens_this_call_ += batch.tgt_tokens;
    epoch_tokens_ += batch.tgt_tokens;
    recent_loss_ += loss, recent_n_ += 1;
    curve_sum_ += loss;
    if (++curve_n_ == kCurveEvery) {
      state_.train_curve.push_back({static_cast<double>(state_.step), curve_sum_ / kCurveEvery});
      curve_sum_ = 0, curve_n_ = 0;
    }
  }

  void show_progress(size_t bi, size_t first, size_t batches) {
    ProgressInfo p;
    p.epoch = state_.epoch;
    p.step = state_.step;
    p.batch = static_cast<int64_t>(bi) + 1;
    p.batches = static_cast<int64_t>(batches);
    p.loss = recent_loss_ / static_cast<double>(recent_n_);
    const double dt = now_seconds() - epoch_start_;
    p.tokens_per_s = dt > 0 ? static_cast<double>(epoch_tokens_) / dt : 0;
    p.lr = adam_->lr();
    EtaInput e;
    e.epoch_seconds = dt;
    e.steps_timed = static_cast<int64_t>(bi + 1 - first);  // the steps of this epoch run in this call
    if (config_.minutes > 0) e.seconds_left_by_time = std::max(0.0, budget_seconds_ - elapsed());
    if (config_.steps > 0) e.steps_left_by_steps = config_.steps - state_.step;
    if (max_epochs_ != INT64_MAX)
      e.steps_left_by_epochs = (max_epochs_ - state_.epoch) * static_cast<int64_t>(batches) + static_cast<int64_t>(batches - bi - 1);
    p.eta_seconds = estimate_eta(e);
    progress_.update(p);
    if (state_.step % config_.log_every == 0) recent_loss_ = 0, recent_n_ = 0;
  }

  // ---------------------------------------------------------------- epochs and checkpoints
  void end_epoch() {
    progress_.clear();
    check_replicas();
    const double valid = validation_loss();
    result_.valid_loss = valid;
    state_.valid_curve.push_back({static_cast<double>(state_.step), valid});
    const bool best = valid < state_.best_valid_loss;
    if (best) {
      state_.best_valid_loss = valid;
      if (root_) save_weights(run_file(opt_.out, "best.safetensors"), net_->module().state_dict());
    }
    const double dt = now_seconds() - epoch_start_;
    if (root_) {
      fmt::print("epoch {} done: step {}, valid loss {:.4f} (ppl {:.2f}){}, {:.0f} tgt tok/s{}, {} elapsed\n", state_.epoch, state_.step, valid,
                 std::exp(valid), best ? " best" : "", dt > 0 ? static_cast<double>(epoch_tokens_) / dt : 0.0,
                 allreduce_share(allreduce_seconds() - epoch_allreduce_start_, epoch_step_seconds_), format_duration(elapsed()));
      std::fflush(stdout);
    }
    state_.epoch += 1;
    state_.batch_in_epoch = 0;
    result_.epochs_done += 1;
    checkpoint();
    if (config_.average_last > 1 && root_) keep_epoch_weights(state_.epoch - 1);
    dist::quiet_barrier();  // the others wait for rank 0's files without taking its cores
  }

  // Validation NLL per target token; with several processes each scores every N-th batch.
  double validation_loss() {
    const LossSum s = evaluate_loss_sum(*net_, *valid_plan_, static_cast<size_t>(world_.rank), static_cast<size_t>(world_.size));
    double sums[2] = {s.total, static_cast<double>(s.tokens)};
    dist::allreduce_sum(sums);
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  }

  double allreduce_seconds() const { return buckets_ ? buckets_->seconds() : 0.0; }
  // ", allreduce 12.5% of step time" with several processes: the gradient buckets' reduction,
  // waiting for the slowest process included.
  std::string allreduce_share(double allreduce, double steps) const {
    if (!buckets_ || steps <= 0) return "";
    return fmt::format(", allreduce {:.1f}% of step time", 100.0 * allreduce / steps);
  }

  // The finished epoch's weights join the last --average-last kept for averaging; older ones go.
  void keep_epoch_weights(int64_t epoch) {
    save_weights(epoch_weight_file(opt_.out, epoch), net_->module().state_dict());
    std::vector<std::string> kept = epoch_weight_files(opt_.out);
    std::error_code ec;
    for (size_t i = 0; i + static_cast<size_t>(config_.average_last) < kept.size(); ++i) fs::remove(kept[i], ec);
  }

  // average.safetensors: the mean of the kept epochs' weights, with its validation loss.
  void write_average() {
    if (config_.average_last < 2) return;
    const std::vector<std::string> kept = epoch_weight_files(opt_.out, static_cast<size_t>(config_.average_last));
    if (kept.size() < 2) return;
    const SafetensorsFile mean = average_weights(kept);
    save_safetensors(run_file(opt_.out, "average.safetensors"), mean.tensors, file_meta_);
    std::unique_ptr<TranslationModel> avg = make_translation_model(config_, src_vocab_, tgt_vocab_, config_.seed);
    avg->module().load_state_dict(mean.tensors, true);
    avg->module().eval();
    const double valid = evaluate_loss(*avg, *valid_plan_);
    fmt::print("average.safetensors: mean of the last {} epochs' weights ({} .. {}), valid loss {:.4f} (best epoch's {:.4f})\n", kept.size(),
               fs::path(kept.front()).filename().string(), fs::path(kept.back()).filename().string(), valid, state_.best_valid_loss);
  }

  // Rank 0 alone writes; the checkpoint holds nothing of any other process.
  void checkpoint() {
    state_.train_seconds = elapsed();
    if (!root_) {
      saved_step_ = state_.step;
      return;
    }
    maybe_die_in_save(++saves_);
    const std::map<std::string, Tensor> weights = net_->module().state_dict(), optimizer = adam_->state_dict();
    check_finite(weights, "a checkpoint");
    check_finite(optimizer, "a checkpoint");
    save_checkpoint(opt_.out, state_, weights, optimizer, file_meta_);
    saved_step_ = state_.step;
    std::vector<std::pair<double, double>> tr, va;
    for (auto& p : state_.train_curve) tr.emplace_back(p.step, p.loss);
    for (auto& p : state_.valid_curve) va.emplace_back(p.step, p.loss);
    write_file_atomic(run_file(opt_.out, "loss.svg"), loss_curve_svg(tr, va, "training loss (label-smoothed, 20-step means) and validation NLL"));
    if (grad_stats_) grad_stats_->write_svg();
  }

  void finish(bool stopped) {
    if (stopped) {
      if (saved_step_ != state_.step) checkpoint();  // mid-epoch: resume continues with the next batch of this epoch
      if (root_)
        fmt::print("{} at step {} (epoch {}, batch {}); checkpoint saved in {} ({})\n", interrupted() ? "interrupted" : "stopped by the budget",
                 state_.step, state_.epoch, state_.batch_in_epoch, opt_.out, state_.model_file);
    }
    if (root_ && !fs::exists(run_file(opt_.out, "best.safetensors")))
      save_weights(run_file(opt_.out, "best.safetensors"), net_->module().state_dict());
    if (root_) write_average();
    result_.steps = state_.step;
    result_.train_seconds = elapsed();
    const double call_seconds = now_seconds() - start_;
    result_.tokens_per_second = call_seconds > 0 ? static_cast<double>(tokens_this_call_) / call_seconds : 0;
    if (!root_) return;
    fmt::print("trained {} steps in {} ({:.0f} target tokens/s); run folder {}\n", state_.step, format_duration(result_.train_seconds),
               result_.tokens_per_second, opt_.out);
    if (buckets_ && call_step_seconds_ > 0)
      fmt::print("{} processes: allreduce {:.1f}% of step time ({:.1f} ms a step; {} bucket(s), {:.1f} MB of float32 gradients a step)\n",
                 world_.size, 100.0 * allreduce_seconds() / call_step_seconds_,
                 1e3 * allreduce_seconds() / static_cast<double>(std::max<size_t>(1, result_.step_losses.size())), buckets_->buckets(),
                 static_cast<double>(buckets_->bytes()) / 1e6);
  }

  // ---------------------------------------------------------------- the result
  // Sample translations and test scores with the best weights, as `gradflow eval` scores them.
  void report() {
    const Translator tr = Translator::load(opt_.out);
    const TestScore s = score_test_split(tr, data_.test, tr.default_decode_options(), 64, tr.bleu_tokenize(), false);
    result_.test_bleu = s.bleu.score;
    result_.test_exact = s.exact_share;
    fmt::print("\nsample translations ({}, greedy):\n", data_.test_name);
    for (int64_t i = 0; i < std::min<int64_t>(opt_.samples, static_cast<int64_t>(s.hypotheses.size())); ++i)
      fmt::print("  src: {}\n  ref: {}\n  out: {}\n\n", s.sources[i], s.references[i], s.hypotheses[i]);
    fmt::print("test ({} sentences, greedy, best checkpoint): BLEU {:.2f} ({}), exact match {:.1f}% ({}/{}), decoded in {:.1f}s\n",
               s.hypotheses.size(), s.bleu.score, s.bleu.signature, 100.0 * s.exact_share, s.exact, s.hypotheses.size(), s.decode_seconds);
    if (fs::exists(run_file(opt_.out, "average.safetensors"))) {
      const Translator avg = Translator::load(run_file(opt_.out, "average.safetensors"));
      const TestScore a = score_test_split(avg, data_.test, avg.default_decode_options(), 64, avg.bleu_tokenize(), false);
      fmt::print("test ({} sentences, greedy, average.safetensors): BLEU {:.2f}, exact match {:.1f}%\n", a.hypotheses.size(), a.bleu.score,
                 100.0 * a.exact_share);
    }
    std::fflush(stdout);
  }

  static constexpr int kCurveEvery = 20;  // steps averaged into one point of the training curve
  static constexpr int kMaxBadInARow = 10;  // --skip-nonfinite stops after this many bad batches in a row

  bool interrupted() const { return agreed_signal_ != 0; }  // set by agree_stop()

  const dist::World& world_ = dist::world();
  const bool root_ = world_.rank == 0;  // logs, validates the average, writes the run folder
  RunConfig config_;
  const TrainOptions& opt_;
  RunData data_;
  RunSegmenters segmenters_;  // whitespace, or the run's subword models
  Vocab src_vocab_, tgt_vocab_;
  std::vector<EncodedPair> train_pairs_, valid_pairs_;
  std::unique_ptr<BatchPlan> plan_, valid_plan_;  // hold indices into the pairs above
  std::unique_ptr<TranslationModel> net_;
  std::unique_ptr<optim::Adam> adam_;
  std::vector<Variable> params_;
  std::unique_ptr<GradStatsRecorder> grad_stats_;
  std::unique_ptr<dist::GradientBuckets> buckets_;  // with several processes
  int agreed_signal_ = 0;                           // SIGINT/SIGTERM that reached any process (agree_stop)
  double epoch_step_seconds_ = 0, call_step_seconds_ = 0, epoch_allreduce_start_ = 0;
  RunState state_;
  TrainResult result_;
  std::map<std::string, std::string> file_meta_;
  Progress progress_{stderr, config_.log_every};
  int64_t max_epochs_ = 1;
  double budget_seconds_ = INFINITY;
  double start_ = 0, seconds_before_ = 0, epoch_start_ = 0;
  int64_t tokens_this_call_ = 0, epoch_tokens_ = 0, recent_n_ = 0;
  double recent_loss_ = 0, curve_sum_ = 0;
  int curve_n_ = 0, saves_ = 0, bad_in_a_row_ = 0;
  int64_t saved_step_ = -1;
  bool poisoned_ = false;  // GRADFLOW_TEST_NAN_AT_STEP has fired  // the step of the last checkpoint written or resumed from
};

}  // namespace

TrainResult train_translator(const RunConfig& config_in, const TrainOptions& opt) {
  GF_CHECK(!opt.out.empty(), "train: --out DIR is required");
  RunConfig config = config_in;
  config.validate();
  return Run(config, opt).go();
}

}  // namespace gf::train

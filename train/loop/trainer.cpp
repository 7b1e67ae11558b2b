// A training run from start to end (train/loop/run.h): the run folder, data, vocabularies, model
// and optimizer, resume, the checks every process agrees on; then epochs of steps (step_loop.cpp),
// each ended by validation and a checkpoint; then the final checkpoint and report.
#include "train/loop/trainer.h"
#include "train/loop/step.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/kernels/bf16.h"
#include "tensor/parallel.h"
#include "train/eval/translator.h"
#include "train/distributed/replicas.h"
#include "train/eval/score.h"
#include "train/loop/early_stop.h"
#include "train/loop/interrupt.h"
#include "train/run/memory_estimate.h"
#include "train/loop/resume.h"
#include "train/loop/run.h"
#include "train/loop/test_seam.h"

namespace gf::train {
namespace fs = std::filesystem;
namespace dist = distributed;

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

namespace {

// config.json and the weight files record, beside the --precision asked for, the precision the
// products run in (kernels::precision(), which the command set from it). An explicit request the
// process does not run would make the record false: a caller's bug.
RunConfig with_resolved_precision(RunConfig c) {
  const char* running = precision_name(kernels::precision());
  GF_CHECK_AS(std::logic_error, c.precision == "auto" || c.precision == running,
              "train: the run config asks for --precision {} but the products run in {} (kernels::set_precision)", c.precision, running);
  c.resolved_precision = running;
  return c;
}

}  // namespace

Run::Run(const RunConfig& config, const TrainOptions& opt)
    : config_(with_resolved_precision(config)),
      opt_(opt),
      schedule_(config_.lr_schedule()),
      writer_(config_, opt.out, root_),
      nonfinite_(config_, opt.out, opt.skip_nonfinite),
      progress_(stderr, config_.log_every) {}

TrainResult Run::go() {
  std::optional<InterruptGuard> signals;
  if (opt_.handle_signals) signals.emplace();
  setup();
  if (root_) print_setup();
  clock_.start = now_seconds();
  clock_.seconds_before = state_.train_seconds;
  bool stopped = false;
  if (const EarlyStop e = early_stop(state_.valid_curve, config_.patience); e.stop) {  // resumed after it stopped early
    stopped_early_ = true;
    result_.stopped_early = e.reason(config_.patience);
    if (root_) fmt::print("the run has already stopped early: {}; nothing to train (a larger --patience, or 0, continues it)\n", result_.stopped_early);
  }
  while (!stopped && !stopped_early_ && !out_of_budget()) {
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

// ---------------------------------------------------------------- the start
// Every process reads the data and builds the same plan; rank 0 alone writes the run folder.
void Run::setup() {
  if (root_) prepare_run_folder();
  data_ = load_run_data(config_, true, opt_.max_line_bytes, opt_.builtin_corpus);
  GF_CHECK_AS(std::runtime_error, !data_.train.empty(), "train: the training split ({}) is empty{}", data_.train_name,
              data_.skipped_empty ? fmt::format(" ({} pairs with an empty side were skipped while reading)", data_.skipped_empty) : "");
  GF_CHECK_AS(std::runtime_error, !data_.valid.empty(), "train: the validation split ({}) is empty", data_.valid_name);
  setup_vocabularies();
  train_pairs_ = encode_pairs(segment_pairs(data_.train, segmenters_), src_vocab_, tgt_vocab_);
  valid_pairs_ = encode_pairs(segment_pairs(data_.valid, segmenters_), src_vocab_, tgt_vocab_);
  plan_ = std::make_unique<BatchPlan>(train_pairs_, config_.max_tokens, config_.max_len);
  // config_.max_tokens is the global batch's limit; validation batches are one process's share.
  valid_plan_ = std::make_unique<BatchPlan>(valid_pairs_, std::max<int64_t>(1, config_.max_tokens / world_.size), config_.max_len);
  agree_on_setup();  // before any weights are exchanged: every process built the same run
  build_model();
  if (opt_.resume) resume_everywhere();
  else state_.epoch = 1;
  dist::share_weights(params_);
  if (dist::several()) buckets_ = std::make_unique<dist::GradientBuckets>(params_, test_seam().bucket_bytes(dist::GradientBuckets::kDefaultBucketBytes));
  if (opt_.grad_stats > 0 && root_) grad_stats_ = std::make_unique<GradStatsRecorder>(*net_, opt_.out, opt_.grad_stats, opt_.resume ? state_.step : 0);
  clock_.max_epochs = config_.epochs > 0 ? config_.epochs : (config_.steps == 0 && config_.minutes <= 0 ? 1 : INT64_MAX);
  clock_.budget_seconds = config_.minutes > 0 ? config_.minutes * 60.0 : INFINITY;
}

// The folder is this run's alone (a lock), and one that cannot be written is refused now, not
// after the first epoch's training.
void Run::prepare_run_folder() {
  lock_ = RunFolderLock::take(opt_.out, opt_.resume ? "--resume" : "--out");
  const std::string probe = run_file(opt_.out, ".write-check");
  try {
    write_file_atomic(probe, "");
  } catch (const std::exception& e) {
    GF_FAIL_AS(std::runtime_error, "train: cannot write in the run folder '{}': {}", opt_.out, e.what());
  }
  std::error_code ec;
  fs::remove(probe, ec);
  if (const size_t n = remove_abandoned_temp_files(opt_.out))
    fmt::print(stderr, "train: removed {} temporary file(s) left in {} by a run killed while saving\n", n, opt_.out);
}

// Whitespace vocabularies are counted from the training split; subword models are learnt from
// it, and their pieces are the vocabularies. A resumed run reads back what the first one saved.
// As soon as the vocabularies' sizes are known, the model is estimated (memory_estimate.h): one
// too large for the memory is refused before it is built and before config.json is written.
void Run::setup_vocabularies() {
  auto load = [&] {
    RunVocabularies v = load_run_vocabularies(config_, opt_.out);
    segmenters_ = std::move(v.segmenters);
    src_vocab_ = std::move(v.src);
    tgt_vocab_ = std::move(v.tgt);
  };
  auto check_memory = [&] { check_training_memory(config_, src_vocab_.size(), tgt_vocab_.size(), world_.size, opt_.max_memory); };
  if (opt_.resume) {
    load();
    return check_memory();
  }
  if (config_.subwords > 0 && root_) {
    segmenters_ = train_run_subwords(config_, data_.train, opt_.out, max_threads());
    std::tie(src_vocab_, tgt_vocab_) = subword_vocabularies(segmenters_);
  } else if (config_.subwords == 0) {
    std::tie(src_vocab_, tgt_vocab_) = build_vocabularies(config_, data_.train);
  }
  if (root_ || config_.subwords == 0) check_memory();  // with subwords the others learn the sizes below
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
      load();
      check_memory();
    }
  }
}

// What every process built, compared with rank 0's before anything else is exchanged.
void Run::agree_on_setup() const {
  if (!dist::several()) return;
  const std::string config = config_.to_json();
  auto vocab = [](const Vocab& v) {
    uint64_t h = 0;
    for (const std::string& t : v.tokens()) h = dist::digest_bytes(t.data(), t.size(), h);
    return h;
  };
  auto pairs = [](const std::vector<EncodedPair>& ps) {
    uint64_t h = 0;
    for (const EncodedPair& p : ps)
      h = dist::digest_bytes(p.tgt.data(), p.tgt.size() * sizeof(int64_t), dist::digest_bytes(p.src.data(), p.src.size() * sizeof(int64_t), h));
    return h;
  };
  uint64_t plan = 0;
  for (size_t b = 0; b < plan_->size(); ++b)
    plan = dist::digest_bytes(plan_->batch_indices(b).data(), plan_->batch_indices(b).size() * sizeof(size_t), plan);
  dist::agree_on_setup(
      {{{"run config (config.json)", dist::digest_bytes(config.data(), config.size()), static_cast<int64_t>(config.size()), "bytes"},
        {"source vocabulary", vocab(src_vocab_), src_vocab_.size(), "tokens"},
        {"target vocabulary", vocab(tgt_vocab_), tgt_vocab_.size(), "tokens"},
        {"training pairs", pairs(train_pairs_), static_cast<int64_t>(train_pairs_.size()), "pairs"},
        {"validation pairs", pairs(valid_pairs_), static_cast<int64_t>(valid_pairs_.size()), "pairs"},
        {"batch plan", plan, static_cast<int64_t>(plan_->size()), "batches"}}});
}

void Run::build_model() {
  net_ = make_translation_model(config_, src_vocab_, tgt_vocab_, config_.seed);
  net_->module().train();
  adam_ = std::make_unique<optim::Adam>(net_->module().named_parameters(), adam_options(config_.lr, config_));
  params_ = net_->module().parameters();
}

// Rank 0 loads the checkpoint (resume.h's fallback); the others take its run state and optimizer
// state, so every process continues from the same one.
void Run::resume_everywhere() {
  if (root_) {
    state_ = resume_checkpoint(opt_.out, net_->module(), *adam_);
    check_best_weights(opt_.out, state_);
  }
  if (dist::several()) {
    std::string state = root_ ? state_to_json(state_) : "";
    dist::broadcast(state);
    if (!root_) state_ = state_from_json(state, "rank 0's run state");
    dist::share_optimizer_state(*adam_);
  }
  writer_.resumed_at(state_);
}

void Run::print_setup() const {
  std::FILE* log = stdout;
  fmt::print(log, "data: {}\n", config_.data_description());
  size_t short_batches = 0;  // global batches with fewer rows than processes: the last processes get none
  for (size_t b = 0; b < plan_->size(); ++b) short_batches += plan_->batch_indices(b).size() < static_cast<size_t>(world_.size);
  fmt::print(log, "  train {} pairs ({} batches of <= {} tokens{}; {} skipped over --max-len {}), valid {}, test {}{}\n", plan_->pairs_used(),
             plan_->size(), config_.max_tokens,
             dist::several() ? fmt::format(", each split over {} processes (train/distributed/batch_split.h){}", world_.size,
                                           short_batches ? fmt::format("; {} of them have fewer rows than processes", short_batches) : "")
                             : "",
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
  if (config_.patience > 0) budget += fmt::format(", or {} epochs without a better validation loss", config_.patience);
  const std::string schedule = config_.schedule == "wsd" ? fmt::format(" schedule wsd (decay over the last {:g}% of the {})", 100 * config_.decay_fraction,
                                                                      config_.minutes > 0 ? "time" : config_.steps > 0 ? "steps" : "epochs")
                                                         : "";
  fmt::print(log, "train: lr {} warmup {}{} label smoothing {} clip {}, budget:{}{}\n", config_.lr, config_.warmup, schedule, config_.label_smoothing,
             config_.clip, budget.empty() || budget[0] == ',' ? " 1 epoch" + budget : budget,
             opt_.resume ? fmt::format(" (resuming at step {}, epoch {})", state_.step, state_.epoch) : "");
  std::fflush(log);
}

// ---------------------------------------------------------------- the end of an epoch
void Run::end_epoch() {
  progress_.clear();
  test_seam().before_replica_check(state_.epoch, params_);
  if (const std::vector<int> differ = dist::check_replicas(params_, *adam_); !differ.empty() && root_)
    fmt::print(stderr, "warning: the processes' weights or optimizer state differ after step {} (rank {} from rank 0's); rank 0's were sent to all\n",
               state_.step, fmt::join(differ, ", rank "));
  const double valid = validation_loss();
  result_.valid_loss = valid;
  state_.valid_curve.push_back({static_cast<double>(state_.step), valid});
  const bool best = valid < state_.best_valid_loss;
  if (best) {
    state_.best_valid_loss = valid;
    writer_.best(net_->module(), state_.step);
  }
  const double dt = now_seconds() - clock_.epoch_start;
  if (root_) {
    fmt::print("epoch {} done: step {}, valid loss {:.4f} (ppl {:.2f}){}, {:.0f} tgt tok/s{}, {} elapsed\n", state_.epoch, state_.step, valid,
               std::exp(valid), best ? " best" : "", dt > 0 ? static_cast<double>(tally_.epoch_tokens) / dt : 0.0,
               allreduce_share(allreduce_seconds() - tally_.epoch_allreduce_start, tally_.epoch_step_seconds), format_duration(elapsed()));
    std::fflush(stdout);
  }
  state_.epoch += 1;
  state_.batch_in_epoch = 0;
  result_.epochs_done += 1;
  state_.train_seconds = elapsed();
  writer_.checkpoint(state_, net_->module(), *adam_, grad_stats_.get());
  writer_.keep_epoch(state_.epoch - 1, net_->module(), state_.step);
  dist::quiet_barrier();  // the others wait for rank 0's files without taking its cores
  if (const EarlyStop e = early_stop(state_.valid_curve, config_.patience); e.stop) {
    stopped_early_ = true;
    result_.stopped_early = e.reason(config_.patience);
    if (root_) {
      fmt::print("stopped early after epoch {} (step {}): {}; the best weights are best.safetensors\n", state_.epoch - 1, state_.step,
                 result_.stopped_early);
      std::fflush(stdout);
    }
  }
}

// Validation NLL per target token; with several processes each scores every N-th batch.
double Run::validation_loss() {
  const LossSum s = evaluate_loss_sum(*net_, *valid_plan_, static_cast<size_t>(world_.rank), static_cast<size_t>(world_.size));
  double sums[2] = {s.total, static_cast<double>(s.tokens)};
  dist::agree(dist::Agreement::Validation, dist::Combine::Sum, sums);
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}

// ", allreduce 12.5% of step time" with several processes: the gradient buckets' reduction,
// waiting for the slowest process included.
std::string Run::allreduce_share(double allreduce, double steps) const {
  if (!buckets_ || steps <= 0) return "";
  return fmt::format(", allreduce {:.1f}% of step time", 100.0 * allreduce / steps);
}

// ---------------------------------------------------------------- the end of the run
void Run::finish(bool stopped) {
  if (stopped) {
    if (!writer_.saved(state_.step)) {  // mid-epoch: resume continues with the next batch of this epoch
      state_.train_seconds = elapsed();
      writer_.checkpoint(state_, net_->module(), *adam_, grad_stats_.get());
    }
    if (root_)
      fmt::print("{} at step {} (epoch {}, batch {}); checkpoint saved in {} ({})\n", interrupted() ? "interrupted" : "stopped by the budget",
                 state_.step, state_.epoch, state_.batch_in_epoch, opt_.out, state_.model_file);
  }
  writer_.best_if_missing(net_->module(), state_.step);
  write_average();
  result_.steps = state_.step;
  result_.train_seconds = elapsed();
  const double call_seconds = now_seconds() - clock_.start;
  result_.tokens_per_second = call_seconds > 0 ? static_cast<double>(tally_.tokens_this_call) / call_seconds : 0;
  if (!root_) return;
  fmt::print("trained {} steps in {} ({:.0f} target tokens/s); run folder {}\n", state_.step, format_duration(result_.train_seconds),
             result_.tokens_per_second, opt_.out);
  if (buckets_ && tally_.call_step_seconds > 0)
    fmt::print("{} processes: allreduce {:.1f}% of step time ({:.1f} ms a step; {} bucket(s), {:.1f} MB of float32 gradients a step)\n",
               world_.size, 100.0 * allreduce_seconds() / tally_.call_step_seconds,
               1e3 * allreduce_seconds() / static_cast<double>(std::max<size_t>(1, result_.step_losses.size())), buckets_->buckets(),
               static_cast<double>(buckets_->bytes()) / 1e6);
}

// average.safetensors (with --average-last), with its validation loss.
void Run::write_average() {
  const std::optional<RunWriter::Average> a = writer_.average();
  if (!a) return;
  std::unique_ptr<TranslationModel> avg = make_translation_model(config_, src_vocab_, tgt_vocab_, config_.seed);
  avg->module().load_state_dict(a->mean.tensors, true);
  avg->module().eval();
  const double valid = evaluate_loss(*avg, *valid_plan_);
  fmt::print("average.safetensors: mean of the last {} epochs' weights ({} .. {}), valid loss {:.4f} (best epoch's {:.4f})\n", a->files.size(),
             fs::path(a->files.front()).filename().string(), fs::path(a->files.back()).filename().string(), valid, state_.best_valid_loss);
}

// Sample translations and test scores with the best weights, as `gradflow eval` scores them.
void Run::report() {
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

TrainResult train_translator(const RunConfig& config_in, const TrainOptions& opt) {
  GF_CHECK(!opt.out.empty(), "train: --out DIR is required");
  RunConfig config = config_in;
  config.validate();
  return Run(config, opt).go();
}

}  // namespace gf::train

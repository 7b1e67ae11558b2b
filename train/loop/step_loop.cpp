// The step loop of a training run (train/loop/run.h): each step's vote on stopping, its share of
// the global batch, forward and backward, the gradient sum across processes, the NaN test and the
// update, then the logs.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "optim/adam.h"
#include "tensor/kernels/random.h"
#include "train/distributed/batch_split.h"
#include "train/run/batch_loss.h"
#include "train/loop/interrupt.h"
#include "tensor/mix64.h"
#include "train/loop/run.h"
#include "train/loop/step.h"
#include "train/loop/test_seam.h"

namespace gf::train {
namespace dist = distributed;
namespace {

// A well-mixed 64-bit seed for (run seed, step, process): dropout masks depend only on these. Rank
// 0's is the one-process run's, so one process trains as it always did.
uint64_t step_seed(uint64_t seed, int64_t step, int rank) {
  const uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 0x632BE59BD9B4E019ULL);
  return rank == 0 ? z : mix64(z + static_cast<uint64_t>(rank) * 0xD1B54A32D192ED03ULL);
}

}  // namespace

// Whether to stop before the next step, decided by every process together: the step budget (the
// same everywhere), the time budget on any process's clock, and a signal that reached any process.
// The share of the time budget spent (--schedule wsd's clock) is agreed in the same vote.
// Every process calls this at the same points.
Run::StopVote Run::agree_stop() {
  const double spent = elapsed();
  double votes[3] = {spent >= clock_.budget_seconds ? 1.0 : 0.0, opt_.handle_signals ? static_cast<double>(interrupt_signal()) : 0.0,
                     std::isfinite(clock_.budget_seconds) ? spent / clock_.budget_seconds : 0.0};
  dist::agree(dist::Agreement::StopVote, dist::Combine::Max, votes);
  if (votes[1] != 0) agreed_signal_ = static_cast<int>(votes[1]);
  clock_.time_fraction = votes[2];  // the slowest clock's: every process sets the same learning rate
  return {(config_.steps > 0 && state_.step >= config_.steps) || votes[0] != 0, agreed_signal_};
}

// The share of the run's budget spent before the next step, for --schedule wsd: the largest of the
// time (--minutes, agreed at the last stop vote), the steps (--steps) and the batches (--epochs,
// or the one epoch of a run with no budget) spent, as the first budget to run out ends the run.
double Run::budget_progress() const {
  double p = clock_.time_fraction;
  if (config_.steps > 0) p = std::max(p, static_cast<double>(state_.step) / static_cast<double>(config_.steps));
  if (clock_.max_epochs != INT64_MAX && plan_->size() > 0) {
    const double batches = static_cast<double>(plan_->size());
    p = std::max(p, (static_cast<double>(state_.epoch - 1) * batches + static_cast<double>(state_.batch_in_epoch)) /
                        (static_cast<double>(clock_.max_epochs) * batches));
  }
  return p;
}

// Runs the rest of the current epoch; true when the budget or a signal stopped it midway.
bool Run::run_epoch() {
  const std::vector<size_t> order = plan_->epoch_order(config_.seed, static_cast<uint64_t>(state_.epoch));
  clock_.epoch_start = now_seconds();
  tally_.epoch_tokens = 0;
  tally_.epoch_step_seconds = 0;
  tally_.epoch_allreduce_start = allreduce_seconds();
  const size_t first = static_cast<size_t>(state_.batch_in_epoch);  // > 0 after a mid-epoch resume
  for (size_t bi = first; bi < order.size(); ++bi) {
    if (const StopVote v = agree_stop(); v.budget_spent || v.signal) return true;
    const Batch batch = plan_->batch(order[bi]);
    const double t0 = now_seconds();
    const StepResult r = step(batch, bi, order.size());
    tally_.epoch_step_seconds += now_seconds() - t0;
    tally_.call_step_seconds += now_seconds() - t0;
    state_.batch_in_epoch = static_cast<int64_t>(bi) + 1;
    if (!std::isfinite(r.loss)) continue;  // a skipped step: nothing to record or show
    record(r.loss, batch);
    if (!opt_.quiet && root_) show_progress(bi, first, order.size(), r.grad_norm);
  }
  return false;
}

// One optimizer step on a (global) batch (train/loop/step.h); returns its loss (NaN for a skipped
// step) and gradient norm. Dropout masks depend only on (seed, step, process). A loss or gradient
// that is NaN or Inf never reaches the weights (non_finite_step); with several processes the loss and
// norm tested are the summed ones, which every process holds alike, so all of them skip or stop
// together. The last step's gradients are dropped before the forward, not after it: they are not held
// beside this step's activations, which lowers the step's peak memory by a model's worth.
Run::StepResult Run::step(const Batch& batch, size_t bi, size_t batches) {
  test_seam().before_step(state_.step + 1);
  poison_step_ = test_seam().nan_loss(state_.step + 1);
  const Batch mine = dist::batch_part(train_pairs_, batch, world_.rank, world_.size);  // the batch itself with one process
  default_generator().seed(step_seed(config_.seed, state_.step, world_.rank));
  if (grad_stats_) grad_stats_->begin_step(state_.step + 1, mine);
  const double lr = schedule_.lr(config_.lr, state_.step, schedule_.uses_progress() ? budget_progress() : 0.0);
  StepHooks hooks;
  hooks.reduce = [&](double& loss) {  // with several processes: the gradients (in buckets) and the loss summed over all of them
    if (!buckets_) return;
    buckets_->allreduce();
    dist::agree(dist::Agreement::StepLoss, dist::Combine::Sum, std::span<double>(&loss, 1));
  };
  hooks.observe = [&](double, double) {
    if (grad_stats_) grad_stats_->after_backward();
  };
  const auto forward = [&] { return mine.rows > 0 ? forward_loss(mine, batch.tgt_tokens) : Variable(); };  // an empty part adds nothing
  const train::StepResult r = train_step(*adam_, params_, forward, config_.clip, lr, hooks);
  if (!r.updated) return {non_finite_step(mine, batch.tgt_tokens, r.loss, r.grad_norm, bi, batches), r.grad_norm};
  nonfinite_.good_step();
  if (grad_stats_) grad_stats_->after_update(r.loss, adam_->lr());
  state_.step += 1;
  return {r.loss, r.grad_norm};
}

// The model's loss is a mean over the part's target tokens. With several processes it is weighted
// by the part's share of the global batch's tokens, so that the sum over the processes, of the
// losses and of their gradients, is the global batch's mean: the one-process run's.
Variable Run::forward_loss(const Batch& part, int64_t global_tokens) {
  Variable loss = net_->loss(part, config_.label_smoothing);
  if (dist::several()) loss = loss * (static_cast<double>(part.tgt_tokens) / static_cast<double>(global_tokens));
  return poison_step_ ? loss * std::numeric_limits<double>::quiet_NaN() : loss;  // an op of the graph makes the NaN
}

// The step's loss or gradient norm is NaN/Inf. The weights are left as they were; the batch is
// re-run in anomaly mode to name the first op that made a NaN; nonfinite_ decides: stop or skip.
double Run::non_finite_step(const Batch& mine, int64_t global_tokens, double loss, double norm, size_t bi, size_t batches) {
  std::string anomaly = first_bad_op(mine, global_tokens);
  if (dist::several()) {  // rank 0 gets each process's report, naming its rank
    const std::vector<std::string> reports = dist::gather(anomaly);
    anomaly.clear();
    for (size_t r = 0; r < reports.size(); ++r)
      if (!reports[r].empty()) anomaly += fmt::format("{}rank {}: {}", anomaly.empty() ? "" : "; ", r, reports[r]);
  }
  adam_->zero_grad();
  if (grad_stats_) {  // the diverging step's picture is the one wanted
    grad_stats_->after_update(loss, adam_->lr());
    grad_stats_->write_svg();
  }
  progress_.clear();
  const std::string what = fmt::format("step {} (epoch {}, batch {} of {}) gave loss {} and gradient norm {}", state_.step + 1, state_.epoch,
                                       bi + 1, batches, loss, norm);
  nonfinite_.bad_step(what, anomaly, state_, writer_.saved_step(), root_);
  return NAN;
}

// Re-runs this process's part with the same dropout masks in anomaly mode; returns its report, or "".
std::string Run::first_bad_op(const Batch& mine, int64_t global_tokens) {
  if (mine.rows == 0) return "";
  default_generator().seed(step_seed(config_.seed, state_.step, world_.rank));
  AnomalyGuard anomaly;
  try {
    Variable loss = forward_loss(mine, global_tokens);
    adam_->zero_grad();
    loss.backward();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The loss into the result, the recent average and the 20-step training curve.
void Run::record(double loss, const Batch& batch) {
  result_.step_losses.emplace_back(state_.step, loss);
  tally_.tokens_this_call += batch.tgt_tokens;
  tally_.epoch_tokens += batch.tgt_tokens;
  tally_.recent_loss += loss, tally_.recent_n += 1;
  tally_.curve_sum += loss;
  if (++tally_.curve_n == kCurveEvery) {
    state_.train_curve.push_back({static_cast<double>(state_.step), tally_.curve_sum / kCurveEvery});
    state_.lr_curve.push_back({static_cast<double>(state_.step), adam_->lr()});
    tally_.curve_sum = 0, tally_.curve_n = 0;
  }
}

void Run::show_progress(size_t bi, size_t first, size_t batches, double grad_norm) {
  const double dt = now_seconds() - clock_.epoch_start;
  ProgressInfo p{.epoch = state_.epoch, .step = state_.step, .batch = static_cast<int64_t>(bi) + 1, .batches = static_cast<int64_t>(batches),
                 .loss = tally_.recent_loss / static_cast<double>(tally_.recent_n), .grad_norm = grad_norm,
                 .tokens_per_s = dt > 0 ? static_cast<double>(tally_.epoch_tokens) / dt : 0, .lr = adam_->lr()};
  EtaInput e{.epoch_seconds = dt, .steps_timed = static_cast<int64_t>(bi + 1 - first)};  // the steps of this epoch run in this call
  if (config_.minutes > 0) e.seconds_left_by_time = std::max(0.0, clock_.budget_seconds - elapsed());
  if (config_.steps > 0) e.steps_left_by_steps = config_.steps - state_.step;
  if (clock_.max_epochs != INT64_MAX)
    e.steps_left_by_epochs = (clock_.max_epochs - state_.epoch) * static_cast<int64_t>(batches) + static_cast<int64_t>(batches - bi - 1);
  p.eta_seconds = estimate_eta(e);
  progress_.update(p);
  if (state_.step % config_.log_every == 0) tally_.recent_loss = 0, tally_.recent_n = 0;
}

}  // namespace gf::train

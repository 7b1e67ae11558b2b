#include "train/loop/run_writer.h"

#include <filesystem>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/kernels/reduce.h"
#include "train/eval/translator.h"
#include "train/loop/average.h"
#include "train/loop/test_seam.h"
#include "train/plot/svg_plot.h"

namespace gf::train {
namespace fs = std::filesystem;

RunWriter::RunWriter(const RunConfig& config, std::string dir, bool writes)
    : config_(config), dir_(std::move(dir)), writes_(writes), file_meta_{{"format", kGradflowFormat}, {"config", config.to_json()}} {}

void RunWriter::check_finite(const std::map<std::string, Tensor>& tensors, const std::string& what, int64_t step) const {
  for (const auto& [name, t] : tensors) {
    const int64_t i = kernels::first_nonfinite(t, true);
    GF_CHECK_AS(std::runtime_error, i < 0,
                "train: not writing {}: {} holds a NaN or Inf (element {}) after step {}; an update overflowed: lower --lr (now {}) or set "
                "--clip. Files already in {} are untouched.",
                what, name, i, step, config_.lr, dir_);
  }
}

void RunWriter::save_weights(const std::string& file, const std::map<std::string, Tensor>& weights, int64_t step) const {
  check_finite(weights, file, step);
  save_safetensors(file, weights, file_meta_);
}

void RunWriter::checkpoint(RunState& state, const nn::Module& model, const optim::Adam& adam, const GradStatsRecorder* grad_stats) {
  if (!writes_) {
    saved_step_ = state.step;
    return;
  }
  // A test may kill the process here: after the epoch's best.safetensors, before its checkpoint files.
  test_seam().before_save(++saves_);
  const std::map<std::string, Tensor> weights = model.state_dict(), optimizer = adam.state_dict();
  check_finite(weights, "a checkpoint", state.step);
  check_finite(optimizer, "a checkpoint", state.step);
  save_checkpoint(dir_, state, weights, optimizer, file_meta_, last_good_ ? &*last_good_ : nullptr);
  saved_step_ = state.step;
  last_good_ = state;
  std::vector<std::pair<double, double>> tr, va;
  for (const CurvePoint& p : state.train_curve) tr.emplace_back(p.step, p.loss);
  for (const CurvePoint& p : state.valid_curve) va.emplace_back(p.step, p.loss);
  write_file_atomic(run_file(dir_, "loss.svg"), loss_curve_svg(tr, va, "training loss (label-smoothed, 20-step means) and validation NLL"));
  if (grad_stats) grad_stats->write_svg();
}

void RunWriter::best(const nn::Module& model, int64_t step) {
  if (writes_) save_weights(run_file(dir_, "best.safetensors"), model.state_dict(), step);
}

void RunWriter::best_if_missing(const nn::Module& model, int64_t step) {
  if (writes_ && !fs::exists(run_file(dir_, "best.safetensors"))) best(model, step);
}

void RunWriter::keep_epoch(int64_t epoch, const nn::Module& model, int64_t step) {
  if (!writes_ || config_.average_last < 2) return;
  save_weights(epoch_weight_file(dir_, epoch), model.state_dict(), step);
  const std::vector<std::string> kept = epoch_weight_files(dir_);
  std::error_code ec;
  for (size_t i = 0; i + static_cast<size_t>(config_.average_last) < kept.size(); ++i)
    if (own_weights_file(kept[i])) fs::remove(kept[i], ec);  // never another program's file of that name
}

std::optional<RunWriter::Average> RunWriter::average() {
  if (!writes_ || config_.average_last < 2) return std::nullopt;
  Average a;
  a.files = epoch_weight_files(dir_, static_cast<size_t>(config_.average_last));
  if (a.files.size() < 2) return std::nullopt;
  a.mean = average_weights(a.files);
  save_safetensors(run_file(dir_, "average.safetensors"), a.mean.tensors, file_meta_);
  return a;
}

}  // namespace gf::train

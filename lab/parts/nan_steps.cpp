// The measurements behind lab `nan` (lab/labs/nan.cpp): one batch with a fully masked row, and a
// few plain Adam steps over batches with one.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lab/nan.h"
#include "train/loop/step.h"
#include "nn/masks.h"
#include "optim/adam.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

void set_naive_softmax(const nn::Seq2SeqTransformer& model, bool naive) {
  for (auto* a : attention_modules(model)) a->naive_softmax = naive;
}

std::vector<int64_t> fully_masked_rows(const train::Batch& b) {
  Tensor blocked = nn::make_pad_mask(Tensor::from_vector(b.src, {b.rows, b.src_len}), train::Vocab::kPad);  // (B, S)
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < b.rows; ++r) {
    bool all = true;
    for (int64_t s = 0; s < b.src_len; ++s) all = all && blocked.flat_get(r * b.src_len + s) != 0;
    if (all) rows.push_back(r);
  }
  return rows;
}

int64_t element_row(const std::string& report, const train::Batch& b) {
  const size_t at = report.find("at element "), shape = report.find("of its output (");
  if (at == std::string::npos || shape == std::string::npos) return -1;
  const int64_t element = std::stoll(report.substr(at + 11));
  int64_t per_row = 1;  // product of the output's dims after the first
  std::string dims = report.substr(shape + 15);
  dims = dims.substr(0, dims.find(')'));
  size_t comma = dims.find(',');
  if (std::stoll(dims.substr(0, comma)) != b.rows) return -1;
  while (comma != std::string::npos) {
    dims = dims.substr(comma + 1);
    comma = dims.find(',');
    per_row *= std::stoll(dims.substr(0, comma));
  }
  return element / per_row;
}

OneStep one_step(nn::Seq2SeqTransformer& model, const train::Batch& b, int64_t empty_row) {
  OneStep o;
  nn::MultiheadAttention* first = attention_modules(model).front();  // encoder layer 0 self-attention
  Tensor w0;                                                          // (B, H, S, S)
  first->weights_observer = [&w0](const Variable& w) { w0 = w.data(); };
  train::BatchTensors t = train::to_tensors(b);
  Variable logits = model.forward(t.src, t.tgt_in);  // (B, T, V)
  first->weights_observer = nullptr;
  Variable loss = train::batch_loss(model, t, 0.0);  // () the same forward again, as the trainer computes it
  model.zero_grad();
  loss.backward();
  o.loss = loss.item();
  for (const auto& [name, p] : model.named_parameters()) {
    o.nan_grads.push_back({name, count_nonfinite(p.grad())});
    o.sizes.push_back(p.numel());
  }
  const Tensor lg = logits.data();  // (B, T, V)
  for (int64_t r = 0; r < lg.size(0); ++r) o.nan_logit_rows += count_nonfinite(lg.select(0, r)) > 0;
  const Tensor er = w0.select(0, empty_row);  // (H, S, S)
  o.empty_row_weights_nan = count_nonfinite(er);
  o.empty_row_weights_max = max_abs(er);
  const int64_t S = w0.size(3);
  const Tensor wc = w0.contiguous();  // (B, H, S, S)
  for (int64_t i = 0; i < wc.numel() / S; ++i) {
    if (i / (w0.size(1) * w0.size(2)) == empty_row) continue;
    double sum = 0;
    for (int64_t s = 0; s < S; ++s) sum += wc.flat_get(i * S + s);
    // A real query row of a padded sentence sums to 1; a PAD query row of another sentence too.
    o.other_rows_weight_sum_err = std::max(o.other_rows_weight_sum_err, std::abs(sum - 1));
  }
  model.zero_grad();
  return o;
}

bool NanRun::finite() const {
  return nan_params == 0 && std::all_of(losses.begin(), losses.end(), [](double l) { return std::isfinite(l); });
}

NanRun train_steps(const nn::Seq2SeqOptions& shape, const std::vector<train::EncodedPair>& pairs, const std::vector<std::vector<size_t>>& steps,
                   uint64_t seed, bool naive, bool drop_masked_rows, double lr) {
  nn::Seq2SeqTransformer model(shape, seed);
  set_naive_softmax(model, naive);
  optim::Adam adam = train::make_adam(model.named_parameters(), lr);
  const std::vector<Variable> params = model.parameters();
  train::StepHooks hooks;
  hooks.accept = [](double, double) { return true; };  // no step is skipped: the lab follows the NaN into the weights
  NanRun run;
  for (const auto& rows : steps) {
    train::Batch b = train::collate(pairs, rows);
    if (drop_masked_rows) {
      const std::vector<int64_t> bad = fully_masked_rows(b);
      std::vector<size_t> keep;
      for (int64_t row = 0; row < b.rows; ++row)
        if (std::find(bad.begin(), bad.end(), row) == bad.end()) keep.push_back(rows[static_cast<size_t>(row)]);
      b = train::collate(pairs, keep);
    }
    const train::BatchTensors t = train::to_tensors(b);
    run.losses.push_back(train::train_step(adam, params, [&] { return train::batch_loss(model, t, 0.0); }, 0, lr, hooks).loss);
  }
  for (const auto& p : model.parameters()) run.nan_params += count_nonfinite(p.data());
  return run;
}

std::vector<std::vector<size_t>> step_batches(size_t n_train, int64_t steps, int64_t rows, uint64_t seed) {
  std::vector<size_t> order(n_train);
  std::iota(order.begin(), order.end(), 0);
  train::seeded_shuffle(order, seed);
  std::vector<std::vector<size_t>> out;
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<size_t> b;
    for (int64_t j = 0; j < rows; ++j) b.push_back(order[static_cast<size_t>((k * rows + j)) % n_train]);
    if (k == 1) b.back() = n_train;  // the empty source
    out.push_back(b);
  }
  return out;
}

}  // namespace gf::lab

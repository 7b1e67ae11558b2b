// lab/common.h's evaluation of a trained translator: greedy decoding recomputed from scratch,
// free-running and teacher-forced accuracy.
#include "lab/common.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "optim/adam.h"
#include "optim/schedule.h"
#include "train/loop/step.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"
#include "korean/corpus_ko.h"
#include "train/data/utf8.h"

namespace gf::lab {

// ---------------------------------------------------------------- evaluation

std::vector<std::vector<int64_t>> greedy_recompute(const nn::Seq2SeqTransformer& model, const train::Batch& batch, int64_t max_len) {
  NoGradGuard ng;
  const int64_t B = batch.rows;
  Tensor src = Tensor::from_vector(batch.src, {B, batch.src_len});  // (B, S)
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  std::vector<int64_t> prefix(static_cast<size_t>(B), train::Vocab::kBos);  // (B, t) row-major
  for (int64_t t = 1; t <= max_len; ++t) {
    Tensor tgt = Tensor::from_vector(prefix, {B, t});       // (B, t)
    Tensor logits = model.forward(src, tgt).data();         // (B, t, V)
    const int64_t V = logits.size(2);
    Tensor last = logits.narrow(1, t - 1, 1).to(DType::Float64).contiguous();  // (B, 1, V)
    std::vector<int64_t> next(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      const double* row = last.data<double>() + b * V;
      const int64_t best = std::max_element(row, row + V) - row;
      next[b] = done[b] ? train::Vocab::kPad : best;
      if (!done[b]) {
        if (best == train::Vocab::kEos) done[b] = true;
        else out[b].push_back(best);
      }
    }
    std::vector<int64_t> grown;
    for (int64_t b = 0; b < B; ++b) {
      grown.insert(grown.end(), prefix.begin() + b * t, prefix.begin() + (b + 1) * t);
      grown.push_back(next[b]);
    }
    prefix = std::move(grown);
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return out;
}

Accuracy free_running_accuracy(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t limit) {
  const size_t n = limit ? std::min(limit, pairs.size()) : pairs.size();
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  Accuracy a;
  int64_t right = 0, total = 0, exact = 0;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part(idx.begin() + start, idx.begin() + std::min(n, start + 64));
    train::Batch b = train::collate(pairs, part);
    auto hyps = greedy_recompute(model, b, b.tgt_len + 5);
    for (size_t i = 0; i < part.size(); ++i) {
      const auto& ref = pairs[part[i]].tgt;
      exact += hyps[i] == ref;
      for (size_t k = 0; k < ref.size(); ++k) right += k < hyps[i].size() && hyps[i][k] == ref[k];
      total += static_cast<int64_t>(ref.size());
    }
  }
  a.exact = n ? static_cast<double>(exact) / static_cast<double>(n) : 0;
  a.tokens = total ? static_cast<double>(right) / static_cast<double>(total) : 0;
  return a;
}

TeacherForced teacher_forced(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t limit) {
  NoGradGuard ng;
  const size_t n = limit ? std::min(limit, pairs.size()) : pairs.size();
  TeacherForced r;
  double nll = 0;
  int64_t right = 0, total = 0;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    train::BatchTensors t = train::to_tensors(train::collate(pairs, part));
    Tensor logits = model.forward(t.src, t.tgt_in).data();  // (B, T, V)
    const int64_t V = logits.size(2);
    Tensor flat = logits.reshape({-1, V}).to(DType::Float64).contiguous();  // (B*T, V)
    const std::vector<int64_t> labels = t.labels.to_vector<int64_t>();        // (B*T)
    for (int64_t i = 0; i < flat.size(0); ++i) {
      const int64_t y = labels[static_cast<size_t>(i)];
      if (y == train::Vocab::kPad) continue;
      const double* row = flat.data<double>() + i * V;
      const int64_t arg = std::max_element(row, row + V) - row;
      nll += -log_softmax_at(row, V, y);
      right += arg == y;
      ++total;
    }
  }
  r.accuracy = total ? static_cast<double>(right) / static_cast<double>(total) : 0;
  r.nll = total ? nll / static_cast<double>(total) : 0;
  return r;
}

}  // namespace gf::lab

#pragma once
// The measurements behind lab `nan` (lab/labs/nan.cpp), public so that tests can check them: one
// batch with a fully masked row (an empty source) through a model whose softmax is naive or
// guarded, and a few plain Adam steps over batches with such a row.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lab/common.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::lab {

// Every attention module's softmax: naive (exp(s - max) / sum, written from ops) or gradflow's
// guarded one (a fully masked row gets zeros).
void set_naive_softmax(const nn::Seq2SeqTransformer& model, bool naive);

// Rows of a batch whose every source key is PAD: their encoder self-attention and cross-attention
// rows are fully masked. This is the check the course recommends.
std::vector<int64_t> fully_masked_rows(const train::Batch& b);

// Anomaly mode's report ends "... at element N of its output (B, ...)": the batch row of element N
// (-1 when the report does not have that form).
int64_t element_row(const std::string& report, const train::Batch& b);

// One forward and backward of a batch, tensor by tensor. The model's gradients are cleared after.
struct OneStep {
  double loss = 0;
  std::vector<std::pair<std::string, int64_t>> nan_grads;  // per parameter name: NaN entries of its gradient
  std::vector<int64_t> sizes;                              // entries of each parameter
  int64_t nan_logit_rows = 0;                              // batch rows with a NaN logit
  int64_t empty_row_weights_nan = 0;                       // NaN entries in the empty row's first encoder attention map
  double empty_row_weights_max = 0;                        // largest weight there (guarded: 0)
  double other_rows_weight_sum_err = 0;                    // other rows: largest |sum of a weight row - 1|
};
OneStep one_step(nn::Seq2SeqTransformer& model, const train::Batch& b, int64_t empty_row);

// The batches of a run: `steps` batches of `rows` random training pairs (of n_train, drawn by the
// seed); step 2's last row is the pair with the empty source (index n_train).
std::vector<std::vector<size_t>> step_batches(size_t n_train, int64_t steps, int64_t rows, uint64_t seed);

// A fresh model of `shape` drawn from `seed`, Adam (0.9, 0.98, eps 1e-9) on the given batches of
// `pairs`, one step each, updating whatever the gradient is (as a plain loop does: no skipping of
// non-finite steps). drop_masked_rows: the fix, rows whose every source key is PAD are found from
// the mask and left out.
struct NanRun {
  std::vector<double> losses;
  int64_t nan_params = 0;  // parameter entries that are NaN after the last step
  bool finite() const;
};
NanRun train_steps(const nn::Seq2SeqOptions& shape, const std::vector<train::EncodedPair>& pairs, const std::vector<std::vector<size_t>>& steps,
                   uint64_t seed, bool naive, bool drop_masked_rows, double lr);

}  // namespace gf::lab

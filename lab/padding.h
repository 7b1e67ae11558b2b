#pragma once
// The measurements behind lab `padding` (lab/labs/padding.cpp), public so that tests can check them.
// Each runs the model with the padding masks as model.masks says.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lab/common.h"
#include "lab/experiment.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::lab {

// ---- 1. a sentence alone against in a batch

// The largest |a - b| over the leading block of row 0 that `alone` (a batch of one) covers, and the
// same relative to max |alone|.
struct Diff {
  double abs = 0, rel = 0;
};
Diff diff_row0(const Tensor& alone, const Tensor& batch);
Diff worst(const Diff& a, const Diff& b);

// Pair batch_rows[0] alone against as row 0 of the batch of batch_rows: its encoder output, logits,
// every attention map (real queries and keys) and every parameter's gradient of its loss (the other
// rows' labels ignored), relative differences.
struct Comparison {
  Diff memory, logits, weights, grads;
  double pad_weight = 0;  // largest attention weight row 0's real queries give to PAD keys, in the batch
};
Comparison compare_alone_batch(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, const std::vector<size_t>& batch_rows);

// ---- 2. the gradient at PAD positions

// The gradient of a batch's loss (every row) at the encoder's and the decoder's input.
struct PadGradient {
  double src_pad = 0, src_real = 0;  // largest |d loss / d encoder input| at PAD and at real source positions
  double tgt_pad = 0, tgt_real = 0;  // the same for the decoder input
  std::vector<std::vector<double>> src_map;  // (B, S): |d loss / d encoder input| per source position
};
PadGradient pad_gradient(nn::Seq2SeqTransformer& model, const train::Batch& b);

// ---- 3. PAD labels without ignore_index

// A random split with the same token budget as train::bucket_by_length: shuffle, then cut greedily
// so that rows * (longest source + longest target + 2) <= max_tokens.
std::vector<std::vector<size_t>> random_batches(const std::vector<train::EncodedPair>& pairs, int64_t max_tokens, uint64_t seed);

// Over the first `limit` batches of `plan`: the summed cross-entropy of the PAD labels and of the
// real ones (ignore_index off), each backward on its own.
struct PadShare {
  int64_t labels = 0, pad_labels = 0;
  double loss_share = 0;      // PAD labels' part of the summed loss, ignore_index off
  double grad_share = 0;      // |gradient of the PAD labels' terms| / (that + |gradient of the real labels' terms|)
  double ignored_grad = 0;    // with ignore_index = PAD: |(loss, gradient) - (the real labels' loss, gradient)|, exactly 0
};
PadShare pad_share(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, const std::vector<std::vector<size_t>>& plan,
                   size_t limit);

// ---- 4. the padded length

// A relative difference at float64's rounding reads "none": floored at the tolerance of the masked
// check (masked_alone_equals_batch). With the masks the difference is exactly 0 at some lengths and
// about 1e-16 at others (sums over more, masked, keys), which unfloored would make a trend of rounding.
constexpr double kDiffFloor = 1e-12;
// log10 of the relative difference of the logits of pair `idx` padded with PAD to `len` source
// tokens against the pair's logits alone (floored at kDiffFloor).
double padded_log_diff(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t idx, int64_t len);

// The training pairs by length, shortest first (source, then target): the seed of index i pads the i-th.
std::vector<size_t> by_length(const IdData& data);
// The longest source among the pairs the first `n` indices pad.
int64_t longest_padded(const IdData& data, const std::vector<size_t>& by_len, int64_t n);

// ---- the lab's runs (lab/labs/padding.cpp) and its tables and figures (lab/parts/padding_report.cpp)

// The arms of parts 1 and 2: which padding masks the model applies.
struct MaskSetting {
  const char* name;
  bool source, target;
};
inline constexpr MaskSetting kPaddingMasks[] = {{"both padding masks", true, true},
                                                {"no source padding mask", false, true},
                                                {"no target padding mask", true, false},
                                                {"no padding masks", false, false}};
// The arms of part 3: the model's stage and the batching ("untrained random" ...).
inline constexpr const char* kPadShareArms[] = {"untrained random", "untrained bucketed", "trained random", "trained bucketed"};

// One run: a mask setting's comparison and gradient (parts 1, 2), PAD labels' share of one stage
// and batching (part 3), or the logits' difference padded to one length (part 4).
struct PaddingRun {
  enum Part { Masks, Share, Length } part = Masks;
  uint64_t seed = 0;
  Comparison cmp;
  PadGradient pg;
  int64_t src_len = 0, tgt_len = 0, batch_src_len = 0, batch_tgt_len = 0;  // the sentence's and the batch's
  PadShare share;
  int64_t batches = 0;
  double log_diff = NAN;  // log10 of the logits' relative difference, padded against alone
};
void to_json(nlohmann::json& j, const PaddingRun& m);

// A mask setting's comparison and gradient, the worst over seeds (in the seeds' order).
Comparison worst_comparison(const Grid<PaddingRun>& g, const std::string& arm);
PadGradient worst_gradient(const Grid<PaddingRun>& g, const std::string& arm);
// The lab's tables and figures of parts 1-4 (the dose-response's own the runner draws).
void describe_padding(const std::vector<int64_t>& lengths, const Grid<PaddingRun>& g, Report& r);

}  // namespace gf::lab

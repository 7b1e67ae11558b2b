#pragma once
// The measurements behind lab `leak` (lab/labs/leak.cpp), public so that tests can check them: the
// decoder's Jacobian of the logits with respect to its input, and what it says about the future.
#include <cstdint>
#include <vector>

#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::lab {

// J[t][t'] = || d logits[t, :] / d input[t', :] ||_F, the input being the decoder's input
// embeddings (token embedding * sqrt(D) + position), for one sentence (no padding), by one backward
// per logit entry, the decoder run with the causal mask as model.masks says.
using JacobianGrid = std::vector<std::vector<double>>;
JacobianGrid decoder_jacobian(const nn::Seq2SeqTransformer& model, const train::EncodedPair& pair);

struct JacobianStats {
  int64_t above = 0, above_nonzero = 0;  // entries t' > t, and how many are not exactly 0
  int64_t lower_zero = 0;                // entries t' <= t that are exactly 0
  double above_max = 0;                  // largest entry above the diagonal
  double above_share = 0;                // share of the sum of all entries that lies above the diagonal
  double next_argmax = 0;                // share of rows t < T-1 whose largest entry off the diagonal is at t' = t+1
};
// Over several sentences' grids: counts add up, shares are over all rows.
JacobianStats jacobian_stats(const std::vector<JacobianGrid>& grids);
// The entry-wise mean of grids of one size.
JacobianGrid mean_grid(const std::vector<JacobianGrid>& grids);

}  // namespace gf::lab

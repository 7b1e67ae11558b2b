#pragma once
// The maps of one sequence through a decoder-only model (nn/decoder_only.h), as `gradflow report`'s
// attention explorer shows them: the prompt (source ids + <sep>) and the output (ending with <eos>)
// as one sequence "source <sep> y1 ... y_{T-1}", the model teacher-forced on prompt + out[:-1];
// output token t is predicted at position P - 1 + t (P: the prompt's length). Gradient x input as
// train/inspect/attribution.h defines it, with respect to the token embeddings of the whole
// sequence; rollout through the one stack (train/inspect/maps.h's stack_rollout), row P - 1 + t.
// With grouped-query attention the heads are query heads.
#include <cstdint>
#include <vector>

#include "nn/decoder_only.h"
#include "train/inspect/maps.h"

namespace gf::train::inspect {

struct StackMaps {
  std::vector<std::vector<Map>> self;  // [layer][head]: (L, L), L = P + T - 1
  Map grad_dot;                        // (T, L): (d log p(out[t]) / d x_j) . x_j, signed
  std::vector<double> log_probs;       // (T)
  Map rollout;                         // (T, L): row P - 1 + t of the rollout R, rows sum to 1
};
// Throws std::invalid_argument for an empty prompt or an output that does not end with <eos>.
StackMaps decoder_only_maps(const nn::DecoderOnlyTransformer& model, const std::vector<int64_t>& prompt, const std::vector<int64_t>& out);

}  // namespace gf::train::inspect

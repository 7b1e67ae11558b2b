#pragma once
// What the run report's attention explorer shows for one sentence: the model's translation, every
// attention map (per layer and head) arranged by the model's own structure, and, for each output
// token, its gradient-times-input attribution and attention rollout over the input tokens.
//
//   encoder-decoder: views "enc_self" (source x source), "dec_self" (decoder input x decoder
//     input: <bos> y1 ... y_{T-1}) and "cross" (decoder position x source); inputs = the source
//     tokens; output token t is predicted at decoder position t. Gradient x input and rollout as
//     lab/attribution_maps.h defines them (the `attribution` lab's maps).
//   decoder-only: one sequence "source <sep> y1 ... y_{T-1}" and view "self" (causal); inputs = every
//     position of that sequence; output token t is predicted at position P - 1 + t (P: the prompt
//     "source <sep>"). Gradient x input the same way, with respect to the token embeddings of the
//     whole sequence; rollout through the one stack: R = prod_l (0.5 mean_h A_l + 0.5 I), row
//     P - 1 + t (Abnar and Zuidema 2020).
// With grouped-query attention the heads of a view are query heads; "kv_group" names the
// key/value head each one shares (head h uses key/value head h / (H / kv_heads)).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/attribution_maps.h"
#include "nn/decoder_only.h"
#include "train/eval/translator.h"

namespace gf::app {

// One sentence through the run's model (greedy decoding, as `translate` does): source is text as
// the run reads it (whitespace tokens, or raw text for a subword run); reference may be empty.
// Throws UsageError-style std::invalid_argument for an empty source, one longer than the model's
// max_len, or text that is not UTF-8.
nlohmann::json sentence_report(const train::Translator& t, const std::string& source, const std::string& reference);

// The decoder-only model's maps of one sequence (exposed for tests): prompt = source ids + <sep>,
// out = output ids ending with <eos>; the model is teacher-forced on prompt + out[:-1].
struct StackMaps {
  std::vector<std::vector<lab::Map>> self;  // [layer][head]: (L, L), L = P + T - 1
  lab::Map grad_dot;                        // (T, L): (d log p(out[t]) / d x_j) . x_j, signed
  std::vector<double> log_probs;            // (T)
  lab::Map rollout;                         // (T, L): row P - 1 + t of the rollout R, rows sum to 1
};
StackMaps decoder_only_maps(const nn::DecoderOnlyTransformer& model, const std::vector<int64_t>& prompt, const std::vector<int64_t>& out);

// The rollout of a stack of self-attention layers, each already averaged over its heads (L, L):
// R = (0.5 A_n + 0.5 I) ... (0.5 A_1 + 0.5 I). Rows sum to 1 when each A's rows do.
lab::Map stack_rollout(const std::vector<lab::Map>& layers);

}  // namespace gf::app

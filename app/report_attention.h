#pragma once
// What the run report's attention explorer shows for one sentence: the model's translation, every
// attention map (per layer and head) arranged by the model's own structure, and, for each output
// token, its gradient-times-input attribution and attention rollout over the input tokens.
//
//   encoder-decoder: views "enc_self" (source x source), "dec_self" (decoder input x decoder
//     input: <bos> y1 ... y_{T-1}) and "cross" (decoder position x source); inputs = the source
//     tokens; output token t is predicted at decoder position t. Gradient x input and rollout as
//     train/inspect/attribution.h and train/inspect/maps.h define them (the `attribution` lab's maps).
//   decoder-only: one sequence "source <sep> y1 ... y_{T-1}" and view "self" (causal); inputs = every
//     position of that sequence; the maps of train/inspect/decoder_only.h.
// With grouped-query attention the heads of a view are query heads; "kv_group" names the
// key/value head each one shares (head h uses key/value head h / (H / kv_heads)).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/eval/translator.h"

namespace gf::app {

// One sentence through the run's model (greedy decoding, as `translate` does): source is text as
// the run reads it (whitespace tokens, or raw text for a subword run); reference may be empty.
// Throws UsageError-style std::invalid_argument for an empty source, one longer than the model's
// max_len, or text that is not UTF-8.
nlohmann::json sentence_report(const train::Translator& t, const std::string& source, const std::string& reference);

}  // namespace gf::app

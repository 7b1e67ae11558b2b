#pragma once
// Autoregressive decoding: greedy and beam search, batched, with a KV cache. For the
// encoder-decoder (Seq2SeqTransformer) self-attention K/V grow one position a step and
// cross-attention K/V are projected once per source batch; for the decoder-only model the prompt
// "source <sep>" fills the cache in one pass, then the target grows one position a step. Stops at
// <eos> or at the source length + max_extra tokens.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "nn/decoder_only.h"
#include "nn/seq2seq.h"

namespace gf::train {

// When beam search stops a sentence (see "beam search" in decode.cpp). Exact: once no live
// hypothesis can still finish above the best finished one, whatever its next tokens (Hugging
// Face's early_stopping="never"). Heuristic (the default, Hugging Face's early_stopping=False):
// also once K hypotheses are finished and no live one scores, at its present length, above the
// K-th best of them; a live one could still climb above it with tokens likelier than its own
// average, so the answer may differ from the exact rule's, which runs each live hypothesis until
// its log p has fallen below what the best finished one scores at the length limit.
enum class BeamStop { Heuristic, Exact };

// The widest beam: beyond it a search costs K times a greedy one's rows for nothing a translation
// shows (published systems use 4 to 12), and K + 1 candidates per row stay far from overflowing.
// translate and eval also hold --beam to the target vocabulary's size.
constexpr int64_t kMaxBeam = 256;

struct DecodeOptions {
  int64_t beam = 1;             // 1 = greedy; at most kMaxBeam
  double length_penalty = 1.0;  // beam: a hypothesis scores log p / (tokens + 1)^length_penalty, <eos> counted
  BeamStop beam_stop = BeamStop::Heuristic;
  int64_t max_extra = 50;       // tokens past the source length
  bool use_cache = true;        // false recomputes the whole prefix every step (for tests)
  // The KV cache's dtype. Unset: bfloat16 while the products run in bfloat16 (--precision bf16),
  // else the model's. bfloat16 under a float32 model halves the cache's bytes (keys and values
  // rounded once as they are stored, the attention's sums still float32).
  std::optional<DType> kv_cache;
  // false (greedy only): every row runs for exactly (longest source in the batch + max_extra)
  // steps and keeps every token it picks, <eos> and what follows included, as the PyTorch
  // reference's fixed-length decoding benchmark does.
  bool stop_at_eos = true;
  int64_t bos = 2, eos = 3, pad = 0;  // decoder-only: bos is the <sep> that ends the prompt
};

// DecodeOptions::kv_cache resolved for a model of dtype `model`: as given, else bfloat16 under
// bf16 products, else the model's.
DType cache_dtype(const DecodeOptions& opt, DType model);

struct DecodeStats {
  int64_t steps = 0;
  int64_t cache_bytes_peak = 0;          // KV cache allocated at its largest (self + cross, all layers)
  int64_t self_bytes_per_token = 0;      // self-attention K and V of one target token, all layers
  int64_t cross_bytes_per_src_token = 0;  // cross-attention K and V of one source token, all layers
};

// src: (B, S) int64, PAD-padded. Returns B token sequences without <bos>/<eos> (with stop_at_eos
// false: without <bos>, each exactly the step count long).
std::vector<std::vector<int64_t>> translate_batch(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                                  DecodeStats* stats = nullptr);
// The decoder-only model: each row's prompt is its source (PAD removed) followed by opt.bos
// (<sep>); rows are decoded in groups of equal source length, so no prompt holds padding.
std::vector<std::vector<int64_t>> translate_batch(const nn::DecoderOnlyTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                                  DecodeStats* stats = nullptr);

// Decoding with next-token log-probabilities from a function instead of a model, so tests can
// script them: next(src, prefix) gets the rows' sources (R, S) and outputs so far (R, t), each
// starting with opt.bos, and returns (R, V) float32 log-probabilities.
using NextLogProbs = std::function<Tensor(const Tensor& src, const Tensor& prefix)>;
std::vector<std::vector<int64_t>> translate_batch_with(const NextLogProbs& next, const Tensor& src, const DecodeOptions& opt);

}  // namespace gf::train

#pragma once
// The measurements behind lab `kvcache` (lab/labs/kvcache.cpp), public so that tests can check them;
// defined in lab/parts/kvcache_measures.cpp.
#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/seq2seq.h"

namespace gf::lab {

// Bytes one token adds to a KV cache over every layer: K and V (2) x layers x key/value heads x
// head width x bytes per value. Per sequence; a batch of R rows holds R times as much.
int64_t kv_bytes_per_token(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype);

// The bytes a decoder's caches hold, summed over its layers: the self-attention K/V buffers (rows x
// capacity positions) and the cross-attention K/V (rows x source positions).
struct CacheBytes {
  int64_t self = 0, cross = 0;
};
CacheBytes cache_bytes(const std::vector<nn::DecoderLayerCache>& caches);

// Greedy decoding of `steps` positions (no stop at <eos>) that keeps every step's logits, either
// cached (the decoder's KV cache, one new position a step) or recomputed (the whole prefix through
// the decoder every step, with the causal mask: what decoding without a cache does). With
// `follow` ([row][step] tokens), those tokens are fed instead of the argmax, so that two ways of
// decoding are compared on one prefix. src (B, S) is PAD-padded; no graph is recorded.
struct Decoded {
  std::vector<std::vector<int64_t>> tokens;  // [row][step]: each step's argmax
  std::vector<Tensor> logits;                // per step (B, V), float64
};
Decoded decode_fixed(const nn::Seq2SeqTransformer& model, const Tensor& src, int64_t steps, bool cached,
                     const std::vector<std::vector<int64_t>>* follow = nullptr);

// max |a - b| over every step's logits, divided by the largest |logit| of a among those compared:
// the two decodings' largest difference relative to the logits' size. Rows [row, row + rows of b)
// of a are compared with b's (a sentence decoded alone against its row in a batch).
double relative_logit_difference(const Decoded& a, const Decoded& b, int64_t row = 0);
// Steps whose token differs between a's row `row + i` and b's row i.
int64_t differing_tokens(const Decoded& a, const Decoded& b, int64_t row = 0);

// Sentences decoded together: src (R, S) PAD-padded, and each row's length without the padding.
struct Sources {
  Tensor src;
  std::vector<int64_t> lengths;
};

// Cached against recomputed greedy decoding of `steps` positions on one prefix (decode_fixed, the
// recomputed one fed the cached one's tokens), each sentence alone against its row of the batch
// (cached both times), and train::translate_batch with and without the cache (no stop at <eos>).
struct Exactness {
  double cached_diff = 0, alone_diff = 0;                          // relative logit differences
  int64_t cached_tokens = 0, alone_tokens = 0, library_tokens = 0;  // tokens that differ
  std::vector<double> per_step;                                    // max |logit difference| per step, cached vs recomputed
};
Exactness exactness(const nn::Seq2SeqTransformer& model, const Sources& u, int64_t steps);

// The cache's bytes against kv_bytes_per_token in the model's dtype: the buffers started for every
// capacity of `capacities` (self-attention: rows x capacity positions; cross-attention: rows x source
// positions), and decoding's DecodeStats.
struct CacheCheck {
  int64_t formula = 0;               // per token, all layers
  int64_t self = 0, cross = 0;       // measured per token: buffer bytes / (rows x positions)
  int64_t library = 0;               // translate_batch's DecodeStats::self_bytes_per_token
  int64_t library_cross = 0;         // ... cross_bytes_per_src_token
  int64_t worst = 0;                 // largest |measured - formula| in bytes, over every total compared
  std::vector<int64_t> self_totals;  // the self-attention buffers' bytes at each capacity (all rows)
};
CacheCheck check_cache_bytes(const nn::Seq2SeqTransformer& model, const Tensor& src, const std::vector<int64_t>& capacities);

// The time of one decoding step at each position t of `lengths`, cached and recomputed, on a random
// target prefix (`symbols` symbols, drawn from `seed`): the fastest of `reps` runs after one untimed
// run, the two ways alternating at each t. The cache is filled once up to the longest t; a cached
// step at t rewinds every layer's cache to t - 1 positions and writes position t - 1 again.
// `recompute_both`: the cached arm recomputes too (the ablation).
struct StepTimes {
  std::vector<double> cached, recomputed;  // seconds per step at each length
  double slope_cached = NAN, slope_recomputed = NAN;  // loglog_slope of each on t
};
StepTimes time_steps(const nn::Seq2SeqTransformer& model, const Tensor& src, const std::vector<int64_t>& lengths, int64_t reps, int64_t symbols,
                     uint64_t seed, bool recompute_both);

}  // namespace gf::lab

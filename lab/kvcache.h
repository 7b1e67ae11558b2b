#pragma once
// The measurements behind lab `kvcache` (lab/kvcache.cpp), public so that tests can check them.
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

}  // namespace gf::lab

#pragma once
// The KV cache of incremental decoding: one per attention layer (MultiheadAttention::start_cache,
// forward_cached; the decode-time kernel is tensor/kernels/attend_one.h).
#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace gf::nn {

// The keys and values of the positions seen so far, for incremental self-attention (no graph).
// Beam search reorders rows every step; rather than moving every row's past keys and values, a
// row's positions may live in other buffer rows (its ancestors'): position_rows says where. Each
// (buffer row, position) is written once, at that position's step, by the row then in that slot.
struct KVCache {
  Tensor k, v;  // (buffer rows, KV, capacity, d_k): positions [0, length) are filled
  int64_t length = 0;
  // Empty: row r's positions are all in buffer row r. Else (batch x capacity): the buffer row
  // holding position p of row r (positions >= length: row r's own slot, where they will be written).
  std::vector<int64_t> position_rows;
  int64_t capacity() const { return k.defined() ? k.size(2) : 0; }
  int64_t batch() const;  // rows being decoded
  int64_t bytes() const;
  // Keeps batch rows `rows` (in that order, repeats allowed): beam search reorders hypotheses with
  // it. Only position_rows changes, unless there are more rows than buffer rows (then a new buffer).
  void select_rows(const std::vector<int64_t>& rows);
  // Moves every row's positions into its own buffer row (position_rows empty again).
  void materialize();
};

}  // namespace gf::nn

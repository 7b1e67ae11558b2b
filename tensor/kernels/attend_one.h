#pragma once
// Attention of one new query position per row over a cache of keys and values: the inner loop of
// incremental decoding (nn::MultiheadAttention::attend_one and forward_cached's one-token step).
// No (R, H, 1, S) tensors and no per-head GEMM calls: one pass per (row, head) computes the
// scores, the softmax (fast::exp, the same exp as softmax() and the fused attention op) and the
// weighted sum of the values. Keys blocked at the end of a row by a bool mask are never read, and
// the next item's keys and values are prefetched while the current one is read.
//
// Layout: q (R, H, 1, d_k); k and v (Bk, KV, capacity, d_k), contiguous, of which positions
// [0, len) are read; query head h reads key/value head h / (H / KV) (grouped query). The output
// is (R, 1, H*d_k): the heads side by side, as attention's merge of the heads lays them out.
#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace gf::kernels {

struct AttendOneConfig {
  int64_t len = 0;     // cache positions [0, len) are read
  double scale = 1.0;  // scores are (q * scale) . k, q scaled first
  // (R, len) per query row, or undefined: bool (true = blocked, the score becomes -inf) or float
  // (added to the scores). A row with every key blocked gets zeros, never NaN.
  Tensor mask;
  // Which key/value buffer row each query row reads: empty = row r reads row r; else (R) entries,
  // so the rows of one sentence's beam share its cross-attention keys and values.
  std::span<const int64_t> kv_rows;
  // Empty, or (R x capacity): the buffer row holding position p of query row r (a KV cache whose
  // rows beam search reordered without moving them; nn::KVCache::position_rows). Not with kv_rows.
  std::span<const int64_t> position_rows;
};

// The kernel: float32 or float64; rows in parallel. Under a float32 q, k and v may be bfloat16 (a
// bf16 KV cache, half the bytes): each element is widened exactly, and the sums are float32's.
Tensor attend_one(const Tensor& q, const Tensor& k, const Tensor& v, const AttendOneConfig& cfg);

// The plain reference it is tested against: for each (row, head) in turn, the scores and the
// weighted sum in double with std::exp, every key read, then rounded to q's dtype.
Tensor attend_one_reference(const Tensor& q, const Tensor& k, const Tensor& v, const AttendOneConfig& cfg);

}  // namespace gf::kernels

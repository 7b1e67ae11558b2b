#pragma once
// Helpers shared by the nn tests: comparing tensors, catching error messages, tiny models.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "nn/seq2seq.h"
#include "tensor/tensor.h"

namespace gf::testing {

// max |a - b| over all elements; shapes must match. NaN anywhere gives +inf.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(shape_str(a.shape()) == shape_str(b.shape()));
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(a.flat_get(i) - b.flat_get(i));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

inline bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.flat_get(i))) return false;
  return true;
}

// The message of the exception f throws, or "<no exception>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

#define GF_CHECK_CONTAINS(haystack, needle)                      \
  do {                                                           \
    const std::string gf_h_ = (haystack);                        \
    INFO("message: " << gf_h_);                                  \
    CHECK(gf_h_.find(needle) != std::string::npos);              \
  } while (0)

// A tiny translator: distinct sizes so that shapes tell the tensors apart.
inline nn::Seq2SeqOptions tiny_options(int64_t layers = 2, bool norm_first = false, double dropout = 0.0) {
  nn::Seq2SeqOptions o;
  o.src_vocab = 7;
  o.tgt_vocab = 9;
  o.layer.d_model = 4;
  o.layer.nhead = 2;
  o.num_layers = layers;
  o.layer.dim_feedforward = 6;
  o.layer.dropout = dropout;
  o.layer.norm_first = norm_first;
  o.max_len = 32;
  return o;
}

// A translator 8 wide with 2 heads, a feed-forward of 16 and no dropout, for `vocab` tokens on both
// sides: the decoding tests' model, small enough to follow in float64.
inline nn::Seq2SeqOptions decoding_options(int64_t vocab, int64_t layers = 1) {
  nn::Seq2SeqOptions o;
  o.src_vocab = o.tgt_vocab = vocab;
  o.layer.d_model = 8, o.layer.nhead = 2, o.layer.dim_feedforward = 16, o.layer.dropout = 0;
  o.num_layers = layers;
  return o;
}

// The grouped-query tests' model: decoding_options' with 12 tokens, two layers and 4 query heads
// sharing kv_heads key/value heads (4: multi-head, 1: multi-query).
inline nn::Seq2SeqOptions grouped_query_options(int64_t kv_heads) {
  nn::Seq2SeqOptions o = decoding_options(12, 2);
  o.layer.nhead = 4;
  o.layer.kv_heads = kv_heads;
  o.max_len = 32;
  return o;
}

}  // namespace gf::testing

#pragma once
// The n best entries of one row of scores, best first: beam search's scan of each row of a
// vocabulary-wide (R, V) score tensor for its K + 1 best tokens. One pass with a small sorted list
// (n is far below V); once the list is full, a block of 16 entries none of which beats its last is
// passed over after one vector comparison (any_of_16_beats: AVX-512 where the library is built for
// it, in top_tokens.cpp, as installed headers hold no instruction-set-specific code).
#include <cstdint>
#include <span>
#include <vector>

namespace gf::kernels {

// An entry of a row and its score x[token] - shift (a float32 row's float32 value, held exactly).
struct ScoredToken {
  double log_prob;
  int64_t token;
};

// The n best of a row's V entries by x[v] - shift (log_softmax's own arithmetic when shift is
// log_softmax_shift: the same bits; shift 0 for scores that are log-probabilities already), best
// first, of equal values the lower token first; the tokens listed in `never` (a few: <pad>, <bos>)
// are not taken. -inf scores are taken like any other (callers pass over them). Scores are not NaN
// (a NaN would leave the order unspecified).
std::vector<ScoredToken> top_tokens(const float* x, int64_t V, float shift, int64_t n, std::span<const int64_t> never);
std::vector<ScoredToken> top_tokens(const double* x, int64_t V, double shift, int64_t n, std::span<const int64_t> never);

// The plain reference top_tokens is tested against: every entry's x[v] - shift, sorted best first
// with ties by token, the first n.
std::vector<ScoredToken> top_tokens_reference(const float* x, int64_t V, float shift, int64_t n, std::span<const int64_t> never);
std::vector<ScoredToken> top_tokens_reference(const double* x, int64_t V, double shift, int64_t n, std::span<const int64_t> never);

// Whether any of x[0..16) - shift is greater than cut (NaN never is): top_tokens' skip test,
// declared for its test.
bool any_of_16_beats(const float* x, float shift, float cut);
bool any_of_16_beats(const double* x, double shift, double cut);

}  // namespace gf::kernels

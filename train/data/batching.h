#pragma once
// Length-bucketed batches for the translator, the PyTorch reference's algorithm exactly: sort the
// pairs by (source length, target length), then cut the sorted list greedily so that a batch of
// B rows holds at most max_tokens padded tokens, B * (longest source + longest target + 2) <=
// max_tokens (the +2 is <bos> and <eos>). A pair too long for max_tokens on its own still gets a
// batch of one. The batches are fixed; each epoch visits them in an order shuffled by
// std::mt19937_64(seed + epoch), so the same seed and epoch give the same order everywhere.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "train/data/parallel_text.h"
#include "train/data/vocab.h"

namespace gf::train {

struct EncodedPair {
  std::vector<int64_t> src;  // (S_i,) ids, no specials
  std::vector<int64_t> tgt;  // (T_i,) ids, no specials
};

std::vector<EncodedPair> encode_pairs(const std::vector<TokenPair>& pairs, const Vocab& src_vocab,
                                      const Vocab& tgt_vocab);

// One padded batch, row-major.
struct Batch {
  std::vector<int64_t> src;     // (B, S) source ids, Vocab::kPad after each sentence
  std::vector<int64_t> tgt;     // (B, T) <bos> target ids <eos>, then Vocab::kPad
  int64_t rows = 0;             // B
  int64_t src_len = 0;          // S, the longest source
  int64_t tgt_len = 0;          // T, the longest target + 2
  std::vector<size_t> indices;  // (B,) the pair behind each row
  int64_t src_tokens = 0;       // non-pad source tokens
  int64_t tgt_tokens = 0;       // non-pad tokens of tgt[:, 1:] (the tokens the model predicts)

  int64_t padded_tokens() const { return rows * (src_len + tgt_len); }
};

// Pads the given pairs into a batch, in the given order. Throws std::invalid_argument when
// `indices` is empty or names a pair that does not exist.
Batch collate(const std::vector<EncodedPair>& pairs, std::span<const size_t> indices);

// The reference's bucketing of `candidates` (pair indices, ascending): stable sort by
// (src length, tgt length), then the greedy cut. Throws std::invalid_argument when max_tokens < 1.
std::vector<std::vector<size_t>> bucket_by_length(const std::vector<EncodedPair>& pairs,
                                                  std::vector<size_t> candidates, int64_t max_tokens);

// Shuffles `items` in place with Fisher-Yates driven by std::mt19937_64(seed), with unbiased
// bounded draws done here (std::shuffle's draws differ between standard libraries).
void seeded_shuffle(std::vector<size_t>& items, uint64_t seed);

class BatchPlan {
 public:
  // Pairs with an empty source, or with more than max_len tokens on either side (max_len > 0),
  // are left out and counted. The plan keeps only indices: `pairs` must outlive it.
  BatchPlan(const std::vector<EncodedPair>& pairs, int64_t max_tokens, int64_t max_len = 0);

  size_t size() const { return batches_.size(); }                          // batches per epoch
  const std::vector<size_t>& batch_indices(size_t b) const { return batches_.at(b); }
  Batch batch(size_t b) const { return collate(*pairs_, batches_.at(b)); }
  // The order to visit the batches in this epoch: a permutation of [0, size()).
  std::vector<size_t> epoch_order(uint64_t seed, uint64_t epoch) const;

  size_t pairs_used() const { return used_; }
  size_t skipped_too_long() const { return skipped_too_long_; }
  size_t skipped_empty() const { return skipped_empty_; }
  int64_t max_tokens() const { return max_tokens_; }

 private:
  const std::vector<EncodedPair>* pairs_;
  std::vector<std::vector<size_t>> batches_;
  int64_t max_tokens_;
  size_t used_ = 0, skipped_too_long_ = 0, skipped_empty_ = 0;
};

}  // namespace gf::train

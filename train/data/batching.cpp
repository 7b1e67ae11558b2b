#include "train/data/batching.h"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::train {

std::vector<EncodedPair> encode_pairs(const std::vector<TokenPair>& pairs, const Vocab& src_vocab,
                                      const Vocab& tgt_vocab) {
  std::vector<EncodedPair> out;
  out.reserve(pairs.size());
  for (const auto& [src, tgt] : pairs) out.push_back({src_vocab.encode(src), tgt_vocab.encode(tgt)});
  return out;
}

Batch collate(const std::vector<EncodedPair>& pairs, std::span<const size_t> indices) {
  GF_CHECK(!indices.empty(), "collate: empty batch");
  Batch b;
  b.indices.assign(indices.begin(), indices.end());
  b.rows = static_cast<int64_t>(indices.size());
  for (size_t i : indices) {
    GF_CHECK(i < pairs.size(), "collate: pair index {} is out of range for {} pairs", i, pairs.size());
    b.src_len = std::max(b.src_len, static_cast<int64_t>(pairs[i].src.size()));
    b.tgt_len = std::max(b.tgt_len, static_cast<int64_t>(pairs[i].tgt.size()) + 2);
  }
  b.src.assign(static_cast<size_t>(b.rows * b.src_len), Vocab::kPad);  // (B, S)
  b.tgt.assign(static_cast<size_t>(b.rows * b.tgt_len), Vocab::kPad);  // (B, T)
  for (int64_t r = 0; r < b.rows; ++r) {
    const EncodedPair& p = pairs[indices[static_cast<size_t>(r)]];
    std::copy(p.src.begin(), p.src.end(), b.src.begin() + r * b.src_len);
    auto row = b.tgt.begin() + r * b.tgt_len;  // (T,)
    row[0] = Vocab::kBos;
    std::copy(p.tgt.begin(), p.tgt.end(), row + 1);
    row[static_cast<int64_t>(p.tgt.size()) + 1] = Vocab::kEos;
    b.src_tokens += static_cast<int64_t>(p.src.size());
    b.tgt_tokens += static_cast<int64_t>(p.tgt.size()) + 1;  // the targets and <eos>
  }
  return b;
}

std::vector<std::vector<size_t>> bucket_by_length(const std::vector<EncodedPair>& pairs,
                                                  std::vector<size_t> candidates, int64_t max_tokens) {
  GF_CHECK(max_tokens >= 1, "bucket_by_length: max_tokens {} < 1", max_tokens);
  auto lengths = [&](size_t i) { return std::pair(pairs[i].src.size(), pairs[i].tgt.size()); };
  // Python's sorted() is stable, so equal lengths keep their index order.
  std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) { return lengths(a) < lengths(b); });
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  int64_t longest_src = 0, longest_tgt = 0;  // of cur; targets counted with <bos> and <eos>
  for (size_t i : candidates) {
    const int64_t s = static_cast<int64_t>(pairs[i].src.size()), t = static_cast<int64_t>(pairs[i].tgt.size()) + 2;
    int64_t ns = std::max(longest_src, s), nt = std::max(longest_tgt, t);
    if (!cur.empty() && static_cast<int64_t>(cur.size() + 1) * (ns + nt) > max_tokens) {
      out.push_back(std::move(cur));
      cur.clear();
      ns = s;
      nt = t;
    }
    cur.push_back(i);
    longest_src = ns;
    longest_tgt = nt;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

void seeded_shuffle(std::vector<size_t>& items, uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto below = [&](uint64_t n) {  // uniform in [0, n) by rejection
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = gen();
    while (x >= limit);
    return x % n;
  };
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[below(i)]);
}

BatchPlan::BatchPlan(const std::vector<EncodedPair>& pairs, int64_t max_tokens, int64_t max_len)
    : pairs_(&pairs), max_tokens_(max_tokens) {
  GF_CHECK(max_tokens >= 1, "BatchPlan: max_tokens {} < 1", max_tokens);
  GF_CHECK(max_len >= 0, "BatchPlan: max_len {} < 0", max_len);
  std::vector<size_t> candidates;
  candidates.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    const int64_t s = static_cast<int64_t>(pairs[i].src.size()), t = static_cast<int64_t>(pairs[i].tgt.size());
    if (s == 0) {  // nothing to attend to
      ++skipped_empty_;
    } else if (max_len > 0 && (s > max_len || t > max_len)) {
      ++skipped_too_long_;
    } else {
      candidates.push_back(i);
    }
  }
  used_ = candidates.size();
  batches_ = bucket_by_length(pairs, std::move(candidates), max_tokens);
}

std::vector<size_t> BatchPlan::epoch_order(uint64_t seed, uint64_t epoch) const {
  std::vector<size_t> order(batches_.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  seeded_shuffle(order, seed + epoch);
  return order;
}

}  // namespace gf::train

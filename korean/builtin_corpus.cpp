#include "korean/builtin_corpus.h"

#include "korean/corpus_ko.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace {

std::vector<TokenPair> to_pairs(const std::vector<SentencePair>& v) {
  std::vector<TokenPair> out;
  out.reserve(v.size());
  for (const auto& p : v) out.emplace_back(utf8::split_whitespace(p.src), utf8::split_whitespace(p.tgt));
  return out;
}

}  // namespace

RunData korean_run_data(uint64_t seed, size_t total) {
  const CorpusSplits corpus = make_korean_corpus(seed, total);
  RunData d;
  d.train = to_pairs(corpus.train);
  d.valid = to_pairs(corpus.valid);
  d.test = to_pairs(corpus.test);
  d.train_name = "built-in train";
  d.valid_name = "built-in valid";
  d.test_name = "built-in test";
  return d;
}

}  // namespace gf::train

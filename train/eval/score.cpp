#include "train/eval/score.h"

#include <chrono>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::train {

TestScore score_test_split(const Translator& t, const std::vector<TokenPair>& pairs, const DecodeOptions& opt, int64_t batch_size,
                           const std::string& tokenize, bool with_loss) {
  GF_CHECK(!pairs.empty(), "score_test_split: the test set is empty");
  TestScore s;
  for (const auto& p : pairs) {
    s.sources.push_back(join_tokens(p.first));
    s.references.push_back(join_tokens(p.second));
  }
  if (with_loss) s.nll = t.mean_nll(pairs);
  const auto t0 = std::chrono::steady_clock::now();
  s.hypotheses = t.translate(s.sources, opt, batch_size);
  s.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < s.hypotheses.size(); ++i) s.exact += s.hypotheses[i] == s.references[i];
  s.exact_share = static_cast<double>(s.exact) / static_cast<double>(s.hypotheses.size());
  s.bleu = corpus_bleu(s.hypotheses, s.references, tokenize);
  return s;
}

int64_t count_differing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  GF_CHECK(a.size() == b.size(), "count_differing: {} outputs against {}", a.size(), b.size());
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

}  // namespace gf::train

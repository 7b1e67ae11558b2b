// Beam search against exhaustive search: with a beam wider than the number of hypotheses and no
// length penalty, it must return the most probable output of all, scored independently by the
// teacher-forced model.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/softmax.h"
#include "nn/seq2seq.h"
#include "train/decode/decode.h"

using namespace gf;

namespace {

constexpr int64_t kV = 6, kPad = 0, kBos = 2, kEos = 3;
bool is_output_token(int64_t t) { return t != kPad && t != kBos && t != kEos; }  // decoding never emits <pad> or <bos>

// log p(tokens [+ <eos>] | src) by one teacher-forced forward pass.
double sequence_log_prob(const nn::Seq2SeqTransformer& m, int64_t src_token, const std::vector<int64_t>& tokens, bool with_eos) {
  std::vector<int64_t> seq = tokens;
  if (with_eos) seq.push_back(kEos);
  std::vector<int64_t> in{kBos};
  in.insert(in.end(), seq.begin(), seq.end() - 1);
  const int64_t n = static_cast<int64_t>(seq.size());
  Tensor lp = log_softmax(m.forward(Tensor::from_vector(std::vector<int64_t>{src_token}, {1, 1}), Tensor::from_vector(in, {1, n})))
                  .data()
                  .contiguous();  // (1, n, V)
  double total = 0;
  for (int64_t t = 0; t < n; ++t) total += lp.data<float>()[t * kV + seq[static_cast<size_t>(t)]];
  return total;
}

// Every hypothesis beam search can end with when the limit is 2 tokens: <eos> at once, one token
// then <eos>, or two tokens (the limit reached, no <eos>); 13 of them. The best one.
std::vector<int64_t> exhaustive_best(const nn::Seq2SeqTransformer& m, int64_t src_token) {
  std::vector<int64_t> best;
  double best_lp = sequence_log_prob(m, src_token, {}, true);
  for (int64_t a = 0; a < kV; ++a) {
    if (!is_output_token(a)) continue;
    if (double lp = sequence_log_prob(m, src_token, {a}, true); lp > best_lp) best_lp = lp, best = {a};
    for (int64_t b = 0; b < kV; ++b)
      if (is_output_token(b))
        if (double lp = sequence_log_prob(m, src_token, {a, b}, false); lp > best_lp) best_lp = lp, best = {a, b};
  }
  return best;
}

}  // namespace

TEST_CASE("beam search wider than the hypothesis space finds the most probable output (exhaustive search), and greedy does not always") {
  NoGradGuard ng;
  nn::Seq2SeqOptions o;
  o.src_vocab = o.tgt_vocab = kV;
  o.layer.d_model = 8, o.layer.nhead = 2, o.layer.dim_feedforward = 16, o.layer.dropout = 0;
  o.num_layers = 1;
  int greedy_missed = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    nn::Seq2SeqTransformer m(o, seed);
    m.eval();
    const std::vector<int64_t> sources{1, 4, 5};
    Tensor src = Tensor::from_vector(sources, {3, 1});  // (3, 1): three one-token sources
    train::DecodeOptions beam;
    beam.beam = 20, beam.length_penalty = 0, beam.max_extra = 1;  // limit: 1 + 1 = 2 tokens; 13 hypotheses
    train::DecodeOptions greedy = beam;
    greedy.beam = 1;
    train::DecodeOptions beam_uncached = beam;
    beam_uncached.use_cache = false;
    const auto got = train::translate_batch(m, src, beam, nullptr), g = train::translate_batch(m, src, greedy, nullptr);
    CHECK(train::translate_batch(m, src, beam_uncached, nullptr) == got);
    for (size_t i = 0; i < sources.size(); ++i) {
      const auto want = exhaustive_best(m, sources[i]);
      INFO("seed " << seed << ", source " << sources[i]);
      const auto score = [&](const std::vector<int64_t>& y) { return sequence_log_prob(m, sources[i], y, y.size() < 2); };
      INFO("beam's log p " << score(got[i]) << ", exhaustive search's " << score(want));
      CHECK(got[i] == want);
      greedy_missed += g[i] != want;
    }
  }
  MESSAGE("greedy missed the most probable output in " << greedy_missed << " of 18");
  CHECK(greedy_missed > 0);  // otherwise this test could not tell beam search from greedy
}

// Beam search against exhaustive search: with a beam wider than the number of hypotheses and no
// length penalty, it must return the most probable output of all, scored independently by the
// teacher-forced model. And on scripted log-probabilities: when to stop with a length penalty.
// The models here decode in float64: beam search, the exhaustive search, cached and uncached
// decoding and a batch against each sentence alone reach the same scores through different BLAS
// calls, which agree only to rounding (tests/rounding.h); in float32 two hypotheses could be that
// close on some machine's kernel, in float64 they would have to agree to ~1e-14.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/softmax.h"
#include "nn/seq2seq.h"
#include "train/decode/decode.h"
#include "nn_test_util.h"

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
  for (int64_t t = 0; t < n; ++t) total += lp.flat_get(t * kV + seq[static_cast<size_t>(t)]);
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
  const nn::Seq2SeqOptions o = gf::testing::decoding_options(kV);
  int greedy_missed = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    nn::Seq2SeqTransformer m(o, seed);
    m.to(DType::Float64);
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

namespace {

// A scripted model over kV2 tokens (<pad> 0, 1, <bos> 2, <eos> 3, words a..d = 4..7): for a source
// token and an output prefix, the probabilities of a few tokens; the rest of the mass is spread
// evenly over the other tokens. A prefix not in the script ends: <eos> 0.9.
constexpr int64_t kV2 = 8, kA = 4, kB = 5, kC = 6, kD = 7;
using Script = std::map<std::pair<int64_t, std::vector<int64_t>>, std::vector<std::pair<int64_t, double>>>;

std::vector<float> scripted_row(const Script& script, int64_t src_token, const std::vector<int64_t>& prefix) {
  auto it = script.find({src_token, prefix});
  const std::vector<std::pair<int64_t, double>> given = it != script.end() ? it->second : std::vector<std::pair<int64_t, double>>{{kEos, 0.9}};
  double rest = 1;
  for (const auto& [tok, p] : given) rest -= p;
  std::vector<float> row(kV2, static_cast<float>(std::log(rest / static_cast<double>(kV2 - static_cast<int64_t>(given.size())))));
  for (const auto& [tok, p] : given) row[static_cast<size_t>(tok)] = static_cast<float>(std::log(p));
  return row;
}

// next(src (R, 1), prefix (R, t)) -> (R, kV2) from the script; counts its calls (decoding steps).
train::NextLogProbs scripted(const Script& script, int* calls) {
  return [&script, calls](const Tensor& src, const Tensor& prefix) {
    ++*calls;
    const int64_t R = prefix.size(0), t = prefix.size(1);
    std::vector<float> out;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<int64_t> p;
      for (int64_t j = 1; j < t; ++j) p.push_back(static_cast<int64_t>(prefix.at({r, j})));  // after <bos>
      const auto row = scripted_row(script, static_cast<int64_t>(src.at({r, 0})), p);
      out.insert(out.end(), row.begin(), row.end());
    }
    return Tensor::from_vector(out, {R, kV2});  // (R, V)
  };
}

// Source 4: "a" <eos> is the most probable output (0.5 * 0.5 = 0.25), "a c" <eos> (0.5 * 0.4 * 0.9
// = 0.18) the best per token. After two steps a beam of 2 holds two finished hypotheses, "a" and
// "b" (0.3 * 0.6 = 0.18), while "a c" is still live. Source 5: something short to batch with it.
const Script kScript = {
    {{4, {}}, {{kA, 0.5}, {kB, 0.3}, {kEos, 0.1}}},
    {{4, {kA}}, {{kEos, 0.5}, {kC, 0.4}}},
    {{4, {kB}}, {{kEos, 0.6}, {kD, 0.3}}},
    {{5, {}}, {{kB, 0.6}, {kEos, 0.3}}},
    {{5, {kB}}, {{kD, 0.5}, {kEos, 0.4}}},
    // Source 6: "a" <eos> (0.3) and "b" <eos> (0.2475) finish at step 2, when the live "a c" (0.1)
    // scores below both, but "a c d c" <eos> (0.1 * 0.99^3 = 0.097) is the best per token.
    {{6, {}}, {{kA, 0.5}, {kB, 0.45}}},
    {{6, {kA}}, {{kEos, 0.6}, {kC, 0.2}}},
    {{6, {kB}}, {{kEos, 0.55}, {kD, 0.1}}},
    {{6, {kA, kC}}, {{kD, 0.99}}},
    {{6, {kA, kC, kD}}, {{kC, 0.99}}},
    {{6, {kA, kC, kD, kC}}, {{kEos, 0.99}}},
};

std::vector<std::vector<int64_t>> run(const std::vector<int64_t>& sources, const train::DecodeOptions& opt, int* calls = nullptr) {
  int n = 0;
  return train::translate_batch_with(scripted(kScript, calls ? calls : &n), Tensor::from_vector(sources, {static_cast<int64_t>(sources.size()), 1}), opt);
}

}  // namespace

TEST_CASE("beam search does not stop at K finished hypotheses while a live one can still score higher after length normalisation") {
  train::DecodeOptions o;
  o.beam = 2, o.max_extra = 3;  // limit: 1 + 3 = 4 tokens
  o.length_penalty = 1.0;
  int calls = 0;
  // log p / (tokens + 1): "a" -1.386 / 2 = -0.693, "a c" -1.715 / 3 = -0.572. Stopping once two
  // hypotheses were finished (after step 2) returned "a".
  CHECK(run({4}, o, &calls) == std::vector<std::vector<int64_t>>{{kA, kC}});
  // After step 3 "a c" is finished and every live hypothesis is below it for any length up to the
  // limit (log p <= -5.9, / 5 < -1.1): no 4th step.
  CHECK(calls == 3);
  o.length_penalty = 0;  // plain log p: "a" is the best
  CHECK(run({4}, o) == std::vector<std::vector<int64_t>>{{kA}});
  o.beam = 1;  // greedy: "a", then <eos> (0.5 > 0.4)
  CHECK(run({4}, o) == std::vector<std::vector<int64_t>>{{kA}});
}

TEST_CASE("beam search's heuristic stop ends a sentence early that the exact stop runs on to a better-scoring output") {
  train::DecodeOptions o;
  o.beam = 2, o.max_extra = 5;  // limit: 1 + 5 = 6 tokens
  o.length_penalty = 1.0;
  // After step 2: finished "a" (log 0.3 / 2 = -0.602) and "b" (log 0.2475 / 2 = -0.698); live
  // "a c" (log 0.1 / 3 = -0.768) and "b d" (log 0.045 / 3 = -1.034) score below the 2nd best
  // finished, so the heuristic stops there with "a".
  int calls = 0;
  o.beam_stop = train::BeamStop::Heuristic;
  CHECK(run({6}, o, &calls) == std::vector<std::vector<int64_t>>{{kA}});
  CHECK(calls == 2);
  // The exact rule goes on: "a c" could still reach log 0.1 / 7 = -0.329 at the limit, and does
  // end above "a": log 0.097 / 5 = -0.467.
  calls = 0;
  o.beam_stop = train::BeamStop::Exact;
  CHECK(run({6}, o, &calls) == std::vector<std::vector<int64_t>>{{kA, kC, kD, kC}});
  CHECK(calls == 5);
  // Source 4 (above): "a c" scores above the 2nd finished at step 2, so both rules find it.
  for (train::BeamStop stop : {train::BeamStop::Heuristic, train::BeamStop::Exact}) {
    o.beam_stop = stop;
    CHECK(run({4}, o) == std::vector<std::vector<int64_t>>{{kA, kC}});
  }
}

TEST_CASE("beam search: a batch decodes as each sentence alone (scripted log-probabilities)") {
  const std::vector<int64_t> sources{4, 5, 6, 4, 5, 6, 4};
  for (train::BeamStop stop : {train::BeamStop::Heuristic, train::BeamStop::Exact})
    for (int64_t K : {2, 3, 5})
      for (double lp : {0.0, 0.6, 1.0, 2.0}) {
        train::DecodeOptions o;
        o.beam = K, o.length_penalty = lp, o.max_extra = 3, o.beam_stop = stop;
        INFO("beam " << K << ", length penalty " << lp << ", exact stop " << (stop == train::BeamStop::Exact));
        const auto batch = run(sources, o);
        for (size_t i = 0; i < sources.size(); ++i) CHECK(batch[i] == run({sources[i]}, o)[0]);
      }
}

TEST_CASE("beam search runs one row per hypothesis: the first step has one row per sentence, not K copies") {
  std::vector<int64_t> rows_per_step;
  int calls = 0;
  train::NextLogProbs inner = scripted(kScript, &calls);
  train::NextLogProbs counting = [&](const Tensor& src, const Tensor& prefix) {
    rows_per_step.push_back(prefix.size(0));
    return inner(src, prefix);
  };
  train::DecodeOptions o;
  o.beam = 3, o.max_extra = 3;
  const auto out = train::translate_batch_with(counting, Tensor::from_vector(std::vector<int64_t>{4, 5}, {2, 1}), o);
  CHECK(out == std::vector<std::vector<int64_t>>{run({4}, o)[0], run({5}, o)[0]});
  REQUIRE(rows_per_step.size() >= 2);
  CHECK(rows_per_step[0] == 2);  // one empty hypothesis per sentence
  CHECK(rows_per_step[1] > 2);   // then up to K live ones each
  for (int64_t r : rows_per_step) CHECK(r <= 2 * 3);
}

TEST_CASE("beam search with a length penalty: a batch decodes as each sentence alone, cached and uncached (small model)") {
  NoGradGuard ng;
  const nn::Seq2SeqOptions o = gf::testing::decoding_options(kV);
  nn::Seq2SeqTransformer m(o, 3);
  m.to(DType::Float64);
  m.eval();
  Tensor src = Tensor::from_vector(std::vector<int64_t>{1, 4, 5, 4, 0, 0, 5, 5, 0}, {3, 3});  // (3, 3), PAD-padded
  train::DecodeOptions beam;
  beam.beam = 3, beam.length_penalty = 1.0, beam.max_extra = 4;
  train::DecodeOptions uncached = beam;
  uncached.use_cache = false;
  const auto got = train::translate_batch(m, src, beam);
  CHECK(train::translate_batch(m, src, uncached) == got);
  const std::vector<int64_t> lengths{3, 1, 2};
  for (int64_t b = 0; b < 3; ++b) {
    Tensor one = src.narrow(0, b, 1).narrow(1, 0, lengths[static_cast<size_t>(b)]).contiguous();  // (1, S_b)
    CHECK(train::translate_batch(m, one, beam)[0] == got[static_cast<size_t>(b)]);
  }
}

TEST_CASE("beam search over a vocabulary of many 16-token blocks finds the best tokens in any block, ties to the lower token") {
  constexpr int64_t V = 70;  // blocks of 16 and a tail of 6
  // Step 0: every token -20 except a few spread over the blocks; step 1: <eos> certain.
  auto script = [&](std::map<int64_t, float> first) {
    return train::NextLogProbs([first](const Tensor& src, const Tensor& prefix) {
      const int64_t R = prefix.size(0), t = prefix.size(1);
      Tensor lp = Tensor::full({R, V}, -20.0, DType::Float32);  // (R, V)
      for (int64_t r = 0; r < R; ++r) {
        float* row = lp.data<float>() + r * V;
        if (t == 1)
          for (auto [tok, v] : first) row[tok] = v;
        else
          row[kEos] = 0.0f;
      }
      (void)src;
      return lp;
    });
  };
  train::DecodeOptions o;
  o.beam = 2, o.max_extra = 1, o.length_penalty = 0;  // one token, then <eos>
  const Tensor src = Tensor::from_vector(std::vector<int64_t>{4}, {1, 1});
  // The best token sits in the fourth block, behind three weaker ones in earlier blocks.
  CHECK(train::translate_batch_with(script({{7, -3.0f}, {20, -2.5f}, {33, -2.0f}, {66, -1.0f}}), src, o) ==
        std::vector<std::vector<int64_t>>{{66}});
  // A token in a later block that beats the list's last entry by a little (0.2) must get in (as second
  // best it is live), and its <eos> (certain after it, unlikely after any other) makes it the answer.
  auto after = [](const Tensor& prefix, int64_t r) { return prefix.data<int64_t>()[r * prefix.size(1) + 1]; };
  train::NextLogProbs close = [&](const Tensor& src, const Tensor& prefix) {
    Tensor lp = script({{1, -5.0f}, {4, -9.0f}, {5, -9.1f}, {40, -8.9f}})(src, prefix);  // (R, V)
    if (prefix.size(1) == 2)
      for (int64_t r = 0; r < prefix.size(0); ++r) lp.data<float>()[r * V + kEos] = after(prefix, r) == 40 ? 0.0f : -10.0f;
    return lp;
  };
  CHECK(train::translate_batch_with(close, src, o) == std::vector<std::vector<int64_t>>{{40}});
  // Equal values in different blocks: the lower token first.
  CHECK(train::translate_batch_with(script({{5, -4.0f}, {61, -1.0f}, {18, -1.0f}}), src, o) == std::vector<std::vector<int64_t>>{{18}});
  // A token never output (<bos>, moved here to token 50) is passed over even as the best of a later
  // block, whose one-vector test lets the block through.
  train::DecodeOptions moved = o;
  moved.bos = 50;
  CHECK(train::translate_batch_with(script({{7, -3.0f}, {50, -0.5f}, {66, -1.0f}}), src, moved) ==
        std::vector<std::vector<int64_t>>{{66}});
}

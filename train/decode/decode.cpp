#include "train/decode/decode.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/indexing.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/reduce.h"
#include "tensor/kernels/softmax.h"
#include "tensor/kernels/top_tokens.h"
#include "tensor/parallel.h"

namespace gf::train {
namespace {

// Length of each row without padding.
std::vector<int64_t> source_lengths(const Tensor& src, int64_t pad) {
  std::vector<int64_t> len(static_cast<size_t>(src.size(0)), 0);
  for (int64_t b = 0; b < src.size(0); ++b)
    for (int64_t s = 0; s < src.size(1); ++s)
      if (static_cast<int64_t>(src.at({b, s})) != pad) len[b] = s + 1;
  return len;
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  return kernels::index_select(t, Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));
}

// The last position's logits: (R, t, V) -> (R, V), in the model's dtype.
Tensor last_logits(const Variable& logits) {
  const int64_t R = logits.size(0), t = logits.size(1), V = logits.size(2);
  return logits.data().narrow(1, t - 1, 1).contiguous().reshape({R, V});  // (R, V)
}

int64_t bytes_per_position(const Tensor& cache) {  // K and V of one position, all heads: (B, KV, *, d_k)
  return cache.defined() ? 2 * cache.size(1) * cache.size(3) * static_cast<int64_t>(dtype_size(cache.dtype())) : 0;
}

// Next-token scores for R rows, one step at a time: what greedy and beam search need of a model.
// prefix (R, t) is each row's output so far, starting with opt.bos. The scores are logits, whose
// log_softmax beam search takes at each row's best tokens; greedy needs only their argmax, so it skips the softmax.
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual Tensor next_scores(const Tensor& prefix) = 0;  // (R, V), float32 or a float64 model's float64
  // Whether next_scores() are already log-probabilities (a scripted model's).
  virtual bool scores_are_log_probs() const { return false; }
  // Keeps rows (in this order) of every per-row state.
  virtual void select_rows(const std::vector<int64_t>& rows) = 0;
  virtual void record(DecodeStats& st, int64_t step) const = 0;
};

// Builds the step model for these source rows (B, S), one decoding row per source, with room for
// `steps` output positions. Beam search grows a sentence's rows with select_rows.
using MakeSteps = std::function<std::unique_ptr<StepModel>(const Tensor& src, int64_t steps)>;

std::vector<int64_t> identity_rows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

class EncoderDecoderSteps : public StepModel {
 public:
  // The source is encoded once; the rows of one sentence's beam share its cross-attention K/V
  // (DecoderLayerCache::cross_rows).
  EncoderDecoderSteps(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt, int64_t capacity)
      : model_(model), opt_(opt), source_of_(identity_rows(src.size(0))) {
    row_pad_ = nn::make_pad_mask(src, opt.pad);  // (B, S): one row per source at first
    memory_ = model.encode(src, row_pad_);       // (B, S, D)
    if (opt.use_cache) caches_ = model.transformer->decoder->start_cache(memory_, capacity, cache_dtype(opt, memory_.dtype()));
  }

  Tensor next_scores(const Tensor& prefix) override {
    const int64_t t = prefix.size(1);
    Variable h;
    if (opt_.use_cache) {
      Tensor last = prefix.narrow(1, t - 1, 1).contiguous();  // (R, 1)
      h = model_.transformer->decoder->forward_step(model_.embed_tgt(last, t - 1), caches_, row_pad_).output;  // (R, 1, D)
    } else {
      Tensor causal = nn::make_causal_mask(t);                       // (t, t)
      Variable memory(rows_of(memory_.data(), source_of_));          // (R, S, D)
      h = model_.transformer->decoder->forward(model_.embed_tgt(prefix), memory, causal, Tensor(), row_pad_).output;  // (R, t, D)
    }
    return last_logits(model_.project(h));  // (R, V)
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    std::vector<int64_t> next(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) next[i] = source_of_[static_cast<size_t>(rows[i])];
    if (next != source_of_) row_pad_ = rows_of(row_pad_, rows);  // (R', S); beams reordered within a sentence keep it
    source_of_ = std::move(next);
    for (auto& c : caches_) c.select_rows(rows);
  }

  void record(DecodeStats& st, int64_t step) const override {
    st.steps = step;
    int64_t n = 0, self = 0, cross = 0;
    for (const auto& c : caches_) {
      n += c.bytes();
      self += bytes_per_position(c.self.k);
      cross += bytes_per_position(c.cross_k);
    }
    st.cache_bytes_peak = std::max(st.cache_bytes_peak, n);
    st.self_bytes_per_token = self;
    st.cross_bytes_per_src_token = cross;
  }

 private:
  const nn::Seq2SeqTransformer& model_;
  const DecodeOptions& opt_;
  std::vector<int64_t> source_of_;  // the source row of each decoding row
  Tensor row_pad_;                  // (R, S): per decoding row
  Variable memory_;                 // (B, S, D): per source
  std::vector<nn::DecoderLayerCache> caches_;
};

// The prompt "source <sep>" (no padding: every row has the same source length) is run once into
// the cache; then each step feeds the newest token.
class DecoderOnlySteps : public StepModel {
 public:
  // Each row holds its own prompt in its cache.
  DecoderOnlySteps(const nn::DecoderOnlyTransformer& model, const Tensor& src, const DecodeOptions& opt, int64_t steps)
      : model_(model), opt_(opt), src_(src) {
    if (opt.use_cache) caches_ = model.start_cache(src_.size(0), src_.size(1) + steps, cache_dtype(opt, model.emb->weight.dtype()));
  }

  Tensor next_scores(const Tensor& prefix) override {
    const int64_t R = prefix.size(0), t = prefix.size(1), S = src_.size(1);
    if (opt_.use_cache) {
      // First step: the whole prompt; later ones: the newest token at the next position.
      Tensor fresh = t == 1 ? prompt(prefix) : prefix.narrow(1, t - 1, 1).contiguous();  // (R, S+1) or (R, 1)
      return last_logits(model_.forward_cached(fresh, caches_, true));  // the projection at the newest position only
    }
    Tensor seq = Tensor::empty({R, S + t}, DType::Int64);  // (R, S+t): source, <sep>, output so far
    seq.narrow(1, 0, S).copy_(src_);
    seq.narrow(1, S, t).copy_(prefix);
    return last_logits(model_.forward(seq, true));
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    src_ = rows_of(src_, rows);
    for (auto& c : caches_) c.select_rows(rows);
  }

  void record(DecodeStats& st, int64_t step) const override {
    st.steps = step;
    int64_t n = 0, self = 0;
    for (const auto& c : caches_) n += c.bytes(), self += bytes_per_position(c.k);
    st.cache_bytes_peak = std::max(st.cache_bytes_peak, n);
    st.self_bytes_per_token = self;
    st.cross_bytes_per_src_token = 0;  // the source is in the same cache, at self_bytes_per_token each
  }

 private:
  Tensor prompt(const Tensor& prefix) const {
    Tensor p = Tensor::empty({src_.size(0), src_.size(1) + 1}, DType::Int64);  // (R, S+1)
    p.narrow(1, 0, src_.size(1)).copy_(src_);
    p.narrow(1, src_.size(1), 1).copy_(prefix.narrow(1, 0, 1));
    return p;
  }

  const nn::DecoderOnlyTransformer& model_;
  const DecodeOptions& opt_;
  Tensor src_;  // (R, S)
  std::vector<nn::KVCache> caches_;
};

// Log-probabilities from a function of each row's source and prefix (tests script a model with it).
class FunctionSteps : public StepModel {
 public:
  FunctionSteps(const NextLogProbs& next, const Tensor& src) : next_(next), src_(src) {}
  Tensor next_scores(const Tensor& prefix) override { return next_(src_, prefix); }  // (R, V)
  bool scores_are_log_probs() const override { return true; }
  void select_rows(const std::vector<int64_t>& rows) override { src_ = rows_of(src_, rows); }
  void record(DecodeStats& st, int64_t step) const override { st.steps = step; }

 private:
  const NextLogProbs& next_;
  Tensor src_;  // (R, S)
};

// Each row may emit at most its source length + max_extra tokens; returns those limits and the
// longest, the number of steps to run. Without stop_at_eos every row runs exactly `fixed_steps`
// (the whole batch's longest limit, when src is a group of its rows).
std::pair<std::vector<int64_t>, int64_t> step_limits(const Tensor& src, const DecodeOptions& opt, int64_t fixed_steps) {
  std::vector<int64_t> limit = source_lengths(src, opt.pad);
  int64_t max_steps = 0;
  for (auto& l : limit) max_steps = std::max(max_steps, l += opt.max_extra);
  if (opt.stop_at_eos) return {limit, max_steps};
  std::fill(limit.begin(), limit.end(), fixed_steps);
  return {limit, fixed_steps};
}

int64_t longest_limit(const Tensor& src, const DecodeOptions& opt) {
  int64_t longest = 0;
  for (int64_t l : source_lengths(src, opt.pad)) longest = std::max(longest, l + opt.max_extra);
  return longest;
}

// <pad> and the start token are never outputs (as in fairseq's search): a <pad> fed back would
// be masked out of the prefix as padding, and the model was never trained to predict either.
std::array<int64_t, 2> never_output(const DecodeOptions& opt) { return {opt.pad, opt.bos}; }

// Greedy's scores: the tokens never output get -inf.
void forbid_specials(Tensor& scores, const DecodeOptions& opt) {  // scores: (R, V), contiguous
  const int64_t R = scores.size(0), V = scores.size(1);
  dispatch_float(scores.dtype(), "forbid_specials", [&]<class T>() {
    T* p = scores.data<T>();
    for (int64_t r = 0; r < R; ++r)
      for (int64_t tok : never_output(opt))
        if (tok >= 0 && tok < V) p[r * V + tok] = -std::numeric_limits<T>::infinity();
  });
}

// The rows' prefixes as one (R, t+1) tensor: <bos> and the tokens so far.
template <class TokensOf>
Tensor prefix_tensor(int64_t R, int64_t t, int64_t bos, TokensOf tokens_of) {
  Tensor pre = Tensor::empty({R, t + 1}, DType::Int64);  // (R, t+1)
  for (int64_t r = 0; r < R; ++r) {
    int64_t* p = pre.data<int64_t>() + r * (t + 1);
    const std::vector<int64_t>& toks = tokens_of(r);
    p[0] = bos;
    for (int64_t j = 0; j < t; ++j) p[j + 1] = toks[j];
  }
  return pre;
}

std::vector<std::vector<int64_t>> greedy(const Tensor& src, const MakeSteps& make_steps, const DecodeOptions& opt, int64_t fixed_steps,
                                         DecodeStats* stats) {
  const int64_t B = src.size(0);
  auto [limit, max_steps] = step_limits(src, opt, fixed_steps);
  std::unique_ptr<StepModel> step = make_steps(src, max_steps + 1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B)), emitted(static_cast<size_t>(B));  // emitted: <eos> included
  std::vector<int64_t> alive = identity_rows(B);  // original row of each live row
  for (int64_t t = 0; t < max_steps && !alive.empty(); ++t) {
    const int64_t R = static_cast<int64_t>(alive.size());
    // The argmax of the logits is the argmax of the log-probabilities: no softmax needed.
    Tensor scores = step->next_scores(prefix_tensor(R, t, opt.bos, [&](int64_t r) -> const auto& { return emitted[alive[r]]; })).contiguous();  // (R, V)
    forbid_specials(scores, opt);
    if (stats) stats->steps = t + 1;
    if (stats && opt.use_cache) step->record(*stats, t + 1);
    const Tensor best_of = kernels::max(scores, 1, false).indices;  // (R,): the first best token of each row
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t best = best_of.data<int64_t>()[r], b = alive[r];
      emitted[b].push_back(best);
      if (best == opt.eos && opt.stop_at_eos) continue;
      out[b].push_back(best);
      if (static_cast<int64_t>(out[b].size()) < limit[b]) keep.push_back(r);
    }
    if (static_cast<int64_t>(keep.size()) != R) {
      std::vector<int64_t> next_alive;
      for (int64_t r : keep) next_alive.push_back(alive[r]);
      alive = next_alive;
      if (!keep.empty()) step->select_rows(keep);
    }
  }
  return out;
}

// ---------------------------------------------------------------- beam search
//
// Each sentence keeps K live hypotheses, ranked by log p, and a list of finished ones, ranked by
// score(). Each step the live ones propose their best tokens; taken best first, a candidate that
// ends in <eos> or reaches the length limit is finished and the first K others stay live, so a
// finished hypothesis never takes a live one's place. A sentence stops when no live hypothesis can
// still finish above the best finished one: with a length penalty a longer hypothesis may score
// higher than a shorter one of higher log p, so K finished hypotheses are not a reason to stop.
// Under BeamStop::Heuristic it also stops once K are finished and no live one scores, as it is
// now, above the K-th best of them (a live one would need tokens likelier than its own average
// so far to climb).
// (Above 1 the penalty makes every hypothesis' score rise towards 0 as it grows, so the search
// prefers ever longer outputs, up to the limit: use 1 or less.)

struct Hypothesis {
  std::vector<int64_t> tokens;  // after <bos>, without <eos>
  double log_prob = 0;
};

// What beam search maximises: log p / (tokens + 1)^length_penalty, the +1 counting <eos>.
double score(double log_prob, int64_t tokens, double length_penalty) {
  return log_prob / std::pow(static_cast<double>(tokens + 1), length_penalty);
}
double score(const Hypothesis& h, double length_penalty) {
  return score(h.log_prob, static_cast<int64_t>(h.tokens.size()), length_penalty);
}

// The highest score a live hypothesis can still finish with. More tokens only lower log p (<= 0),
// so the best it can do is keep log p and end at the length whose divisor is largest; the divisor
// is monotonic in length, so that is its own length or the limit (which, for a positive penalty,
// makes this bound loose: the search stops once log p has fallen far enough).
double best_reachable(const Hypothesis& h, int64_t limit, double length_penalty) {
  return std::max(score(h, length_penalty), score(h.log_prob, limit, length_penalty));
}

// One live hypothesis per cache row: which sentence it belongs to and its place in that beam.
struct LiveRow {
  int64_t sentence, beam;
};

struct Candidate {
  double log_prob;
  int64_t row, token;
};

// A token and its log-probability (a float32 model's float32 value, held exactly).
using Scored = kernels::ScoredToken;

// The best continuations of sentence b's live rows (one row per hypothesis): each row's K+1 best
// tokens are enough, since at most one of them is <eos> and the sentence keeps K others. Best
// first. tops[r] holds row r's K+1 best tokens (kernels::top_tokens).
std::vector<Candidate> candidates(int64_t b, const std::vector<LiveRow>& live, const std::vector<Hypothesis>& beam,
                                  const std::vector<std::vector<Scored>>& tops) {
  std::vector<Candidate> out;
  for (size_t r = 0; r < live.size(); ++r) {
    if (live[r].sentence != b) continue;
    const Hypothesis& h = beam[static_cast<size_t>(live[r].beam)];
    for (const Scored& t : tops[r])
      if (t.log_prob > -INFINITY) out.push_back({h.log_prob + t.log_prob, static_cast<int64_t>(r), t.token});  // not a forbidden token
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& c) { return a.log_prob > c.log_prob; });
  return out;
}

// One step of one sentence: takes the candidates best first until K stay live; those ending in
// <eos> (or at `limit` tokens) before that go to `finished`. Returns the new live hypotheses and
// appends, for each, the cache row it continues to `rows`.
std::vector<Hypothesis> extend(const std::vector<Candidate>& cands, const std::vector<Hypothesis>& beam, const std::vector<LiveRow>& live,
                               int64_t K, int64_t limit, int64_t eos, std::vector<Hypothesis>& finished, std::vector<int64_t>& rows) {
  std::vector<Hypothesis> next;
  for (const Candidate& c : cands) {
    if (static_cast<int64_t>(next.size()) >= K) break;
    Hypothesis h{beam[static_cast<size_t>(live[c.row].beam)].tokens, c.log_prob};
    if (c.token != eos) h.tokens.push_back(c.token);
    if (c.token == eos || static_cast<int64_t>(h.tokens.size()) >= limit) {
      finished.push_back(std::move(h));
      continue;
    }
    next.push_back(std::move(h));
    rows.push_back(c.row);
  }
  return next;
}

// Whether every live hypothesis's value(h) is at most `bar`.
template <class Value>
bool none_above(const std::vector<Hypothesis>& live, double bar, Value value) {
  return std::none_of(live.begin(), live.end(), [&](const Hypothesis& h) { return value(h) > bar; });
}

// Done when a finished hypothesis scores at least what every live one can still reach (live ones
// dropped then could not have won); or, under the heuristic, when K are finished and the K-th
// best of them scores at least what every live one scores now.
bool can_stop(const std::vector<Hypothesis>& finished, const std::vector<Hypothesis>& live, int64_t limit, const DecodeOptions& opt) {
  if (finished.empty()) return false;
  const double lp = opt.length_penalty;
  std::vector<double> scores;  // finished, best first
  for (const Hypothesis& h : finished) scores.push_back(score(h, lp));
  std::sort(scores.begin(), scores.end(), std::greater<>());
  if (none_above(live, scores.front(), [&](const Hypothesis& h) { return best_reachable(h, limit, lp); })) return true;
  const auto K = static_cast<size_t>(opt.beam);
  return opt.beam_stop == BeamStop::Heuristic && scores.size() >= K &&
         none_above(live, scores[K - 1], [&](const Hypothesis& h) { return score(h, lp); });
}

std::vector<std::vector<int64_t>> beam_search(const Tensor& src, const MakeSteps& make_steps, const DecodeOptions& opt, DecodeStats* stats) {
  const int64_t B = src.size(0), K = opt.beam;
  auto [limit, max_steps] = step_limits(src, opt, 0);  // beam search always stops at <eos>
  // One row per sentence at first, its one empty hypothesis: the first step runs B rows, not
  // B * K copies of the same one; select_rows then gives each new hypothesis its row.
  std::unique_ptr<StepModel> step = make_steps(src, max_steps + 1);
  std::vector<std::vector<Hypothesis>> beams(static_cast<size_t>(B), std::vector<Hypothesis>(1)), finished(static_cast<size_t>(B));
  std::vector<LiveRow> live;  // one per cache row
  for (int64_t b = 0; b < B; ++b) live.push_back({b, 0});
  for (int64_t t = 0; t < max_steps && !live.empty(); ++t) {
    const int64_t R = static_cast<int64_t>(live.size());
    const Tensor scores = step->next_scores(prefix_tensor(R, t, opt.bos, [&](int64_t r) -> const auto& {
                            return beams[live[r].sentence][live[r].beam].tokens;
                          })).contiguous();  // (R, V)
    if (stats) stats->steps = t + 1;
    if (stats && opt.use_cache) step->record(*stats, t + 1);
    // Each row's K + 1 best tokens, found for all rows at once on the threads: a pass over the
    // vocabulary per row is most of the search's own work. A token's log-probability is x - shift,
    // log_softmax's own arithmetic (the same bits), computed only where the scan looks: the (R, V)
    // log-probabilities are never written. <pad> and <bos> are never taken (never_output).
    const int64_t V = scores.size(1);
    const bool normalise = !step->scores_are_log_probs();
    std::vector<std::vector<Scored>> tops(static_cast<size_t>(R));
    const auto never = never_output(opt);
    dispatch_float(scores.dtype(), "beam_search", [&]<class T>() {
      parallel_for(R, row_grain(4 * V), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T* x = scores.data<T>() + r * V;
          const T shift = normalise ? kernels::log_softmax_shift(x, V) : T(0);
          tops[r] = kernels::top_tokens(x, V, shift, K + 1, never);
        }
      });
    });
    std::vector<int64_t> keep_rows;
    std::vector<LiveRow> next_live;
    std::vector<std::vector<Hypothesis>> next_beams(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> rows_b;  // this sentence's rows for the next step
      next_beams[b] = extend(candidates(b, live, beams[b], tops), beams[b], live, K, limit[b], opt.eos, finished[b], rows_b);
      if (can_stop(finished[b], next_beams[b], limit[b], opt)) {
        next_beams[b].clear();
        continue;
      }
      for (size_t k = 0; k < rows_b.size(); ++k) {
        keep_rows.push_back(rows_b[k]);
        next_live.push_back({b, static_cast<int64_t>(k)});
      }
    }
    beams = std::move(next_beams);
    live = std::move(next_live);
    if (!keep_rows.empty()) step->select_rows(keep_rows);
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto& pool = finished[b];
    for (auto& h : beams[b]) pool.push_back(h);  // still live: only when the limit allowed no step at all
    if (pool.empty()) continue;
    auto best = std::max_element(pool.begin(), pool.end(), [&](const Hypothesis& a, const Hypothesis& c) {
      return score(a, opt.length_penalty) < score(c, opt.length_penalty);
    });
    out[b] = best->tokens;
  }
  return out;
}

void check_request(const Tensor& src, const DecodeOptions& opt) {
  check_dtype(src, DType::Int64, "translate_batch");
  GF_CHECK(src.ndim() == 2, "translate_batch: src must be (B, S), got {}", shape_str(src.shape()));
  GF_CHECK(opt.beam >= 1 && opt.beam <= kMaxBeam, "translate_batch: beam must be 1 to {}, got {}", kMaxBeam, opt.beam);
  GF_CHECK(opt.beam == 1 || opt.stop_at_eos, "translate_batch: stop_at_eos = false is for greedy decoding only, got beam {}", opt.beam);
}

std::vector<std::vector<int64_t>> decode_group(const Tensor& src, const MakeSteps& make_steps, const DecodeOptions& opt, int64_t fixed_steps,
                                               DecodeStats* stats) {
  return opt.beam == 1 ? greedy(src, make_steps, opt, fixed_steps, stats) : beam_search(src, make_steps, opt, stats);
}

// Sentences per decoding group at most (see decode()).
constexpr int64_t kGroupSentences = 32;

// Concurrent groups' statistics as one batch's: their caches are alive together.
DecodeStats merged(const std::vector<DecodeStats>& parts) {
  DecodeStats st = parts.front();
  st.cache_bytes_peak = 0;
  for (const DecodeStats& p : parts) {
    st.steps = std::max(st.steps, p.steps);
    st.cache_bytes_peak += p.cache_bytes_peak;
  }
  return st;
}

// A batch of more than kGroupSentences sentences is decoded as independent groups of its rows,
// split evenly, side by side on the threads: each thread runs whole steps of its own group, so no
// step waits at the ends of the ~40 parallel loops a step has when one batch is cut across the
// threads (a thread then idled ~20% of a step). But each thread then packs every weight for its
// own products: with row-major weights that cost what the waiting saved, and only with the
// column-major layout (nn/decode_layout.h), cheaper to pack, did groups pay. Greedy, batches of
// 64, 2 threads, medians of 4 alternated runs: one batch 245.0 sentences/s, the layout alone
// 256.3, groups alone 240.0, both 272.7. A group's 32 rows also let OpenBLAS's AVX-512 kernels
// skip packing altogether (decode_column_block), which made up for two groups of 32 on one
// thread. The groups depend on B alone, so the output does not depend on the thread count.
// `grouped` false (scripted models, which may not be thread-safe) keeps one batch.
std::vector<std::vector<int64_t>> decode(const Tensor& src, const MakeSteps& make_steps, const DecodeOptions& opt, DecodeStats* stats,
                                         bool grouped = true) {
  const int64_t B = src.size(0), groups = grouped ? (B + kGroupSentences - 1) / kGroupSentences : 1;
  const int64_t fixed_steps = longest_limit(src, opt);  // fixed-length greedy: the whole batch's
  if (groups <= 1) return decode_group(src, make_steps, opt, fixed_steps, stats);
  const std::vector<int64_t> lengths = source_lengths(src, opt.pad);
  std::vector<std::vector<std::vector<int64_t>>> outs(static_cast<size_t>(groups));
  std::vector<DecodeStats> group_stats(static_cast<size_t>(groups));
  parallel_tasks(groups, [&](int64_t g) {
    NoGradGuard ng;  // grad mode is per thread, and this may be a worker
    std::vector<int64_t> rows;
    int64_t width = 1;  // the group's longest source: no encoder work on the batch's longer padding
    for (int64_t b = g * B / groups; b < (g + 1) * B / groups; ++b) {
      rows.push_back(b);
      width = std::max(width, lengths[b]);
    }
    outs[g] = decode_group(rows_of(src, rows).narrow(1, 0, width).contiguous(), make_steps, opt, fixed_steps, &group_stats[g]);  // (rows, width)
  });
  if (stats) *stats = merged(group_stats);
  std::vector<std::vector<int64_t>> out;
  for (auto& part : outs)
    for (auto& hyp : part) out.push_back(std::move(hyp));
  return out;
}

// What a decoding call holds while it runs: no graph; a step's linears, which have few rows, cut
// by columns; under bf16 each weight rounded once for the batch, not at every step.
struct DecodingScope {
  NoGradGuard no_grad;
  kernels::SmallRowsGemmScope gemms;
  kernels::Bf16WeightCache bf16_weights;
};

}  // namespace

DType cache_dtype(const DecodeOptions& opt, DType model) {
  if (opt.kv_cache) return *opt.kv_cache;
  return kernels::bf16_products(model) ? DType::BFloat16 : model;  // the keys and values come from bf16 products already
}

std::vector<std::vector<int64_t>> translate_batch(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                                  DecodeStats* stats) {
  check_request(src, opt);
  DecodingScope scope;
  if (src.size(0) == 0) return {};
  MakeSteps make = [&](const Tensor& rows, int64_t steps) { return std::make_unique<EncoderDecoderSteps>(model, rows, opt, steps); };
  return decode(src, make, opt, stats);
}

std::vector<std::vector<int64_t>> translate_batch(const nn::DecoderOnlyTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                                  DecodeStats* stats) {
  check_request(src, opt);
  DecodingScope scope;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(src.size(0)));
  // Rows grouped by source length: each group's prompts have no padding.
  std::map<int64_t, std::vector<int64_t>> groups;
  const std::vector<int64_t> lengths = source_lengths(src, opt.pad);
  for (int64_t b = 0; b < src.size(0); ++b) groups[lengths[b]].push_back(b);
  for (const auto& [S, rows] : groups) {
    if (S == 0) continue;  // an empty source: nothing to translate
    DecodeOptions o = opt;
    // The positions of prompt and output must fit the table.
    o.max_extra = std::min(opt.max_extra, model.options().max_len - 1 - 2 * S);
    GF_CHECK(o.max_extra >= 1 - S, "translate_batch: a source of {} tokens leaves no room in the decoder-only model's {} positions", S,
             model.options().max_len);
    Tensor part = rows_of(src, rows).narrow(1, 0, S).contiguous();  // (R, S)
    MakeSteps make = [&](const Tensor& r, int64_t steps) { return std::make_unique<DecoderOnlySteps>(model, r, o, steps); };
    DecodeStats st;
    auto hyps = decode(part, make, o, &st);
    if (stats) {
      stats->steps += st.steps;
      stats->cache_bytes_peak = std::max(stats->cache_bytes_peak, st.cache_bytes_peak);
      stats->self_bytes_per_token = st.self_bytes_per_token;
    }
    for (size_t i = 0; i < rows.size(); ++i) out[rows[i]] = std::move(hyps[i]);
  }
  return out;
}

std::vector<std::vector<int64_t>> translate_batch_with(const NextLogProbs& next, const Tensor& src, const DecodeOptions& opt) {
  check_request(src, opt);
  if (src.size(0) == 0) return {};
  MakeSteps make = [&](const Tensor& rows, int64_t) { return std::make_unique<FunctionSteps>(next, rows); };
  return decode(src, make, opt, nullptr, /*grouped=*/false);
}

}  // namespace gf::train

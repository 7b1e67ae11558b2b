// Lab `exposure`: exposure bias, and scheduled sampling against it (Bengio et al. 2015,
// arXiv:1506.03099).
//
// The paper: a model trained with teacher forcing always sees the true previous token, but at
// inference it sees its own; an early mistake is fed back as input, the model may then be in a part
// of its state space training never showed it, and errors accumulate along the sequence. Scheduled
// sampling feeds the model its own predictions during training, more and more of them, so that it
// learns to deal with its mistakes.
//
// Here, on small English -> Korean translators (one set per seed, each on a corpus drawn by its
// seed; lab/trained_model.h), each trained until its held-out loss stops improving (a stated rule,
// the same for every arm) and kept at its best free-running (greedy) accuracy on held-out pairs
// (--select), at each level of the dose-response --ss-rates: the speed 100/k of scheduled
// sampling's decay (lab/common.h), 0 for teacher forcing:
// 1. per target position, the accuracy of the next token teacher-forced (true prefix) against
//    free-running (greedy, the model's own prefix, compared position by position with the
//    reference);
// 2. for each test sentence, one step k (drawn at random) where the true prefix is followed by a
//    wrong token (the model's best-scoring token other than the reference's: a mistake the model
//    could make), then greedy decoding onwards, against greedy decoding from the same true prefix.
//    At each later step k + d: the share of tokens that differ between the two continuations, each
//    continuation's error rate against the reference, and the total variation distance between
//    their cross-attention rows (mean over layers and heads).
// The scheduled-sampling claims are the trends of the late-half gap and of the derailment on 100/k.
// With --data DIR (lab/real_data.h) the translators are trained on that task instead (Multi30k's
// German -> English, say), each seed its own weights and batch order on the same data.
// --control: the placebo, teacher-forced models of different seeds in the levels' places.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "lab/trained_model.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"
#include "train/decode/decode.h"
#include "train/eval/bleu.h"

namespace gf::lab {
namespace {

using train::Vocab;

// ---------------------------------------------------------------- 1. per-position accuracy

double ratio(int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : NAN; }

// BLEU by position: each reference's tokens (<eos> left out) cut into thirds of its own length, and
// each hypothesis's tokens at the same positions (a free-running output's tokens past the
// reference's end in the last third). Corpus BLEU per third (token ids as words, no tokeniser) for
// the teacher-forced predictions (true prefix) and the free-running output.
constexpr int kThirds = 3;
struct ThirdsText {
  std::array<std::vector<std::string>, kThirds> tf, fr, ref;  // per third, one segment per sentence whose third is not empty
};

size_t third_of(size_t j, size_t len) { return std::min<size_t>(kThirds - 1, j * kThirds / len); }

void add_thirds(ThirdsText& t, const std::vector<int64_t>& ref, const std::vector<int64_t>& tf, const std::vector<int64_t>& fr) {
  std::array<std::string, kThirds> r, a, b;
  auto put = [](std::string& s, int64_t id) { s += (s.empty() ? "" : " ") + std::to_string(id); };
  for (size_t j = 0; j < ref.size(); ++j) put(r[third_of(j, ref.size())], ref[j]), put(a[third_of(j, ref.size())], tf[j]);
  for (size_t j = 0; j < fr.size(); ++j) put(b[third_of(j, ref.size())], fr[j]);
  for (int k = 0; k < kThirds; ++k)
    if (!r[k].empty()) t.ref[k].push_back(r[k]), t.tf[k].push_back(a[k]), t.fr[k].push_back(b[k]);
}

struct PositionCounts {
  std::vector<int64_t> total, tf_right, fr_right;  // per target position (the <eos> position included)
  int64_t sentences = 0, exact = 0;                // free-running translations equal to the reference
  std::array<double, kThirds> tf_bleu{}, fr_bleu{};  // BLEU per third of the sentence (ThirdsText)
  void grow(size_t n) {
    if (total.size() < n) total.resize(n), tf_right.resize(n), fr_right.resize(n);
  }
};

// Teacher-forced and free-running correctness at every reference position of the first n pairs.
PositionCounts per_position(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t n) {
  NoGradGuard ng;
  PositionCounts c;
  ThirdsText thirds;
  train::DecodeOptions greedy;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    const train::Batch b = train::collate(pairs, part);
    const train::BatchTensors t = train::to_tensors(b);
    const Tensor logits = model.forward(t.src, t.tgt_in).data().to(DType::Float64).contiguous();  // (B, T, V)
    const int64_t T = logits.size(1), V = logits.size(2);
    const auto hyps = train::translate_batch(model, t.src, greedy);
    for (size_t r = 0; r < part.size(); ++r) {
      std::vector<int64_t> ref = pairs[part[r]].tgt, hyp = hyps[r];
      ref.push_back(Vocab::kEos);
      hyp.push_back(Vocab::kEos);  // translate_batch drops it; a run that never stopped then ends wrong here
      c.grow(ref.size());
      c.sentences += 1, c.exact += hyp == ref;
      std::vector<int64_t> tf(ref.size());
      for (size_t j = 0; j < ref.size(); ++j) {
        const double* row = logits.data<double>() + (static_cast<int64_t>(r) * T + static_cast<int64_t>(j)) * V;
        tf[j] = std::max_element(row, row + V) - row;
        c.total[j] += 1;
        c.tf_right[j] += tf[j] == ref[j];
        c.fr_right[j] += j < hyp.size() && hyp[j] == ref[j];
      }
      if (pairs[part[r]].tgt.empty()) continue;  // no real token to cut into thirds
      const std::vector<int64_t>& words = pairs[part[r]].tgt;  // the reference without <eos>, which BLEU leaves out
      add_thirds(thirds, words, std::vector<int64_t>(tf.begin(), tf.begin() + std::ssize(words)), hyps[r]);
    }
  }
  for (int k = 0; k < kThirds; ++k) {
    c.tf_bleu[k] = thirds.ref[k].empty() ? NAN : corpus_bleu(thirds.tf[k], thirds.ref[k], "none").score;
    c.fr_bleu[k] = thirds.ref[k].empty() ? NAN : corpus_bleu(thirds.fr[k], thirds.ref[k], "none").score;
  }
  return c;
}

// ---------------------------------------------------------------- 2. a forced error

// Greedy continuation of each row's prefix (rows of one length, the same source), recomputing the
// prefix every step. Returns each row's prefix plus its continuation, up to and including <eos>.
std::vector<std::vector<int64_t>> continue_greedy(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src,
                                                  std::vector<std::vector<int64_t>> rows, int64_t max_len) {
  NoGradGuard ng;
  const int64_t B = static_cast<int64_t>(rows.size()), S = static_cast<int64_t>(src.size());
  std::vector<int64_t> srcs;
  for (int64_t b = 0; b < B; ++b) srcs.insert(srcs.end(), src.begin(), src.end());
  const Tensor src_t = Tensor::from_vector(srcs, {B, S});  // (B, S)
  std::vector<bool> done(static_cast<size_t>(B), false);
  for (int64_t len = static_cast<int64_t>(rows[0].size()); len < max_len; ++len) {
    std::vector<int64_t> ids;
    for (const auto& r : rows) ids.insert(ids.end(), r.begin(), r.end());
    const Tensor logits = model.forward(src_t, Tensor::from_vector(ids, {B, len})).data();  // (B, len, V)
    const Tensor last = logits.narrow(1, len - 1, 1).to(DType::Float64).contiguous();        // (B, 1, V)
    const int64_t V = last.size(2);
    for (int64_t b = 0; b < B; ++b) {
      const double* row = last.data<double>() + b * V;
      const int64_t next = done[b] ? Vocab::kPad : std::max_element(row, row + V) - row;
      rows[b].push_back(next);
      done[b] = done[b] || next == Vocab::kEos;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  for (auto& r : rows)
    while (r.back() == Vocab::kPad) r.pop_back();
  return rows;
}

// Cross-attention of a teacher-forced sequence (<bos> + tokens[:-1]), mean over layers and heads:
// (len, S), row j is the attention of the query that predicts tokens[j].
std::vector<std::vector<double>> cross_rows(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& tokens) {
  NoGradGuard ng;
  std::vector<int64_t> in{Vocab::kBos};
  in.insert(in.end(), tokens.begin(), tokens.end() - 1);
  const int64_t S = static_cast<int64_t>(src.size()), T = static_cast<int64_t>(in.size());
  nn::DecoderOutput d = model.forward_with_attention(Tensor::from_vector(src, {1, S}), Tensor::from_vector(in, {1, T}));
  std::vector<std::vector<double>> rows(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(S), 0.0));
  for (const Variable& w : d.cross_weights) {
    const Tensor a = w.data().to(DType::Float64).contiguous();  // (1, H, T, S)
    const int64_t H = a.size(1);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < T; ++j)
        for (int64_t s = 0; s < S; ++s)
          rows[j][s] += a.data<double>()[(h * T + j) * S + s] / static_cast<double>(H * static_cast<int64_t>(d.cross_weights.size()));
  }
  return rows;
}

// Levenshtein distance between token sequences (insert, delete, substitute: 1 each).
int64_t edit_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return 0.5 * s;
}

// The model's best token at step k after the true prefix, other than the reference's and the specials.
int64_t runner_up(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& prefix, int64_t avoid) {
  NoGradGuard ng;
  const int64_t S = static_cast<int64_t>(src.size()), L = static_cast<int64_t>(prefix.size());
  const Tensor logits = model.forward(Tensor::from_vector(src, {1, S}), Tensor::from_vector(prefix, {1, L})).data();  // (1, L, V)
  const Tensor last = logits.narrow(1, L - 1, 1).to(DType::Float64).contiguous();                                   // (1, 1, V)
  const int64_t V = last.size(2);
  int64_t best = -1;
  for (int64_t v = 4; v < V; ++v)  // ids 0-3 are <pad> <unk> <bos> <eos>
    if (v != avoid && (best < 0 || last.data<double>()[v] > last.data<double>()[best])) best = v;
  return best;
}

// Per offset d = 1 .. D after the forced step.
struct Drift {
  std::vector<int64_t> both, changed;                 // steps where either run has a token; of them, tokens that differ
  std::vector<int64_t> ref_steps, err_clean, err_forced;  // steps with a reference token; errors of each run there
  std::vector<double> tv_sum;                         // summed TV distance of the two runs' rows (both have a token)
  std::vector<int64_t> tv_n;
  std::vector<double> tv_same_sum;                    // the same, where the two tokens agree
  std::vector<int64_t> tv_same_n;
  double step_tv_sum = 0;                             // clean run: TV between consecutive rows, for scale
  int64_t step_tv_n = 0;
  // Alignment-free: token edit distance of each continuation after step k to the reference's rest.
  int64_t sentences = 0, suffix_tokens = 0;           // sentences; reference tokens after step k (with <eos>)
  int64_t edits_clean = 0, edits_forced = 0;          // summed edit distances
  int64_t exact_clean = 0, exact_forced = 0;          // continuations at distance 0 (recovered)
  explicit Drift(size_t D)
      : both(D), changed(D), ref_steps(D), err_clean(D), err_forced(D), tv_sum(D), tv_n(D), tv_same_sum(D), tv_same_n(D) {}
};

struct Example {
  std::vector<int64_t> src, clean, forced;
  std::vector<std::vector<double>> clean_rows, forced_rows;
  int64_t k = -1;
  size_t index = 0;                // which test sentence
  std::vector<int64_t> reference;  // the reference translation, ending with <eos>
};

// One sentence's forced error at step k, added into the drift counts.
void force_one(const nn::Seq2SeqTransformer& model, const train::EncodedPair& pair, int64_t k, Drift& dr, Example* keep) {
  std::vector<int64_t> ref = pair.tgt;
  ref.push_back(Vocab::kEos);
  std::vector<int64_t> prefix{Vocab::kBos};
  prefix.insert(prefix.end(), ref.begin(), ref.begin() + k);  // <bos> + the true tokens before step k
  std::vector<int64_t> forced = prefix;
  forced.push_back(runner_up(model, pair.src, prefix, ref[k]));
  const int64_t max_len = static_cast<int64_t>(ref.size()) + 10;
  const std::vector<int64_t> clean_run = continue_greedy(model, pair.src, {prefix}, max_len)[0];
  const std::vector<int64_t> forced_run = continue_greedy(model, pair.src, {forced}, max_len)[0];
  // Drop <bos>: index j is step j.
  const std::vector<int64_t> a(clean_run.begin() + 1, clean_run.end()), b(forced_run.begin() + 1, forced_run.end());
  const auto ra = cross_rows(model, pair.src, a), rb = cross_rows(model, pair.src, b);
  for (size_t j = 1; j < ra.size(); ++j) dr.step_tv_sum += total_variation(ra[j], ra[j - 1]), ++dr.step_tv_n;
  for (size_t d = 1; d <= dr.both.size(); ++d) {
    const size_t j = static_cast<size_t>(k) + d;
    const bool ha = j < a.size(), hb = j < b.size();
    if (ha || hb) {
      dr.both[d - 1] += 1;
      const bool differ = ha != hb || a[j] != b[j];
      dr.changed[d - 1] += differ;
      if (ha && hb) {
        const double tv = total_variation(ra[j], rb[j]);
        dr.tv_sum[d - 1] += tv, dr.tv_n[d - 1] += 1;
        if (!differ) dr.tv_same_sum[d - 1] += tv, dr.tv_same_n[d - 1] += 1;
      }
    }
    if (j < ref.size()) {
      dr.ref_steps[d - 1] += 1;
      dr.err_clean[d - 1] += !(ha && a[j] == ref[j]);
      dr.err_forced[d - 1] += !(hb && b[j] == ref[j]);
    }
  }
  // Generous to recovery: a continuation may redo step k or carry on as if it had been right, so it is
  // compared with the nearer of the reference from step k and from step k + 1.
  auto from = [](const std::vector<int64_t>& v, int64_t i) { return std::vector<int64_t>(v.begin() + std::min<int64_t>(i, static_cast<int64_t>(v.size())), v.end()); };
  const auto ref_k = from(ref, k), ref_k1 = from(ref, k + 1), a_tail = from(a, k + 1), b_tail = from(b, k + 1);
  auto distance = [&](const std::vector<int64_t>& tail) { return std::min(edit_distance(tail, ref_k), edit_distance(tail, ref_k1)); };
  dr.sentences += 1;
  dr.suffix_tokens += static_cast<int64_t>(ref_k1.size());
  const int64_t ea = distance(a_tail), eb = distance(b_tail);
  dr.edits_clean += ea, dr.edits_forced += eb;
  dr.exact_clean += ea == 0, dr.exact_forced += eb == 0;
  if (keep) *keep = {pair.src, a, b, ra, rb, k, 0, ref};
}

// ---------------------------------------------------------------- one model

// The arms are the levels of the dose-response, the schedule's speed 100/k (--ss-rates): level 0 is
// teacher forcing (rate 0, k infinite), the others scheduled sampling at k = 100 / rate.
constexpr size_t kTeacher = 0;

std::string level_name(double rate) { return rate == 0 ? std::string("teacher forcing") : fmt::format("SS k {:g}", 100 / rate); }
const char* const kLevelColors[] = {"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b"};
const char* level_color(size_t level) { return kLevelColors[level % (sizeof(kLevelColors) / sizeof(kLevelColors[0]))]; }

struct SeedResult {
  PositionCounts pos;
  Drift drift{0};
  Example example, derailed;  // the --show sentence; the first from it on whose later tokens change
  double tf_accuracy = 0, fr_tokens = 0, fr_exact = 0;
};

SeedResult run_seed(const TrainedModel& tm, size_t n, int64_t D, uint64_t seed, size_t show) {
  SeedResult res;
  const nn::Seq2SeqTransformer& model = *tm.model;
  res.pos = per_position(model, tm.test, n);
  int64_t tot = 0, tf = 0, fr = 0;
  for (size_t j = 0; j < res.pos.total.size(); ++j) tot += res.pos.total[j], tf += res.pos.tf_right[j], fr += res.pos.fr_right[j];
  res.tf_accuracy = static_cast<double>(tf) / static_cast<double>(tot);
  res.fr_tokens = static_cast<double>(fr) / static_cast<double>(tot);
  res.fr_exact = ratio(res.pos.exact, res.pos.sentences);
  res.drift = Drift(static_cast<size_t>(D));
  Generator gen(seed * 7919 + 17);  // the forced step of each sentence: the same at every level
  for (size_t i = 0; i < n; ++i) {
    const int64_t len = static_cast<int64_t>(tm.test[i].tgt.size());  // the step is in [0, len - 1]: a real token, not <eos>
    const int64_t k = static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(len)));
    Example ex;
    const bool look = i >= show && res.derailed.k < 0;
    force_one(model, tm.test[i], k, res.drift, i == show || look ? &ex : nullptr);
    ex.index = i;
    auto after_k = [k](const std::vector<int64_t>& v) { return std::vector<int64_t>(v.begin() + std::min<int64_t>(k + 1, std::ssize(v)), v.end()); };
    if (look && after_k(ex.clean) != after_k(ex.forced)) res.derailed = ex;
    if (i == show) res.example = std::move(ex);
  }
  return res;
}

// ---------------------------------------------------------------- statistics

// The accuracy gap (teacher-forced minus free-running), pooled over positions [from, to).
double pooled_gap(const PositionCounts& c, size_t from, size_t to) {
  int64_t tot = 0, tf = 0, fr = 0;
  for (size_t j = from; j < std::min(to, c.total.size()); ++j) tot += c.total[j], tf += c.tf_right[j], fr += c.fr_right[j];
  return tot ? static_cast<double>(tf - fr) / static_cast<double>(tot) : NAN;
}

// Error rates in the first `d` steps after k, pooled: {after the forced token, from the true prefix}.
std::pair<double, double> error_rates(const Drift& x, int64_t d) {
  int64_t ef = 0, ec = 0, n = 0;
  for (int64_t i = 0; i < std::min<int64_t>(d, static_cast<int64_t>(x.ref_steps.size())); ++i)
    ef += x.err_forced[i], ec += x.err_clean[i], n += x.ref_steps[i];
  return {ratio(ef, n), ratio(ec, n)};
}

constexpr int64_t kDerailSteps = 3;  // derailment: the error rate in the 3 steps after the forced token

double derailment(const Drift& x) {
  const auto [f, c] = error_rates(x, kDerailSteps);
  return f - c;
}

// res[level][seed]; positions: those every model has at least min_support sentences at.
using Results = std::vector<std::vector<SeedResult>>;

size_t common_positions(const Results& res, int64_t min_support) {
  size_t P = SIZE_MAX;
  for (const auto& arm : res)
    for (const auto& s : arm) {
      size_t p = 0;
      while (p < s.pos.total.size() && s.pos.total[p] >= min_support) ++p;
      P = std::min(P, p);
    }
  return P;
}

// ---------------------------------------------------------------- report

struct PositionSeries {
  std::vector<double> xs;
  std::vector<std::vector<Spread>> tf, fr, gap;  // per level, per position: over the seeds
};

// The gap in BLEU, by third of the sentence (PositionCounts::tf_bleu, fr_bleu): reported, not claimed.
void bleu_thirds_table(Report& r, const Results& res, const std::vector<double>& rates) {
  r.section("corpus BLEU by third of each reference (token ids as words; <eos> left out): teacher-forced predictions vs free-running output; "
            "means over seeds");
  std::vector<std::string> cols{"third"};
  for (double rate : rates) cols.insert(cols.end(), {level_name(rate) + ": teacher-forced", "free-running", "gap"});
  Table t("bleu by third", cols);
  const char* names[kThirds] = {"first", "middle", "last"};
  for (int k = 0; k < kThirds; ++k) {
    std::vector<Cell> row{std::string(names[k])};
    for (const auto& level : res) {
      std::vector<double> tf, fr;
      for (const auto& s : level) tf.push_back(s.pos.tf_bleu[k]), fr.push_back(s.pos.fr_bleu[k]);
      row.insert(row.end(), {spread(tf).mean, spread(fr).mean, spread(tf).mean - spread(fr).mean});
    }
    t.row(row);
  }
  r.print(t);
  r.say("Exposure bias reads as a gap that widens from the first third to the last; BLEU here is reported, not claimed.");
}

PositionSeries position_section(Report& r, const Results& res, const std::vector<double>& rates, size_t P, int64_t min_support) {
  PositionSeries ps;
  ps.tf.resize(res.size()), ps.fr.resize(res.size()), ps.gap.resize(res.size());
  r.section(fmt::format("next-token accuracy per target position: teacher-forced (true prefix) vs free-running (own prefix); positions with >= {} "
                        "sentences in every model; means over seeds",
                        min_support));
  std::vector<std::string> cols{"position", "sentences"};
  for (double rate : rates) {
    const std::string n = level_name(rate);
    cols.insert(cols.end(), {n + ": teacher-forced", "free-running", "gap"});
  }
  Table t("positions", cols);
  for (size_t j = 0; j < P; ++j) {
    int64_t sentences = 0;
    for (const auto& s : res[kTeacher]) sentences += s.pos.total[j];
    std::vector<Cell> row{static_cast<int64_t>(j), sentences};
    for (size_t l = 0; l < res.size(); ++l) {
      std::vector<double> tf, fr, gap;
      for (const auto& s : res[l]) {
        tf.push_back(ratio(s.pos.tf_right[j], s.pos.total[j]));
        fr.push_back(ratio(s.pos.fr_right[j], s.pos.total[j]));
        gap.push_back(tf.back() - fr.back());
      }
      ps.tf[l].push_back(spread(tf)), ps.fr[l].push_back(spread(fr)), ps.gap[l].push_back(spread(gap));
      row.insert(row.end(), {ps.tf[l].back().mean, ps.fr[l].back().mean, ps.gap[l].back().mean});
    }
    t.row(row);
    ps.xs.push_back(static_cast<double>(j));
  }
  r.print(t);
  r.say("sentences: summed over the seeds' test sets. Position j is the j-th target token (a sentence's last one is <eos>).");
  bleu_thirds_table(r, res, rates);
  return ps;
}

struct DriftSeries {
  std::vector<double> ds;
  std::vector<std::vector<double>> e_forced, e_clean, changed, tv;  // per level, per offset
};

DriftSeries drift_section(Report& r, const Results& res, const std::vector<double>& rates, int64_t D) {
  DriftSeries dr;
  dr.e_forced.resize(res.size()), dr.e_clean.resize(res.size()), dr.changed.resize(res.size()), dr.tv.resize(res.size());
  r.section("a wrong token forced at one step k, then greedy decoding, against greedy decoding from the same true prefix (means over seeds)");
  std::vector<std::string> cols{"offset d"};
  for (double rate : rates) cols.insert(cols.end(), {level_name(rate) + ": tokens changed", "error, forced", "error, clean", "TV of attention rows"});
  Table f("forced", cols);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<Cell> row{d + 1};
    for (size_t arm = 0; arm < res.size(); ++arm) {
      std::vector<double> ch, ef, ec, v;
      for (const auto& s : res[arm]) {
        const Drift& x = s.drift;
        ch.push_back(ratio(x.changed[d], x.both[d]));
        ef.push_back(ratio(x.err_forced[d], x.ref_steps[d]));
        ec.push_back(ratio(x.err_clean[d], x.ref_steps[d]));
        v.push_back(x.tv_n[d] ? x.tv_sum[d] / static_cast<double>(x.tv_n[d]) : NAN);
      }
      row.insert(row.end(), {spread(ch).mean, spread(ef).mean, spread(ec).mean, spread(v).mean});
      dr.changed[arm].push_back(spread(ch).mean), dr.e_forced[arm].push_back(spread(ef).mean), dr.e_clean[arm].push_back(spread(ec).mean);
      dr.tv[arm].push_back(spread(v).mean);
    }
    f.row(row);
    dr.ds.push_back(static_cast<double>(d + 1));
  }
  r.print(f);
  r.say("tokens changed: share of later steps where the two continuations differ; error: share of reference tokens at step k + d the continuation");
  r.say("gets wrong (position by position); TV: total variation distance between the two continuations' cross-attention rows (0 same, 1 disjoint).");
  Table sfx("recovery", {"arm", "seed", "sentences", "edits per reference token, forced", "edits, clean", "recovered, forced", "recovered, clean"});
  for (size_t arm = 0; arm < res.size(); ++arm)
    for (size_t i = 0; i < res[arm].size(); ++i) {
      const Drift& x = res[arm][i].drift;
      sfx.row({level_name(rates[arm]), static_cast<int64_t>(r.seed(static_cast<int>(i))), x.sentences, ratio(x.edits_forced, x.suffix_tokens),
               ratio(x.edits_clean, x.suffix_tokens), ratio(x.exact_forced, x.sentences), ratio(x.exact_clean, x.sentences)});
    }
  r.print(sfx);
  r.say("edits: token edit distance of the continuation after step k to the reference's rest (from step k or k + 1, whichever is nearer), per");
  r.say("reference token; recovered: share of sentences at distance 0.");
  return dr;
}

std::vector<std::string> words(const std::vector<int64_t>& ids, const train::Vocab& v) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.token(id));
  return w;
}

nlohmann::json example_json(const Example& e, const TrainedModel& m) {
  return {{"sentence", e.index}, {"source", words(e.src, m.src_words)}, {"reference", words(e.reference, m.tgt_words)}, {"forced_step", e.k},
          {"clean", words(e.clean, m.tgt_words)},
          {"forced", words(e.forced, m.tgt_words)}, {"clean_cross_attention", e.clean_rows}, {"forced_cross_attention", e.forced_rows}};
}

nlohmann::json model_json(const TrainedModel& m) {
  return {{"steps", m.steps}, {"best_step", m.best_step}, {"converged", m.converged}, {"valid_steps", m.valid_steps}, {"valid_nll", m.valid_nll},
          {"valid_free_running", m.valid_free_running},
          {"train_seconds", m.train_seconds}};
}

using Models = std::vector<std::vector<TrainedModel>>;  // [level][seed], the weights dropped

void save_numbers(Report& r, const Results& res, const std::vector<double>& rates, const Models& models) {
  auto& js = r.data();
  js["ss_rates"] = rates;
  for (size_t arm = 0; arm < res.size(); ++arm)
    for (size_t i = 0; i < res[arm].size(); ++i) {
      const auto& s = res[arm][i];
      const Drift& x = s.drift;
      const std::string seed = std::to_string(r.seed(static_cast<int>(i)));
      auto& slot = arm == kTeacher ? js["teacher_forcing"][seed] : js["scheduled_sampling"][fmt::format("k{:g}", 100 / rates[arm])][seed];
      slot = {{"model", model_json(models[arm][i])},
              {"positions", {{"total", s.pos.total}, {"teacher_forced_right", s.pos.tf_right}, {"free_running_right", s.pos.fr_right}}},
              {"forced", {{"steps", x.both}, {"changed", x.changed}, {"reference_steps", x.ref_steps}, {"errors_clean", x.err_clean},
                          {"errors_forced", x.err_forced}, {"tv_sum", x.tv_sum}, {"tv_n", x.tv_n}, {"tv_same_token_sum", x.tv_same_sum},
                          {"tv_same_token_n", x.tv_same_n}, {"sentences", x.sentences}, {"reference_tokens_after_k", x.suffix_tokens},
                          {"edits_clean", x.edits_clean}, {"edits_forced", x.edits_forced}, {"recovered_clean", x.exact_clean},
                          {"recovered_forced", x.exact_forced}}},
              {"bleu_by_third", {{"teacher_forced", s.pos.tf_bleu}, {"free_running", s.pos.fr_bleu}}},
              {"token_accuracy_teacher_forced", s.tf_accuracy}, {"token_accuracy_free_running", s.fr_tokens}, {"exact_free_running", s.fr_exact}};
    }
  js["example"] = example_json(res[kTeacher][0].example, models[kTeacher][0]);
  if (res[kTeacher][0].derailed.k >= 0) js["example_changed"] = example_json(res[kTeacher][0].derailed, models[kTeacher][0]);
}

void example_panels(Report& r, const Example& e, const TrainedModel& m, const std::string& what) {
  if (e.k < 0) return;
  r.add_panel(ValueMap{fmt::format("{}: clean (k = {})", what, e.k), "source token", "output token", words(e.clean, m.tgt_words), words(e.src, m.src_words),
                       e.clean_rows, false, "attention"});
  std::vector<std::string> labels = words(e.forced, m.tgt_words);
  labels[static_cast<size_t>(e.k)] += " (forced)";
  r.add_panel(ValueMap{fmt::format("{}: after the forced token", what), "source token", "output token", labels, words(e.src, m.src_words), e.forced_rows,
                       false, "attention"});
}

void figure(Report& r, const PositionSeries& ps, const DriftSeries& dr, const Results& res, const std::vector<double>& rates, const Models& models) {
  Chart acc{"free-running accuracy per position (band: seeds); dashed: teacher-forced, teacher forcing's model", "target position", "accuracy", false,
            false, {}, ps.xs};
  Chart gap{"teacher-forced minus free-running (band: seeds)", "target position", "accuracy gap", false, false, {}, ps.xs};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    acc.series.push_back(band_series(level_name(rates[arm]) + ", free-running", ps.xs, ps.fr[arm], level_color(arm)));
    gap.series.push_back(band_series(level_name(rates[arm]), ps.xs, ps.gap[arm], level_color(arm)));
  }
  acc.series.push_back(band_series(level_name(0) + ", teacher-forced", ps.xs, ps.tf[kTeacher], level_color(kTeacher), true));
  acc.legend = Chart::Corner::BottomLeft;
  gap.legend = Chart::Corner::TopLeft;
  r.add_panel(acc);
  r.add_panel(gap);
  Chart after{"error rate after step k (solid: forced token; dashed: true prefix)", "steps after k (d)", "error rate", false, false, {}, dr.ds};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    after.series.push_back({level_name(rates[arm]) + ", forced", dr.ds, dr.e_forced[arm], {}, {}, false, level_color(arm)});
    after.series.push_back({level_name(rates[arm]) + ", clean", dr.ds, dr.e_clean[arm], {}, {}, true, level_color(arm)});
  }
  after.legend = Chart::Corner::TopRight;
  r.add_panel(after);
  int64_t last = 0;
  for (const auto& arm : models)
    for (const auto& m : arm) last = std::max(last, m.valid_steps.empty() ? int64_t{0} : m.valid_steps.back());
  std::vector<double> ticks;
  const int64_t every = last <= 600 ? 100 : last <= 1500 ? 250 : 500;
  for (int64_t t = 0; t <= last + every - 1; t += every) ticks.push_back(static_cast<double>(t));
  // The first seed's models only: one curve per level keeps the legend readable.
  Chart curves{fmt::format("held-out NLL per token while training (seed {})", r.seed(0)), "step", "NLL", false, true, {}, ticks};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    const TrainedModel& m = models[arm][0];
    std::vector<double> x(m.valid_steps.begin(), m.valid_steps.end());
    curves.series.push_back({level_name(rates[arm]), x, m.valid_nll, {}, {}, arm != kTeacher, level_color(arm)});
  }
  curves.legend = Chart::Corner::TopRight;
  r.add_panel(curves);
  const Example& e = res[kTeacher][0].derailed;
  example_panels(r, e, models[kTeacher][0], fmt::format("TF model, sentence {}", e.index));
}

template <class F>
std::vector<double> per_seed(const std::vector<SeedResult>& v, F f) {
  std::vector<double> out;
  for (const auto& s : v) out.push_back(f(s));
  return out;
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : ", ", x);
  return s;
}

// The two statistics of the dose-response, per seed and level: the late-half gap and the derailment.
struct PerLevel {
  std::vector<std::vector<double>> late_gap, derail;  // [seed][level]
};

PerLevel per_level(const Results& res, size_t P) {
  PerLevel pl;
  for (size_t i = 0; i < res[kTeacher].size(); ++i) {
    pl.late_gap.emplace_back(), pl.derail.emplace_back();
    for (const auto& level : res) {
      pl.late_gap.back().push_back(pooled_gap(level[i].pos, P / 2, P));
      pl.derail.back().push_back(derailment(level[i].drift));
    }
  }
  return pl;
}

const char* const kRateAxis = "scheduled sampling's speed 100/k (0: teacher forcing)";

void claims(Report& r, const Results& res, const std::vector<double>& rates, size_t P) {
  GF_CHECK_AS(std::runtime_error, P >= 4, "lab exposure: only {} positions have enough sentences in every model (--min-support)", P);
  const size_t half = P / 2;
  const auto& tf = res[kTeacher];
  const auto early = per_seed(tf, [&](const SeedResult& s) { return pooled_gap(s.pos, 0, half); });
  const auto late = per_seed(tf, [&](const SeedResult& s) { return pooled_gap(s.pos, half, P); });
  std::vector<double> grows;
  for (size_t i = 0; i < late.size(); ++i) grows.push_back(late[i] - early[i]);
  r.paper("gap_grows", grows,
          fmt::format("teacher forcing: gap at positions {}-{} minus at 0-{}, per seed: {} (late {}; early {})", half, P - 1, half - 1, list(grows),
                      list(late), list(early)));
  const auto derail = per_seed(tf, [](const SeedResult& s) { return derailment(s.drift); });
  r.paper("derails", derail,
          fmt::format("teacher forcing: error rate at d = 1-{} after the forced token minus from the true prefix, per seed: {} (forced {}; clean {})",
                      kDerailSteps, list(derail), list(per_seed(tf, [](const SeedResult& s) { return error_rates(s.drift, kDerailSteps).first; })),
                      list(per_seed(tf, [](const SeedResult& s) { return error_rates(s.drift, kDerailSteps).second; }))));
  // The dose-response on the schedule's speed: slopes on the rate itself, since its levels start at
  // 0 (teacher forcing), where a slope per doubling has no place.
  const PerLevel pl = per_level(res, P);
  const auto gap_trend = r.dose_response({"late-half gap", kRateAxis, "late-half gap (teacher-forced minus free-running accuracy)", rates, pl.late_gap,
                                          TrendKind::Slope, false, "#1f77b4"});
  const auto derail_trend = r.dose_response({"derailment", kRateAxis, "derailment (error after a forced token minus from the true prefix)", rates,
                                             pl.derail, TrendKind::Slope, false, "#d62728"});
  r.paper("ss_gap_trend", gap_trend,
          fmt::format("slope of the late-half gap on 100/k over {}, per seed: {:+.4f}", fmt::join(rates, ", "), fmt::join(gap_trend, ", ")));
  r.paper("ss_derailment_trend", derail_trend,
          fmt::format("slope of the derailment on 100/k over {}, per seed: {:+.4f}", fmt::join(rates, ", "), fmt::join(derail_trend, ", ")));
}

// The levels of the dose-response (--ss-rates): 4 or more, increasing, the first 0 (teacher forcing,
// the model gap_grows and derails read).
std::vector<double> ss_rates(const Report& r) {
  const std::vector<double> rates = parse_increasing_reals(r.text("ss-rates"), "lab exposure: --ss-rates");
  GF_CHECK(rates.size() >= 4, "lab exposure: --ss-rates needs 4 or more levels for the dose-response, got {} ('{}')", rates.size(), r.text("ss-rates"));
  GF_CHECK(rates[0] == 0, "lab exposure: --ss-rates must start at 0 (teacher forcing, the model gap_grows and derails read), got '{}'",
           r.text("ss-rates"));
  return rates;
}

Recipe recipe_of(const Report& r, double rate) {
  Recipe rc;
  rc.converge = true;
  rc.until.every = r.integer("valid-every");
  rc.until.patience = r.integer("patience");
  rc.until.min_improvement = r.real("min-improvement");
  GF_CHECK(r.text("select") == "free-running" || r.text("select") == "nll", "lab exposure: --select is free-running or nll, got '{}'", r.text("select"));
  rc.until.select_free_running = r.text("select") == "free-running";
  if (rate > 0) rc.sampling.k = 100 / rate;
  return rc;
}

// One model of level `rate` on seed i (from the cache when trained before), measured.
SeedResult measure(Report& r, int i, double rate, int64_t D, TrainedModel* keep) {
  TrainedModel tm = trained_model(r, i, recipe_of(r, rate));
  const size_t n = std::min(static_cast<size_t>(r.integer("sentences")), tm.test.size());
  SeedResult res = run_seed(tm, n, D, r.seed(i), std::min<size_t>(static_cast<size_t>(r.integer("show")), n - 1));
  r.say(fmt::format("  {}: {} test sentences: token accuracy teacher-forced {:.3f}, free-running {:.3f}; free-running sentences exactly right {:.3f}",
                    level_name(rate), n, res.tf_accuracy, res.fr_tokens, res.fr_exact));
  if (keep) {
    tm.model.reset();  // the numbers are kept; the weights are not needed any more
    *keep = std::move(tm);
  }
  return res;
}

// --control: the placebo. A pool of teacher-forced models (rate 0, one level of the dose-response;
// the lab's own seeds come from the cache), each on its own seed, put in the levels' places: both
// trends' true value is then 0.
void placebo(Report& r, const std::vector<double>& rates, int64_t D, int64_t min_support) {
  const int k = static_cast<int>(rates.size()), pool = std::max(r.placebo_pool(), r.trend_placebo_pool(k));
  r.say(fmt::format("PLACEBO: {} teacher-forced models on seeds {}-{}; each trend reads {} of them per seed as the levels {}.", pool, r.seed(0),
                    r.seed(pool - 1), k, fmt::join(rates, ", ")));
  Results res(1);
  for (int i = 0; i < pool; ++i) res[kTeacher].push_back(measure(r, i, 0.0, D, nullptr));
  const size_t P = common_positions(res, min_support);
  GF_CHECK_AS(std::runtime_error, P >= 4, "lab exposure: only {} positions have enough sentences in every model (--min-support)", P);
  std::vector<double> late, derail;
  Table t("the pool: teacher-forced models", {"seed", "late-half gap", "derailment"});
  for (int i = 0; i < pool; ++i) {
    late.push_back(pooled_gap(res[kTeacher][i].pos, P / 2, P)), derail.push_back(derailment(res[kTeacher][i].drift));
    t.row({static_cast<int64_t>(r.seed(i)), late.back(), derail.back()});
  }
  r.print(t);
  const std::string one_arm = "the teacher-forced arm against a threshold, no contrast between arms";
  r.no_placebo("gap_grows", one_arm);
  r.no_placebo("derails", one_arm);
  auto trend_of = [&](const std::vector<double>& stat) {
    return [&rates, &stat](const std::vector<int>& runs) {
      std::vector<double> y;
      for (int j : runs) y.push_back(stat[static_cast<size_t>(j)]);
      return trend(rates, y, TrendKind::Slope);
    };
  };
  const std::string how = "teacher-forced models of different seeds as the levels";
  r.placebo_trend("ss_gap_trend", k, trend_of(late), how);
  r.placebo_trend("ss_derailment_trend", k, trend_of(derail), how);
}

void run(Report& r) {
  GF_CHECK(r.text("model").empty(), "lab exposure: --model is not supported (the lab trains every arm the same way)");
  const int64_t D = r.integer("offsets"), min_support = r.integer("min-support");
  GF_CHECK(D >= kDerailSteps, "lab exposure: --offsets must be at least {}, got {}", kDerailSteps, D);
  const std::vector<double> rates = ss_rates(r);
  std::vector<std::string> ks;
  for (double rate : rates) ks.push_back(rate == 0 ? "teacher forcing" : fmt::format("{:g}", 100 / rate));
  r.say(fmt::format("training: until the held-out NLL has not improved by {:g}% for {} measurements {} steps apart (at most --train-steps {}), "
                    "keeping the weights of the measurement with {}; scheduled sampling: true token with probability k / (k + exp(step / k)), "
                    "at 100/k = {} (k = {})",
                    100 * r.real("min-improvement"), r.integer("patience"), r.integer("valid-every"), r.integer("train-steps"),
                    r.text("select") == "nll" ? "the lowest NLL (--select nll)" : "the highest free-running token accuracy on 200 held-out pairs",
                    fmt::join(rates, ", "), fmt::join(ks, ", ")));
  if (r.placebo_mode()) return placebo(r, rates, D, min_support);
  Results res(rates.size());
  Models models(rates.size());
  for (int i = 0; i < r.seeds(); ++i)
    for (size_t arm = 0; arm < rates.size(); ++arm) {
      models[arm].emplace_back();
      res[arm].push_back(measure(r, i, rates[arm], D, &models[arm].back()));
    }
  const size_t P = common_positions(res, min_support);
  const PositionSeries ps = position_section(r, res, rates, P, min_support);
  const DriftSeries dr = drift_section(r, res, rates, D);
  save_numbers(r, res, rates, models);
  figure(r, ps, dr, res, rates, models);
  claims(r, res, rates, P);
}

}  // namespace

Lab exposure_lab() {
  Lab l;
  l.name = "exposure";
  l.title = "exposure bias, and scheduled sampling against it";
  l.reference = "Bengio et al. 2015, arXiv:1506.03099 (sections 1-2, scheduled sampling)";
  l.question =
      "How does a translator trained with teacher forcing until converged do on its own prefix, position by position, and after one wrong token; "
      "and does scheduled sampling, on the same data and rule, narrow both the more, the faster its schedule?";
  l.control = "placebo: teacher-forced models of different seeds in the places of the scheduled-sampling levels";
  l.placebo = true;
  l.default_seeds = 3;
  // Twelve models trained until converged (4 levels x 3 seeds) must fit the lab's budget: a
  // narrower, shallower model on a smaller corpus than the attribution lab's, and a learning rate
  // and stopping rule that reach the held-out loss's plateau in about 650 steps instead of 1,250
  // (docs/labs/exposure.md).
  l.options = trained_model_options(4000, {{"corpus", "3000"}, {"d-model", "32"}, {"layers", "1"}, {"lr", "0.004"}});
  l.options.push_back({"valid-every", Option::Int, "50", "convergence: steps between held-out measurements"});
  l.options.push_back({"patience", Option::Int, "2", "convergence: measurements without a real improvement before stopping"});
  l.options.push_back({"min-improvement", Option::Real, "0.05", "convergence: a real improvement lowers the best held-out NLL by this share"});
  l.options.push_back({"select", Option::Text, "free-running",
                       "which held-out measurement's weights each model keeps: free-running (the highest greedy token accuracy on the first "
                       "200 validation pairs) or nll (the lowest teacher-forced NLL, which never sees the model's own prefix)"});
  l.options.push_back({"ss-rates", Option::Text, "0,0.25,0.5,1",
                       "the dose-response's levels: the speed 100/k of scheduled sampling's decay k / (k + exp(step / k)), 0 for teacher "
                       "forcing (4 or more, increasing, from 0; 0.5 is k 200)"});
  l.options.push_back({"sentences", Option::Int, "400", "test sentences per model"});
  l.options.push_back({"offsets", Option::Int, "8", "steps after the forced token to follow"});
  l.options.push_back({"min-support", Option::Int, "40", "positions shown need this many sentences in every model"});
  l.options.push_back({"show", Option::Int, "0", "from which test sentence the figure's example is searched (0-based)"});
  add_real_data_options(l.options);  // --data: the translators trained on a real task (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

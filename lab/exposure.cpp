// Lab `exposure`: exposure bias (Bengio et al. 2015, arXiv:1506.03099, section 1).
//
// The paper: a model trained with teacher forcing always sees the true previous token, but at
// inference it sees its own; an early mistake is fed back as input, the model may then be in a part
// of its state space training never showed it, and errors accumulate quickly along the sequence.
//
// Here, on a small English -> Korean translator trained briefly enough that it still makes
// mistakes (lab/trained_model.h; --model takes a `gradflow train` run):
// 1. per target position, the accuracy of the next token teacher-forced (true prefix) against
//    free-running (greedy, the model's own prefix, compared position by position with the
//    reference);
// 2. for each test sentence, one step k (drawn at random) where the true prefix is followed by a
//    wrong token (the model's best-scoring token other than the reference's: a mistake the model
//    could make), then greedy decoding onwards, against greedy decoding from the same true prefix
//    without the forced token. At each later step k + d: the share of tokens that differ between
//    the two continuations, each continuation's error rate against the reference, and the total
//    variation distance between the two continuations' cross-attention rows (mean over layers and
//    heads) at that step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "lab/trained_model.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/loop/batch_loss.h"
#include "train/decode/decode.h"

namespace gf::lab {
namespace {

using train::Vocab;

// ---------------------------------------------------------------- 1. per-position accuracy

double ratio(int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : NAN; }

struct PositionCounts {
  std::vector<int64_t> total, tf_right, fr_right;  // per target position (the <eos> position included)
  int64_t sentences = 0, exact = 0;                // free-running translations equal to the reference
  void grow(size_t n) {
    if (total.size() < n) total.resize(n), tf_right.resize(n), fr_right.resize(n);
  }
};

// Teacher-forced and free-running correctness at every reference position of the first n pairs.
PositionCounts per_position(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t n) {
  NoGradGuard ng;
  PositionCounts c;
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
      for (size_t j = 0; j < ref.size(); ++j) {
        const double* row = logits.data<double>() + (static_cast<int64_t>(r) * T + static_cast<int64_t>(j)) * V;
        c.total[j] += 1;
        c.tf_right[j] += std::max_element(row, row + V) - row == ref[j];
        c.fr_right[j] += j < hyp.size() && hyp[j] == ref[j];
      }
    }
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
  size_t index = 0;  // which test sentence
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
  if (keep) *keep = {pair.src, a, b, ra, rb, k};
}

// ---------------------------------------------------------------- one model

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
  Generator gen(seed * 7919 + 17);  // the forced step of each sentence
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

// ---------------------------------------------------------------- report

// The accuracy gap (teacher-forced minus free-running), pooled over positions [from, to).
double pooled_gap(const PositionCounts& c, size_t from, size_t to) {
  int64_t tot = 0, tf = 0, fr = 0;
  for (size_t j = from; j < std::min(to, c.total.size()); ++j) tot += c.total[j], tf += c.tf_right[j], fr += c.fr_right[j];
  return tot ? static_cast<double>(tf - fr) / static_cast<double>(tot) : NAN;
}

// Per-position accuracy over the models, as drawn: means and min..max bands.
struct PositionSeries {
  size_t P = 0;  // positions every model has at least --min-support sentences at
  std::vector<double> xs, tf_mean, fr_mean, gap_mean, gap_lo, gap_hi, tf_lo, tf_hi, fr_lo, fr_hi;
};

PositionSeries position_section(Report& r, const std::vector<SeedResult>& res, int64_t min_support) {
  PositionSeries ps;
  ps.P = SIZE_MAX;
  for (const auto& s : res) {
    size_t p = 0;
    while (p < s.pos.total.size() && s.pos.total[p] >= min_support) ++p;
    ps.P = std::min(ps.P, p);
  }
  r.section(fmt::format("next-token accuracy per target position: teacher-forced (true prefix) vs free-running (own prefix); positions with >= {} "
                        "sentences",
                        min_support));
  Table t("positions", {"position", "sentences", "teacher-forced", "free-running", "gap", "gap min", "gap max"});
  for (size_t j = 0; j < ps.P; ++j) {
    std::vector<double> tf, fr, gap;
    for (const auto& s : res) {
      tf.push_back(ratio(s.pos.tf_right[j], s.pos.total[j]));
      fr.push_back(ratio(s.pos.fr_right[j], s.pos.total[j]));
      gap.push_back(tf.back() - fr.back());
    }
    const Spread a = spread(tf), b = spread(fr), g = spread(gap);
    t.row({static_cast<int64_t>(j), res[0].pos.total[j], a.mean, b.mean, g.mean, g.min, g.max});
    ps.xs.push_back(static_cast<double>(j)), ps.tf_mean.push_back(a.mean), ps.fr_mean.push_back(b.mean), ps.gap_mean.push_back(g.mean);
    ps.gap_lo.push_back(g.min), ps.gap_hi.push_back(g.max), ps.tf_lo.push_back(a.min), ps.tf_hi.push_back(a.max);
    ps.fr_lo.push_back(b.min), ps.fr_hi.push_back(b.max);
  }
  r.print(t);
  r.say(fmt::format("means over {} model(s); gap min/max: over the models. Position j is the j-th target token (the last one of a sentence is <eos>).",
                    res.size()));
  return ps;
}

// What follows a forced token, by offset d, over the models, as drawn.
struct DriftSeries {
  std::vector<double> ds, changed, e_forced, e_clean, tv, tv_same, ch_lo, ch_hi;
  double step_tv = 0;  // the clean run's rows, step to step: the scale of the drift
};

DriftSeries drift_section(Report& r, const std::vector<SeedResult>& res, int64_t D) {
  DriftSeries dr;
  r.section("a wrong token forced at one step k, then greedy decoding, against greedy decoding from the same true prefix");
  Table f("forced", {"offset d", "steps", "tokens changed", "error rate, forced", "error rate, clean", "TV of attention rows", "TV, same token"});
  for (const auto& s : res) dr.step_tv += s.drift.step_tv_sum / static_cast<double>(s.drift.step_tv_n) / static_cast<double>(res.size());
  for (int64_t d = 0; d < D; ++d) {
    std::vector<double> ch, ef, ec, v, vs;
    int64_t steps = 0;
    for (const auto& s : res) {
      const Drift& x = s.drift;
      ch.push_back(ratio(x.changed[d], x.both[d]));
      ef.push_back(ratio(x.err_forced[d], x.ref_steps[d]));
      ec.push_back(ratio(x.err_clean[d], x.ref_steps[d]));
      v.push_back(x.tv_n[d] ? x.tv_sum[d] / static_cast<double>(x.tv_n[d]) : NAN);
      vs.push_back(x.tv_same_n[d] ? x.tv_same_sum[d] / static_cast<double>(x.tv_same_n[d]) : NAN);
      steps += x.both[d];
    }
    f.row({d + 1, steps, spread(ch).mean, spread(ef).mean, spread(ec).mean, spread(v).mean, spread(vs).mean});
    dr.ds.push_back(static_cast<double>(d + 1)), dr.changed.push_back(spread(ch).mean), dr.e_forced.push_back(spread(ef).mean);
    dr.e_clean.push_back(spread(ec).mean), dr.tv.push_back(spread(v).mean), dr.tv_same.push_back(spread(vs).mean);
    dr.ch_lo.push_back(spread(ch).min), dr.ch_hi.push_back(spread(ch).max);
  }
  r.print(f);
  r.say("steps: later steps where either continuation has a token (summed over models); tokens changed: share of them where the two differ;");
  r.say("error rate: share of reference tokens at step k + d the continuation gets wrong (position by position); TV: total variation distance");
  r.say(fmt::format("between the two continuations' cross-attention rows (mean over layers and heads), 0 = same, 1 = disjoint; for scale, the clean run's "
                    "rows move by TV {:.3f} from one step to the next.",
                    dr.step_tv));

  Table sfx("recovery", {"seed", "sentences", "edits per reference token, forced", "edits, clean", "recovered, forced", "recovered, clean"});
  for (size_t i = 0; i < res.size(); ++i) {
    const Drift& x = res[i].drift;
    sfx.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), x.sentences, ratio(x.edits_forced, x.suffix_tokens), ratio(x.edits_clean, x.suffix_tokens),
             ratio(x.exact_forced, x.sentences), ratio(x.exact_clean, x.sentences)});
  }
  r.print(sfx);
  r.say("edits: token edit distance of the continuation after step k to the reference's rest (from step k or k + 1, whichever is nearer: a");
  r.say("continuation may redo the step or carry on), per reference token; recovered: share of sentences at distance 0.");
  return dr;
}

std::vector<std::string> words(const std::vector<int64_t>& ids, const train::Vocab& v) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.token(id));
  return w;
}

nlohmann::json example_json(const Example& e, const TrainedModel& m) {
  return {{"sentence", e.index}, {"source", words(e.src, m.src_words)}, {"forced_step", e.k}, {"clean", words(e.clean, m.tgt_words)},
          {"forced", words(e.forced, m.tgt_words)}, {"clean_cross_attention", e.clean_rows}, {"forced_cross_attention", e.forced_rows}};
}

void save_numbers(Report& r, const std::vector<SeedResult>& res, const TrainedModel& first) {
  auto& js = r.data();
  js["model"] = first.description;
  for (size_t i = 0; i < res.size(); ++i) {
    const auto& s = res[i];
    const Drift& x = s.drift;
    js["seeds"][std::to_string(r.seed(static_cast<int>(i)))] = {
        {"positions", {{"total", s.pos.total}, {"teacher_forced_right", s.pos.tf_right}, {"free_running_right", s.pos.fr_right}}},
        {"forced", {{"steps", x.both}, {"changed", x.changed}, {"reference_steps", x.ref_steps}, {"errors_clean", x.err_clean},
                    {"errors_forced", x.err_forced}, {"tv_sum", x.tv_sum}, {"tv_n", x.tv_n}, {"tv_same_token_sum", x.tv_same_sum},
                    {"tv_same_token_n", x.tv_same_n}, {"sentences", x.sentences}, {"reference_tokens_after_k", x.suffix_tokens},
                    {"edits_clean", x.edits_clean}, {"edits_forced", x.edits_forced}, {"recovered_clean", x.exact_clean},
                    {"recovered_forced", x.exact_forced}}},
        {"token_accuracy_teacher_forced", s.tf_accuracy}, {"token_accuracy_free_running", s.fr_tokens}, {"exact_free_running", s.fr_exact}};
  }
  js["example"] = example_json(res[0].example, first);
  if (res[0].derailed.k >= 0) js["example_changed"] = example_json(res[0].derailed, first);
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

void figure(Report& r, const PositionSeries& ps, const DriftSeries& dr, const SeedResult& r0, const TrainedModel& first) {
  r.add_panel(Chart{"next-token accuracy per position (band: models)", "target position", "accuracy", false, false,
                    {{"teacher-forced", ps.xs, ps.tf_mean, ps.tf_lo, ps.tf_hi, false, "#1f77b4"},
                     {"free-running", ps.xs, ps.fr_mean, ps.fr_lo, ps.fr_hi, false, "#d62728"}},
                    ps.xs});
  r.add_panel(Chart{"teacher-forced minus free-running (band: models)", "target position", "accuracy gap", false, false,
                    {{"gap", ps.xs, ps.gap_mean, ps.gap_lo, ps.gap_hi, false, "#9467bd"}}, ps.xs});
  r.add_panel(Chart{"after a forced wrong token at step k", "steps after k (d)", "share", false, false,
                    {{"tokens changed (forced vs clean)", dr.ds, dr.changed, dr.ch_lo, dr.ch_hi, false, "#9467bd"},
                     {"error rate, forced", dr.ds, dr.e_forced, {}, {}, false, "#d62728"},
                     {"error rate, clean", dr.ds, dr.e_clean, {}, {}, true, "#1f77b4"}},
                    dr.ds});
  r.add_panel(Chart{"cross-attention drift after the forced token", "steps after k (d)", "TV distance of the rows", false, false,
                    {{"all later steps", dr.ds, dr.tv, {}, {}, false, "#2ca02c"},
                     {"where the token is the same", dr.ds, dr.tv_same, {}, {}, false, "#17becf"},
                     {"clean run, step to step (scale)", dr.ds, std::vector<double>(dr.ds.size(), dr.step_tv), {}, {}, true, "#7f7f7f"}},
                    dr.ds});
  example_panels(r, r0.example, first, fmt::format("sentence {}", r0.example.index));
  example_panels(r, r0.derailed, first, fmt::format("sentence {} (first that changes)", r0.derailed.index));
}

// Each claim must hold for every model.
void claims(Report& r, const std::vector<SeedResult>& res, size_t P, int64_t D, int64_t min_support) {
  const size_t half = P / 2;
  std::string ev1, ev2, ev3;
  bool ok1 = true, ok2 = true, ok3 = true;
  for (size_t i = 0; i < res.size(); ++i) {
    const auto& s = res[i];
    const std::string sd = fmt::format("{}seed {}: ", i ? "; " : "", r.seed(static_cast<int>(i)));
    if (P < 4) {  // nothing to compare: too few sentences for --min-support
      ok1 = false;
      ev1 += sd + fmt::format("only {} positions have {} sentences", P, min_support);
    } else {
      const double early = pooled_gap(s.pos, 0, half), late = pooled_gap(s.pos, half, P), all = pooled_gap(s.pos, 0, P);
      ok1 = ok1 && all > 0 && late >= early + 0.05;
      ev1 += sd + fmt::format("gap {:.3f} overall, {:.3f} at positions 0-{}, {:.3f} at {}-{}", all, early, half - 1, late, half, P - 1);
    }
    int64_t ef = 0, ec = 0, n = 0;
    for (int64_t d = 0; d < std::min<int64_t>(3, D); ++d) ef += s.drift.err_forced[d], ec += s.drift.err_clean[d], n += s.drift.ref_steps[d];
    const double rf = ratio(ef, n), rc = ratio(ec, n);
    ok2 = ok2 && rf >= 1.5 * rc && rf >= rc + 0.05;
    ev2 += sd + fmt::format("error rate at d = 1-3 {:.3f} after the forced token vs {:.3f} without ({:.1f}x)", rf, rc, rf / rc);
    const double xf = ratio(s.drift.edits_forced, s.drift.suffix_tokens), xc = ratio(s.drift.edits_clean, s.drift.suffix_tokens);
    ok3 = ok3 && xf >= 1.5 * xc && xf >= xc + 0.05;
    ev3 += sd + fmt::format("{:.3f} edits per reference token after the forced token vs {:.3f} without ({:.1f}x); recovered {:.0f}% vs {:.0f}%", xf, xc,
                            xf / xc, 100 * ratio(s.drift.exact_forced, s.drift.sentences), 100 * ratio(s.drift.exact_clean, s.drift.sentences));
  }
  r.claim("free-running accuracy falls below teacher-forced and the gap grows with position: gap > 0, and the gap pooled over the later half of "
          "the positions exceeds that over the earlier half by at least 0.05",
          ok1, ev1);
  r.claim("a wrong token fed back is amplified: in the 3 steps after a forced wrong token the error rate is at least 1.5x (and 0.05 above) that of "
          "decoding from the true prefix",
          ok2, ev2);
  r.claim("the same without position-by-position alignment: the rest of the translation after a forced wrong token is at least 1.5x (and 0.05 "
          "per reference token above) as far from the reference in edit distance as decoding from the true prefix",
          ok3, ev3);
}

void run(Report& r) {
  const int seeds = r.text("model").empty() ? r.seeds() : 1;
  if (seeds < r.seeds()) r.say("--model: one given model, so one run (--seeds applies to models trained here)");
  const int64_t D = r.integer("offsets"), min_support = r.integer("min-support");
  GF_CHECK(D >= 1, "lab exposure: --offsets must be at least 1, got {}", D);
  std::vector<SeedResult> res;
  TrainedModel first;
  for (int i = 0; i < seeds; ++i) {
    TrainedModel tm = trained_model(r, i);
    const size_t n = std::min(static_cast<size_t>(r.integer("sentences")), tm.test.size());
    res.push_back(run_seed(tm, n, D, r.seed(i), std::min<size_t>(static_cast<size_t>(r.integer("show")), n - 1)));
    r.say(fmt::format("  {} test sentences: token accuracy teacher-forced {:.3f}, free-running {:.3f}; free-running sentences exactly right {:.3f}",
                      n, res.back().tf_accuracy, res.back().fr_tokens, res.back().fr_exact));
    if (i == 0) first = std::move(tm);
  }
  const PositionSeries ps = position_section(r, res, min_support);
  const DriftSeries dr = drift_section(r, res, D);
  save_numbers(r, res, first);
  figure(r, ps, dr, res[0], first);
  claims(r, res, ps.P, D, min_support);
  // The paper says nothing about attention: what it does is reported, not claimed.
  r.say(fmt::format("attention drift (reported, not claimed: the paper says nothing about attention): TV {:.3f} one step after the forced token, "
                    "{:.3f} at d = {} ({:.0f}% of d = 1), against {:.3f} between consecutive clean rows; where the later token is unchanged: {:.3f} at d = 1, "
                    "{:.3f} at d = {}.",
                    dr.tv.front(), dr.tv.back(), D, 100 * dr.tv.back() / dr.tv.front(), dr.step_tv, dr.tv_same.front(), dr.tv_same.back(), D));
}

}  // namespace

Lab exposure_lab() {
  Lab l;
  l.name = "exposure";
  l.title = "exposure bias: teacher-forced vs free-running, and what one wrong token does";
  l.reference = "Bengio et al. 2015, arXiv:1506.03099 (section 1)";
  l.question =
      "How does a translator trained with teacher forcing do on its own prefix, position by position, and how do its later tokens and "
      "cross-attention change after one wrong token?";
  l.default_seeds = 3;
  l.options = trained_model_options(250);
  l.options.push_back({"sentences", Option::Int, "400", "test sentences per model"});
  l.options.push_back({"offsets", Option::Int, "8", "steps after the forced token to follow"});
  l.options.push_back({"min-support", Option::Int, "40", "positions shown need this many sentences"});
  l.options.push_back({"show", Option::Int, "0", "which test sentence the figure's example is (0-based)"});
  l.run = run;
  return l;
}

}  // namespace gf::lab

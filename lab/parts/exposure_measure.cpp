// Lab `exposure`'s measurement of one trained translator (declared in lab/exposure.h): accuracy per
// position, teacher-forced against free-running, and a forced wrong token followed onwards.
#include "lab/exposure.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "tensor/kernels/random.h"
#include "train/decode/decode.h"
#include "train/eval/bleu.h"
#include "train/inspect/maps.h"
#include "train/run/batch_loss.h"

namespace gf::lab::exposure {

using train::Vocab;
using train::inspect::total_variation;

double ratio(int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : NAN; }

namespace {

// ---------------------------------------------------------------- 1. per-position accuracy


// BLEU by position: each reference's tokens (<eos> left out) cut into thirds of its own length, and
// each hypothesis's tokens at the same positions (a free-running output's tokens past the
// reference's end in the last third).
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

}  // namespace

ModelStudy study_model(const TrainedModel& tm, size_t n, int64_t D, uint64_t seed, size_t show) {
  ModelStudy res;
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

double pooled_gap(const PositionCounts& c, size_t from, size_t to) {
  int64_t tot = 0, tf = 0, fr = 0;
  for (size_t j = from; j < std::min(to, c.total.size()); ++j) tot += c.total[j], tf += c.tf_right[j], fr += c.fr_right[j];
  return tot ? static_cast<double>(tf - fr) / static_cast<double>(tot) : NAN;
}

std::pair<double, double> error_rates(const Drift& x, int64_t d) {
  int64_t ef = 0, ec = 0, n = 0;
  for (int64_t i = 0; i < std::min<int64_t>(d, static_cast<int64_t>(x.ref_steps.size())); ++i)
    ef += x.err_forced[i], ec += x.err_clean[i], n += x.ref_steps[i];
  return {ratio(ef, n), ratio(ec, n)};
}

double derailment(const Drift& x) {
  const auto [f, c] = error_rates(x, kDerailSteps);
  return f - c;
}

size_t supported_positions(const PositionCounts& c, int64_t min_support) {
  size_t p = 0;
  while (p < c.total.size() && c.total[p] >= min_support) ++p;
  return p;
}

}  // namespace gf::lab::exposure

// Lab `attribution`: is attention an explanation? (Jain and Wallace 2019, arXiv:1902.10186;
// Wiegreffe and Pinter 2019, arXiv:1908.04626.)
//
// Jain and Wallace: attention weights correlate only weakly with measures of which inputs matter
// (gradients, leave-one-out), which agree with each other more than with attention; and other
// attention distributions (permuted, adversarial) often give the same prediction, in the text
// classifiers they studied (they left sequence-to-sequence models out). Wiegreffe and Pinter:
// whether attention explains depends on the model and task; a model that does as well with uniform
// attention has attention that explains nothing.
//
// Here, on small English -> Korean translators (one per seed, each on a corpus drawn by its seed;
// lab/trained_model.h): for test sentences, the model's own greedy translation, teacher-forced.
// 1. Agreement: for every output token, the last decoder layer's cross-attention (head mean)
//    and three attribution methods over the source tokens: |gradient x input|, leave-one-out
//    (the output distribution's total variation distance when the token is blanked out: masked
//    out of attention, every other token at its own position) and |integrated gradients|
//    (train/inspect/attribution.h); Spearman's rank correlation of every pair (the claims) and Kendall's
//    tau (Jain and Wallace's statistic, reported beside it), averaged over the output tokens of a
//    sentence and then over sentences: one number per seed.
// 2. Counterfactuals (Jain and Wallace's section 4.2; Wiegreffe and Pinter's uniform baseline):
//    every cross-attention row permuted over the source (several draws), or made uniform, through
//    nn::MultiheadAttention::weights_transform; the next-token distribution's total variation
//    distance from the model's own, per output token.
// With --data DIR (lab/real_data.h) the translators are trained on that task instead (Multi30k's
// German -> English, say), each seed its own weights and batch order on the same data.
// --control runs the same protocol on the model with every cross-attention replaced by a uniform
// map over the source, which is then also the attention compared with the methods: the claims that
// attention carries a specific signal must fail.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "lab/trained_model.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/decode/decode.h"
#include "train/inspect/attribution.h"

namespace gf::lab {
namespace {

using train::inspect::abs_map;
using train::inspect::attention_rollout;
using train::inspect::attribution_maps;
using train::inspect::AttributionMaps;
using train::inspect::head_mean;
using train::inspect::integrated_gradients;
using train::inspect::IntegratedGradients;
using train::inspect::leave_one_out;
using train::inspect::Map;
using train::inspect::output_distributions;
using train::inspect::source_embeddings;
using train::inspect::total_variation;

// The maps compared: attention and the three attribution methods.
enum MapId { kAtt = 0, kGxi = 1, kLoo = 2, kIg = 3, kMaps = 4 };
const char* const kMapName[kMaps] = {"attention", "gradient x input", "leave-one-out", "integrated gradients"};
const char* const kMapShort[kMaps] = {"att", "gxi", "loo", "ig"};

// A rank correlation (Spearman's rho or Kendall's tau) of a's and b's rows, averaged over rows. A
// constant row ranks nothing and counts as 0 (a uniform map agrees with no ranking); NaN only for no rows.
double row_correlation(const Map& a, const Map& b, double (*correlation)(const std::vector<double>&, const std::vector<double>&)) {
  double sum = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    const double rho = correlation(a[t], b[t]);
    sum += std::isfinite(rho) ? rho : 0.0;
  }
  return a.empty() ? NAN : sum / static_cast<double>(a.size());
}
double row_spearman(const Map& a, const Map& b) { return row_correlation(a, b, spearman); }
double row_kendall(const Map& a, const Map& b) { return row_correlation(a, b, kendall_tau); }

Map row_normalised(const Map& m) {
  Map r = m;
  for (auto& row : r) {
    double s = 0;
    for (double v : row) s += v;
    for (double& v : row) v = s > 0 ? v / s : 0;
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) { return v.empty() ? NAN : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

// ---------------------------------------------------------------- attention transforms

// Installs a transform on every decoder layer's cross-attention while alive.
class CrossTransform {
 public:
  CrossTransform(const nn::Seq2SeqTransformer& model, std::function<Variable(const Variable&)> f) : model_(model) {
    for (auto& layer : *model.transformer->decoder->layers) layer->multihead_attn->weights_transform = f;
  }
  ~CrossTransform() {
    for (auto& layer : *model_.transformer->decoder->layers) layer->multihead_attn->weights_transform = nullptr;
  }
  CrossTransform(const CrossTransform&) = delete;
  CrossTransform& operator=(const CrossTransform&) = delete;

 private:
  const nn::Seq2SeqTransformer& model_;
};

// Weights (B, H, L, S) made uniform over the keys (no padding here: one unpadded source per row).
Variable uniform_weights(const Variable& w) { return Variable(Tensor::full(w.shape(), 1.0 / static_cast<double>(w.size(3)), w.dtype())); }

// Weights (B, H, L, S) with every (row, head, query) row shuffled over the keys by gen.
Variable permuted_weights(const Variable& w, Generator& gen) {
  const Tensor in = w.data().contiguous();  // (B, H, L, S)
  const int64_t S = in.size(3), rows = in.numel() / S;
  Tensor out = in.clone();
  std::vector<int64_t> perm(static_cast<size_t>(S));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = S - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(i + 1)))]);
    for (int64_t s = 0; s < S; ++s) out.flat_set(r * S + s, in.flat_get(r * S + perm[s]));
  }
  return Variable(out);
}

// ---------------------------------------------------------------- one sentence

struct Sentence {
  std::vector<int64_t> src, out;  // out ends with <eos>
  std::array<Map, kMaps> maps;    // (T, S) each, attention and the methods' magnitudes
  Map all_layers, rollout;        // reported: every layer's head mean, attention rollout
  std::array<std::array<double, kMaps>, kMaps> rho{};  // mean over output tokens of Spearman rho
  std::array<std::array<double, kMaps>, kMaps> tau{};  // ... of Kendall's tau
  double rho_all_layers[kMaps] = {}, rho_rollout[kMaps] = {};  // against each method (index 0 unused)
  double permuted_tv = 0, uniform_tv = 0;  // counterfactuals: mean over output tokens (median over permutations)
  std::vector<double> ig_sum_error, ig_endpoint;  // completeness, per output token
};

struct Settings {
  int ig_steps = 32, permutations = 8;
  int64_t max_extra = 50;
  bool control = false;
};

// The counterfactual distance: mean over output tokens of the next-token distributions' total
// variation distance, the model as it runs against the model with `f` on its cross-attention.
double counterfactual_tv(const nn::Seq2SeqTransformer& model, const Tensor& xb, const std::vector<int64_t>& out, const Map& factual,
                         const std::function<Variable(const Variable&)>& f) {
  CrossTransform on(model, f);
  const std::vector<Map> cf = output_distributions(model, xb, out);  // [row][t] (V)
  std::vector<double> per_row;
  for (const Map& row : cf) {
    double s = 0;
    for (size_t t = 0; t < row.size(); ++t) s += total_variation(factual[t], row[t]);
    per_row.push_back(s / static_cast<double>(row.size()));
  }
  return median(per_row);
}

Sentence study(const nn::Seq2SeqTransformer& model, std::vector<int64_t> src, std::vector<int64_t> out, const Settings& st, uint64_t seed) {
  Sentence s;
  out.push_back(train::Vocab::kEos);
  // The model as it runs in this protocol: its own attention, or (control) uniform cross-attention.
  std::unique_ptr<CrossTransform> base;
  if (st.control) base = std::make_unique<CrossTransform>(model, uniform_weights);
  const AttributionMaps am = attribution_maps(model, src, out);
  std::vector<Map> enc, dec, cross;
  for (const auto& l : am.enc_self) enc.push_back(head_mean(l));
  for (const auto& l : am.dec_self) dec.push_back(head_mean(l));
  for (const auto& l : am.cross) cross.push_back(head_mean(l));
  s.maps[kAtt] = cross.back();
  s.maps[kGxi] = abs_map(am.grad_dot);
  s.maps[kLoo] = leave_one_out(model, src, out);
  const IntegratedGradients ig = integrated_gradients(model, src, out, st.ig_steps);
  s.maps[kIg] = abs_map(ig.ig);
  for (size_t t = 0; t < ig.ig.size(); ++t) {
    double sum = 0;
    for (double v : ig.ig[t]) sum += v;
    s.ig_sum_error.push_back(std::abs(sum - ig.endpoints[t]));
    s.ig_endpoint.push_back(std::abs(ig.endpoints[t]));
  }
  s.all_layers = head_mean(cross);
  s.rollout = attention_rollout(enc, dec, cross).source;
  for (int a = 0; a < kMaps; ++a)
    for (int b = 0; b < kMaps; ++b) {
      s.rho[a][b] = a == b ? 1.0 : row_spearman(s.maps[a], s.maps[b]);
      s.tau[a][b] = a == b ? 1.0 : row_kendall(s.maps[a], s.maps[b]);
    }
  for (int m = 1; m < kMaps; ++m) s.rho_all_layers[m] = row_spearman(s.all_layers, s.maps[m]), s.rho_rollout[m] = row_spearman(s.rollout, s.maps[m]);
  // Counterfactuals, on top of the attention the model runs with in this protocol.
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t S = x1.size(0), D = x1.size(1);
  const Map factual = output_distributions(model, x1.reshape({1, S, D}), out).at(0);  // (T, V)
  const auto as_run = [&](const Variable& w) { return st.control ? uniform_weights(w) : w; };
  Generator gen(seed);
  base.reset();  // the counterfactual transforms below include the protocol's own
  const Tensor xp = x1.reshape({1, S, D}).expand({st.permutations, S, D}).contiguous();  // (P, S, D): one draw per row
  s.permuted_tv = counterfactual_tv(model, xp, out, factual, [&](const Variable& w) { return permuted_weights(as_run(w), gen); });
  s.uniform_tv = counterfactual_tv(model, x1.reshape({1, S, D}), out, factual, [&](const Variable& w) { return uniform_weights(as_run(w)); });
  s.src = std::move(src), s.out = std::move(out);
  return s;
}

// Greedy translations of the first n test sources, batched (no graph; the model's own attention), each
// at most its source's length + max_extra tokens: a barely trained model may not stop, and every
// output token costs the study a row of each map.
std::vector<std::vector<int64_t>> translations(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& test, size_t n,
                                               int64_t max_extra) {
  std::vector<std::vector<int64_t>> out;
  train::DecodeOptions o;
  o.max_extra = max_extra;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    train::Batch b = train::collate(test, part);
    Tensor src = Tensor::from_vector(b.src, {b.rows, b.src_len});  // (B, S)
    for (auto& y : train::translate_batch(model, src, o)) out.push_back(std::move(y));
  }
  return out;
}

// ---------------------------------------------------------------- one model

struct SeedResult {
  std::vector<Sentence> sentences;
  double tf_accuracy = 0;
  // Per-seed means over sentences.
  std::array<std::array<double, kMaps>, kMaps> rho{}, tau{};
  double rho_all_layers[kMaps] = {}, rho_rollout[kMaps] = {};
  double permuted_tv = 0, uniform_tv = 0;
  // methods_agree[m]: the other methods' mean rho with m, minus attention's rho with m (m = 1..3);
  // methods_agree_tau[m] the same with Kendall's tau (reported).
  double methods_agree[kMaps] = {}, methods_agree_tau[kMaps] = {};
  double attention_agrees = 0;  // mean over the methods of attention's rho with them
};

SeedResult run_seed(const TrainedModel& tm, size_t n, const Settings& st, uint64_t seed) {
  SeedResult res;
  const nn::Seq2SeqTransformer& model = *tm.model;
  const auto outs = translations(model, tm.test, n, st.max_extra);
  res.tf_accuracy = teacher_forced(model, tm.test, n).accuracy;
  for (size_t i = 0; i < n; ++i) res.sentences.push_back(study(model, tm.test[i].src, outs[i], st, seed * 1000003ULL + i));
  auto avg = [&](auto f) {
    std::vector<double> v;
    for (const Sentence& s : res.sentences) v.push_back(f(s));
    return mean(v);
  };
  for (int a = 0; a < kMaps; ++a)
    for (int b = 0; b < kMaps; ++b) {
      res.rho[a][b] = avg([&](const Sentence& s) { return s.rho[a][b]; });
      res.tau[a][b] = avg([&](const Sentence& s) { return s.tau[a][b]; });
    }
  for (int m = 1; m < kMaps; ++m) {
    res.rho_all_layers[m] = avg([&](const Sentence& s) { return s.rho_all_layers[m]; });
    res.rho_rollout[m] = avg([&](const Sentence& s) { return s.rho_rollout[m]; });
    double others = 0, others_tau = 0;
    for (int o = 1; o < kMaps; ++o)
      if (o != m) others += res.rho[m][o] / (kMaps - 2), others_tau += res.tau[m][o] / (kMaps - 2);
    res.methods_agree[m] = others - res.rho[kAtt][m];
    res.methods_agree_tau[m] = others_tau - res.tau[kAtt][m];
    res.attention_agrees += res.rho[kAtt][m] / (kMaps - 1);
  }
  res.permuted_tv = avg([](const Sentence& s) { return s.permuted_tv; });
  res.uniform_tv = avg([](const Sentence& s) { return s.uniform_tv; });
  return res;
}

// ---------------------------------------------------------------- report

std::vector<std::string> words(const train::Vocab& v, const std::vector<int64_t>& ids) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.token(id));
  return w;
}

void print_agreement(Report& r, const std::vector<SeedResult>& res) {
  r.section("agreement over the source tokens: Spearman rho per output token, mean over a sentence's tokens, mean over sentences");
  Table t("agreement", {"seed", "sentences", "att-gxi", "att-loo", "att-ig", "gxi-loo", "gxi-ig", "loo-ig", "all-layer att vs methods",
                        "rollout vs methods", "teacher-forced accuracy"});
  for (size_t i = 0; i < res.size(); ++i) {
    const SeedResult& x = res[i];
    t.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), x.sentences.size(), x.rho[kAtt][kGxi], x.rho[kAtt][kLoo], x.rho[kAtt][kIg],
           x.rho[kGxi][kLoo], x.rho[kGxi][kIg], x.rho[kLoo][kIg], mean({x.rho_all_layers[1], x.rho_all_layers[2], x.rho_all_layers[3]}),
           mean({x.rho_rollout[1], x.rho_rollout[2], x.rho_rollout[3]}), x.tf_accuracy});
  }
  r.print(t);
  r.say("att: the last decoder layer's cross-attention, mean over heads; gxi: |gradient x input|; loo: leave-one-out (total variation of the");
  r.say("next-token distribution with the token blanked out: masked out of attention, positions kept); ig: |integrated gradients|.");
  r.say("all-layer att and rollout: reported, not claimed.");
  Table k("Kendall's tau (Jain and Wallace's statistic; reported beside Spearman's rho, which the claims use)",
          {"seed", "att-gxi", "att-loo", "att-ig", "gxi-loo", "gxi-ig", "loo-ig", "gxi: methods - att", "loo: methods - att", "ig: methods - att"});
  for (size_t i = 0; i < res.size(); ++i) {
    const SeedResult& x = res[i];
    k.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), x.tau[kAtt][kGxi], x.tau[kAtt][kLoo], x.tau[kAtt][kIg], x.tau[kGxi][kLoo],
           x.tau[kGxi][kIg], x.tau[kLoo][kIg], x.methods_agree_tau[kGxi], x.methods_agree_tau[kLoo], x.methods_agree_tau[kIg]});
  }
  r.print(k);
  r.say("Kendall's tau-b (Jain and Wallace's statistic) of the same maps, averaged the same way; reported beside Spearman's rho, on which the");
  r.say("claims are decided. methods - att: the other two methods' mean tau with the method minus attention's.");
  Table m("methods", {"seed", "method", "mean rho with the other two methods", "rho with attention", "difference"});
  for (size_t i = 0; i < res.size(); ++i)
    for (int k = 1; k < kMaps; ++k)
      m.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), kMapName[k], res[i].methods_agree[k] + res[i].rho[kAtt][k], res[i].rho[kAtt][k],
             res[i].methods_agree[k]});
  r.print(m);
}

void print_counterfactuals(Report& r, const std::vector<SeedResult>& res, int permutations) {
  r.section("counterfactual attention: total variation distance of the next-token distribution from the model's own (mean over output tokens)");
  Table t("counterfactuals", {"seed", "permuted (median of draws), mean over sentences", "permuted, sentence median", "uniform, mean over sentences",
                              "uniform, sentence median"});
  for (size_t i = 0; i < res.size(); ++i) {
    std::vector<double> p, u;
    for (const Sentence& s : res[i].sentences) p.push_back(s.permuted_tv), u.push_back(s.uniform_tv);
    t.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), res[i].permuted_tv, median(p), res[i].uniform_tv, median(u)});
  }
  r.print(t);
  r.say(fmt::format("permuted: every cross-attention row of every layer and head shuffled over the source, {} draws per sentence; uniform: every row "
                    "1 / (source length).",
                    permutations));
}

void save_numbers(Report& r, const std::vector<SeedResult>& res, const TrainedModel& first) {
  auto& d = r.data();
  d["model"] = first.description;
  for (size_t i = 0; i < res.size(); ++i) {
    nlohmann::json j;
    for (int a = 0; a < kMaps; ++a)
      for (int b = a + 1; b < kMaps; ++b) {
        std::vector<double> v;
        for (const Sentence& s : res[i].sentences) v.push_back(s.rho[a][b]);
        j["per_sentence_spearman"][fmt::format("{}-{}", kMapShort[a], kMapShort[b])] = v;
        v.clear();
        for (const Sentence& s : res[i].sentences) v.push_back(s.tau[a][b]);
        j["per_sentence_kendall"][fmt::format("{}-{}", kMapShort[a], kMapShort[b])] = v;
      }
    for (int m = 1; m < kMaps; ++m) j["methods_agree_kendall"][kMapShort[m]] = res[i].methods_agree_tau[m];
    std::vector<double> p, u;
    for (const Sentence& s : res[i].sentences) p.push_back(s.permuted_tv), u.push_back(s.uniform_tv);
    j["per_sentence_permuted_tv"] = p;
    j["per_sentence_uniform_tv"] = u;
    j["teacher_forced_accuracy"] = res[i].tf_accuracy;
    d["seeds"][std::to_string(r.seed(static_cast<int>(i)))] = j;
  }
  const Sentence& ex = res[0].sentences.front();
  d["example"] = {{"source", words(first.src_words, ex.src)}, {"output", words(first.tgt_words, ex.out)}, {"attention", ex.maps[kAtt]},
                  {"gradient_x_input", ex.maps[kGxi]}, {"leave_one_out", ex.maps[kLoo]}, {"integrated_gradients", ex.maps[kIg]},
                  {"rollout", ex.rollout}};
}

void figure(Report& r, const std::vector<SeedResult>& res, const TrainedModel& first, bool control) {
  const Sentence& ex = res[0].sentences.front();
  const auto rows = words(first.tgt_words, ex.out), cols = words(first.src_words, ex.src);
  for (int m = 0; m < kMaps; ++m)
    r.add_panel(ValueMap{fmt::format("sentence 0, {}{}", kMapName[m], m == kAtt ? (control ? " (control: uniform)" : " (last layer, head mean)") : " (rows sum to 1)"),
                         "source token", "output token", rows, cols, m == kAtt ? ex.maps[m] : row_normalised(ex.maps[m]), false, "share"});
  // The agreement matrix, mean over seeds.
  ValueMap agree{"mean Spearman rho between maps (mean over seeds)", "map", "map", {}, {}, {}, false, "rho"};
  agree.lo = -1, agree.hi = 1;
  for (int a = 0; a < kMaps; ++a) {
    agree.row_labels.push_back(kMapShort[a]), agree.col_labels.push_back(kMapShort[a]);
    agree.values.emplace_back();
    for (int b = 0; b < kMaps; ++b) {
      std::vector<double> v;
      for (const auto& x : res) v.push_back(x.rho[a][b]);
      agree.values.back().push_back(mean(v));
    }
  }
  r.add_panel(agree);
  // Per-sentence distributions (first model): agreement pairs, then the counterfactual distances.
  Chart cdf{"per-sentence rho, first model (cumulative)", "Spearman rho (mean over output tokens)", "share of sentences", false, false, {}, {}};
  const std::pair<int, int> pairs[] = {{kAtt, kGxi}, {kAtt, kLoo}, {kAtt, kIg}, {kGxi, kLoo}, {kGxi, kIg}, {kLoo, kIg}};
  for (auto [a, b] : pairs) {
    std::vector<double> v;
    for (const Sentence& s : res[0].sentences) v.push_back(s.rho[a][b]);
    std::sort(v.begin(), v.end());
    ChartSeries c{fmt::format("{}-{}", kMapShort[a], kMapShort[b]), {}, {}, {}, {}, a != kAtt, ""};
    for (size_t i = 0; i < v.size(); ++i) c.x.push_back(v[i]), c.y.push_back(static_cast<double>(i + 1) / static_cast<double>(v.size()));
    cdf.series.push_back(std::move(c));
  }
  r.add_panel(cdf);
  Chart cf{"counterfactual attention, first model (cumulative over sentences)", "total variation of the next-token distribution", "share of sentences",
           false, false, {}, {}};
  for (int which : {0, 1}) {
    std::vector<double> v;
    for (const Sentence& s : res[0].sentences) v.push_back(which ? s.uniform_tv : s.permuted_tv);
    std::sort(v.begin(), v.end());
    ChartSeries c{which ? "uniform" : "permuted", {}, {}, {}, {}, which == 1, which ? "#2ca02c" : "#d62728"};
    for (size_t i = 0; i < v.size(); ++i) c.x.push_back(v[i]), c.y.push_back(static_cast<double>(i + 1) / static_cast<double>(v.size()));
    cf.series.push_back(std::move(c));
  }
  cf.legend = Chart::Corner::TopLeft;
  r.add_panel(cf);
}

template <class F>
std::vector<double> per_seed(const std::vector<SeedResult>& res, F f) {
  std::vector<double> v;
  for (const auto& x : res) v.push_back(f(x));
  return v;
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : ", ", x);
  return s;
}

void claims(Report& r, const std::vector<SeedResult>& res) {
  const auto agrees = per_seed(res, [](const SeedResult& x) { return x.attention_agrees; });
  r.paper("attention_agrees", agrees, "mean rho of attention with gxi, loo, ig, per seed: " + list(agrees));
  const char* ids[kMaps] = {"", "methods_agree_gxi", "methods_agree_loo", "methods_agree_ig"};
  for (int m = 1; m < kMaps; ++m) {
    const auto v = per_seed(res, [m](const SeedResult& x) { return x.methods_agree[m]; });
    r.paper(ids[m], v,
            fmt::format("{}: the other methods' mean rho with it minus attention's, per seed: {} (attention's rho: {})", kMapName[m], list(v),
                        list(per_seed(res, [m](const SeedResult& x) { return x.rho[kAtt][m]; }))));
  }
  const auto perm = per_seed(res, [](const SeedResult& x) { return x.permuted_tv; });
  r.paper("permuted_changes_output", perm, "mean over sentences of the total variation, per seed: " + list(perm));
  const auto unif = per_seed(res, [](const SeedResult& x) { return x.uniform_tv; });
  r.paper("uniform_changes_output", unif, "mean over sentences of the total variation, per seed: " + list(unif));
  double err = 0, scale = 0;
  int64_t rows = 0;
  for (const Sentence& s : res[0].sentences)
    for (size_t t = 0; t < s.ig_sum_error.size(); ++t) err += s.ig_sum_error[t], scale += s.ig_endpoint[t], ++rows;
  r.check("ig_complete", err / scale,
          fmt::format("mean |sum of IG - endpoint difference| {:.3g} against mean |endpoint difference| {:.3g}, over {} output tokens", err / rows,
                      scale / rows, rows));
}

void run(Report& r) {
  const size_t n_want = static_cast<size_t>(r.integer("sentences"));
  Settings st;
  st.ig_steps = static_cast<int>(r.integer("ig-steps"));
  st.permutations = static_cast<int>(r.integer("permutations"));
  st.max_extra = r.integer("max-extra");
  GF_CHECK(st.max_extra >= 1, "lab attribution: --max-extra must be at least 1, got {}", st.max_extra);
  st.control = r.control();
  GF_CHECK(st.ig_steps >= 1 && st.permutations >= 1, "lab attribution: --ig-steps and --permutations must be at least 1, got {} and {}", st.ig_steps,
           st.permutations);
  if (st.control)
    r.say("every cross-attention runs with a uniform map over the source, and that map is the attention compared with the methods");
  const int seeds = r.text("model").empty() ? r.seeds() : 1;
  if (seeds < r.seeds()) r.say("--model: one given model, so one run (--seeds applies to models trained here)");
  std::vector<SeedResult> results;
  TrainedModel first;
  for (int i = 0; i < seeds; ++i) {
    TrainedModel tm = trained_model(r, i);
    const size_t n = std::min(n_want, tm.test.size());
    results.push_back(run_seed(tm, n, st, r.seed(i)));
    r.say(fmt::format("  {} test sentences; teacher-forced token accuracy {:.3f}", n, results.back().tf_accuracy));
    if (i == 0) first = std::move(tm);
  }
  print_agreement(r, results);
  print_counterfactuals(r, results, st.permutations);
  save_numbers(r, results, first);
  figure(r, results, first, st.control);
  claims(r, results);
}

}  // namespace

Lab attribution_lab() {
  Lab l;
  l.name = "attribution";
  l.title = "is attention an explanation? attribution methods and counterfactual attention";
  l.reference = "Jain and Wallace 2019, arXiv:1902.10186; Wiegreffe and Pinter 2019, arXiv:1908.04626";
  l.question =
      "Does a trained translator's cross-attention rank the source tokens as gradient x input, leave-one-out and integrated gradients do, do those "
      "methods agree among themselves more than with attention, and does the output change when the attention is permuted or made uniform?";
  l.control = "every cross-attention replaced by a uniform map over the source";
  l.default_seeds = 3;
  l.options = trained_model_options(400);
  l.options.push_back({"sentences", Option::Int, "60", "test sentences studied per model"});
  l.options.push_back({"ig-steps", Option::Int, "32", "integrated gradients: midpoint-rule steps on the path from the zero embedding"});
  l.options.push_back({"permutations", Option::Int, "8", "permuted-attention draws per sentence"});
  l.options.push_back({"max-extra", Option::Int, "50", "greedy translations stop after the source's length + this many tokens"});
  add_real_data_options(l.options);  // --data: the translators trained on a real task (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

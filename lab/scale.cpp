// Lab `scale`: why attention divides the scores by sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).
//
// The paper: "for large values of d_k, the dot products grow large in magnitude, pushing the
// softmax function into regions where it has extremely small gradients"; if q and k have
// independent components of mean 0 and variance 1, q . k has mean 0 and variance d_k.
//
// Here, three parts:
//  1. the paper's assumption itself: q and k drawn N(0, 1) for d_k from 8 to 512; Var(q . k) = d_k
//     is then an identity, so this part only checks the arithmetic (exact checks);
//  2. the paper's claim on a model: q, k and v from the initialised in_proj of a one-head Pre-LN
//     layer reading real sentences of the built-in corpus, for d_k from 16 to 512: the variance of
//     the scores, the softmax's saturation and the gradient that backward carries through a whole
//     attention, softmax(Q K^T * scale) V, unscaled and scaled. The claims are the dose-response
//     (lab/report.h): per seed, the slope of log10(gradient) on log2(d_k) over the --dks levels;
//  3. the intervention: the same small translator trained twice on a synthetic task, with and
//     without 1/sqrt(d_k) (MultiheadAttention::score_scale), from the same initialisation and batches.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "tensor/kernels/random.h"

namespace gf::lab {
namespace {

struct Measure {
  double score_var = 0;     // variance of the (scaled or unscaled) scores
  double max_prob = 0;      // mean over rows of the largest softmax probability
  double entropy = 0;       // mean over rows of the softmax entropy, in nats
  double saturated = 0;     // share of rows whose largest probability exceeds 0.99
  double jacobian = 0;      // median over rows of || diag(p) - p p^T ||_F
  double grad = 0;          // median over rows of |d loss / d scores| / |d loss / d p|, by backward
  double grad_mean = 0;     // mean over rows of the same
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One attention softmax(q k^T * scale) v, forward and backward with the upstream gradient, float64:
// q (B, L, dk), k and v (B, S, dk), upstream (B, L, dk).
Measure measure_qkv(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& upstream, double scale) {
  Variable q(q_in, true), k(k_in), v(v_in);
  const int64_t L = q.size(1), S = k.size(1);
  const int64_t B = q.size(0);

  Variable scores = matmul(q, transpose(k, -2, -1)) * scale;  // (B, L, S)
  scores.retain_grad();
  Variable p = softmax(scores);                               // (B, L, S)
  Variable out = matmul(p, v);                                // (B, L, dk)
  Variable loss = sum(out * Variable(upstream));              // (): <out, upstream>
  loss.backward();

  Measure m;
  const Tensor s = scores.data(), w = p.data();
  double ss = 0, mean = 0;
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) mean += s.flat_get(i);
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) ss += (s.flat_get(i) - mean) * (s.flat_get(i) - mean);
  m.score_var = ss / static_cast<double>(n - 1);

  const double* pw = w.contiguous().data<double>();
  const int64_t rows = B * L;
  std::vector<double> jac, ratio;
  // What the softmax passes back: the gradient at its input (the scores) against that at its output.
  const Tensor gs = scores.grad().contiguous();                                        // (B, L, S)
  const Tensor gp = matmul(Variable(upstream), transpose(v, -2, -1)).data().contiguous();  // (B, L, S): d loss / d p
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = pw + r * S;
    double mx = 0, h = 0, s2 = 0, s3 = 0;
    for (int64_t j = 0; j < S; ++j) {
      mx = std::max(mx, row[j]);
      if (row[j] > 0) h -= row[j] * std::log(row[j]);
      s2 += row[j] * row[j];
      s3 += row[j] * row[j] * row[j];
    }
    m.max_prob += mx;
    m.entropy += h;
    m.saturated += mx > 0.99;
    // || diag(p) - p p^T ||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2
    jac.push_back(std::sqrt(std::max(0.0, s2 - 2 * s3 + s2 * s2)));
    double a = 0, b = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double x = gs.data<double>()[r * S + j], y = gp.data<double>()[r * S + j];
      a += x * x, b += y * y;
    }
    ratio.push_back(std::sqrt(a / b));
  }
  m.max_prob /= rows, m.entropy /= rows, m.saturated /= rows;
  m.jacobian = median(jac);
  m.grad = median(ratio);
  m.grad_mean = spread(ratio).mean;
  return m;
}

// Part 1: B sequences of L queries against S keys of width dk drawn N(0, 1), float64.
Measure measure(int64_t dk, bool scaled, int64_t B, int64_t L, int64_t S, uint64_t seed) {
  Generator gen(seed);
  const Tensor q = kernels::randn({B, L, dk}, gen, DType::Float64);         // (B, L, dk)
  const Tensor k = kernels::randn({B, S, dk}, gen, DType::Float64);         // (B, S, dk)
  const Tensor v = kernels::randn({B, S, dk}, gen, DType::Float64);         // (B, S, dk)
  const Tensor upstream = kernels::randn({B, L, dk}, gen, DType::Float64);  // (B, L, dk): d loss / d output
  return measure_qkv(q, k, v, upstream, scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0);
}

// Part 2: `count` sentences of the corpus's most frequent source length (which ones: drawn by the
// seed) through the embedding and the first LayerNorm of an initialised one-head Pre-LN layer of
// width dk, then its in_proj: q, k, v (count, len, dk), float64, and a random upstream gradient.
struct QKV {
  Tensor q, k, v, upstream;
};
QKV real_qkv(const IdData& data, int64_t dk, int64_t count, uint64_t seed) {
  std::map<size_t, int64_t> by_len;
  for (const auto& p : data.train) ++by_len[p.src.size()];
  size_t len = 0;
  for (const auto& [l, n] : by_len)
    if (n > by_len[len]) len = l;
  std::vector<size_t> idx;
  for (size_t i = 0; i < data.train.size(); ++i)
    if (data.train[i].src.size() == len) idx.push_back(i);
  train::seeded_shuffle(idx, seed);
  idx.resize(std::min(idx.size(), static_cast<size_t>(count)));
  std::vector<int64_t> ids;
  for (size_t i : idx) ids.insert(ids.end(), data.train[i].src.begin(), data.train[i].src.end());
  const int64_t n = static_cast<int64_t>(idx.size()), L = static_cast<int64_t>(len);

  nn::Seq2SeqTransformer model(small_model(data, dk, 1, 1, dk, true), seed);
  model.to(DType::Float64);
  NoGradGuard ng;
  const auto& layer = (*model.transformer->encoder->layers)[0];
  const Variable h = layer.norm1->forward(model.embed_src(Tensor::from_vector(ids, {n, L})));  // (n, L, dk): what the attention reads
  const Variable w = layer.self_attn->in_proj_weight;  // (3 dk, dk)
  const Variable bias = layer.self_attn->in_proj_bias;  // (3 dk)
  auto project = [&](int64_t part) {
    return linear(h, narrow(w, 0, part * dk, dk), narrow(bias, 0, part * dk, dk)).data();  // (n, L, dk)
  };
  Generator gen(seed * 7919 + static_cast<uint64_t>(dk));
  return {project(0), project(1), project(2), kernels::randn({n, L, dk}, gen, DType::Float64)};
}

// ---- part 1: N(0, 1) draws ----
struct Row {
  int64_t dk;
  Measure un, sc;  // means over seeds
  Spread grad_un, grad_sc;
};

std::vector<Row> synthetic(Report& r) {
  const int64_t B = r.integer("batch"), L = r.integer("queries"), S = r.integer("keys");
  const std::vector<int64_t> dks = {8, 16, 32, 64, 128, 256, 512};
  r.section(fmt::format("1. the paper's assumption: q, k, v ~ N(0, 1); {} sequences of {} queries x {} keys per d_k, {} seeds; float64", B, L, S,
                        r.seeds()));
  std::vector<Row> rows;
  for (int64_t dk : dks) {
    Row row{dk, {}, {}, {}, {}};
    std::vector<double> gu, gs;
    for (int i = 0; i < r.seeds(); ++i) {
      for (bool scaled : {false, true}) {
        Measure m = measure(dk, scaled, B, L, S, r.seed(i) * 7919 + static_cast<uint64_t>(dk));
        Measure& acc = scaled ? row.sc : row.un;
        acc.score_var += m.score_var / r.seeds(), acc.max_prob += m.max_prob / r.seeds(), acc.entropy += m.entropy / r.seeds();
        acc.saturated += m.saturated / r.seeds(), acc.jacobian += m.jacobian / r.seeds();
        acc.grad += m.grad / r.seeds(), acc.grad_mean += m.grad_mean / r.seeds();
        (scaled ? gs : gu).push_back(m.grad);
      }
    }
    row.grad_un = spread(gu), row.grad_sc = spread(gs);
    rows.push_back(row);
  }
  Table t("scale", {"d_k", "var unscaled", "var scaled", "max p unscaled", "max p scaled", "H unscaled", "H scaled", "saturated unscaled",
                    "|J| unscaled", "|J| scaled", "grad unscaled", "grad scaled", "mean grad unscaled"});
  for (const auto& x : rows)
    t.row({x.dk, x.un.score_var, x.sc.score_var, x.un.max_prob, x.sc.max_prob, x.un.entropy, x.sc.entropy, x.un.saturated, x.un.jacobian,
           x.sc.jacobian, x.un.grad, x.sc.grad, x.un.grad_mean});
  r.print(t);
  r.say(fmt::format("H: mean softmax entropy in nats (uniform over {} keys: {:.3f}); |J|: median over rows of the Frobenius norm", S,
                    std::log(static_cast<double>(S))));
  r.say("of the softmax Jacobian diag(p) - p p^T; saturated: share of rows whose largest probability exceeds 0.99;");
  r.say("grad: median over rows of |d loss / d scores| / |d loss / d p| in softmax(Q K^T s) V, measured by backward (the");
  r.say("mean over rows: last column; it falls more slowly, carried by the rows that have not saturated).");
  r.say("With q and k drawn N(0, 1), Var(q . k) = d_k is arithmetic, not evidence: parts 2 and 3 test the paper on a model.");
  return rows;
}

void synthetic_figure(Report& r, const std::vector<Row>& rows) {
  std::vector<double> x, var_un, var_sc, mp_un, mp_sc, j_un, j_sc, gq_un, gq_sc, lo_un, hi_un, lo_sc, hi_sc, gm_un;
  for (const auto& row : rows) {
    x.push_back(static_cast<double>(row.dk));
    var_un.push_back(row.un.score_var), var_sc.push_back(row.sc.score_var);
    mp_un.push_back(row.un.max_prob), mp_sc.push_back(row.sc.max_prob);
    j_un.push_back(row.un.jacobian), j_sc.push_back(row.sc.jacobian);
    gq_un.push_back(row.un.grad), gq_sc.push_back(row.sc.grad), gm_un.push_back(row.un.grad_mean);
    lo_un.push_back(row.grad_un.min), hi_un.push_back(row.grad_un.max);
    lo_sc.push_back(row.grad_sc.min), hi_sc.push_back(row.grad_sc.max);
  }
  auto& d = r.data()["synthetic"];
  d["d_k"] = x;
  d["unscaled"] = {{"score_var", var_un}, {"max_prob", mp_un}, {"jacobian_norm_median", j_un}, {"grad_ratio_median", gq_un},
                   {"grad_ratio_mean", gm_un}};
  d["scaled"] = {{"score_var", var_sc}, {"max_prob", mp_sc}, {"jacobian_norm_median", j_sc}, {"grad_ratio_median", gq_sc}};
  r.add_panel(Chart{"1. N(0,1) draws: variance of the scores", "d_k", "Var", true, true,
                    {{"unscaled q.k", x, var_un, {}, {}, false}, {"scaled q.k/sqrt(d_k)", x, var_sc, {}, {}, false}, {"d_k (the paper)", x, x, {}, {}, true}},
                    x});
  r.add_panel(Chart{"1. N(0,1) draws: gradient through the softmax (band: seeds)", "d_k", "|d scores| / |d p|", true, true,
                    {{"unscaled, median row", x, gq_un, lo_un, hi_un, false, "#1f77b4"},
                     {"unscaled, mean", x, gm_un, {}, {}, true, "#1f77b4"},
                     {"scaled, median row", x, gq_sc, lo_sc, hi_sc, false, "#d62728"}},
                    x});
}

// ---- part 2: an initialised layer reading real sentences ----
struct RealResult {
  std::vector<double> dks;
  std::vector<std::vector<double>> var[2], grad[2], sat[2];  // [scaled] per seed, per d_k
  std::vector<double> slope_un;                              // per seed: log-log slope of Var on d_k
};

// The d_k levels of part 2, the dose-response's (lab/report.h): 4 or more, increasing.
std::vector<double> real_levels(Report& r) {
  std::vector<double> dks;
  for (int64_t dk : parse_increasing_ints(r.text("dks"), "lab scale: --dks")) dks.push_back(static_cast<double>(dk));
  GF_CHECK(dks.size() >= 4, "lab scale: --dks needs 4 or more d_k levels for the dose-response, got {}", dks.size());
  return dks;
}

// log10 of the median gradient through the softmax of seed `seed`'s initialised layer at d_k.
double real_log_gradient(const IdData& data, int64_t dk, int64_t count, uint64_t seed, bool scaled) {
  const QKV x = real_qkv(data, dk, count, seed);
  return std::log10(measure_qkv(x.q, x.k, x.v, x.upstream, scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0).grad);
}

RealResult real_embeddings(Report& r, const IdData& data) {
  RealResult res;
  res.dks = real_levels(r);
  std::vector<int64_t> dks;
  for (double dk : res.dks) dks.push_back(static_cast<int64_t>(dk));
  const int64_t count = r.integer("sentences");
  for (int sc = 0; sc < 2; ++sc)
    for (int i = 0; i < r.seeds(); ++i) {
      std::vector<double> var, grad, sat;
      for (int64_t dk : dks) {
        const QKV x = real_qkv(data, dk, count, r.seed(i));
        const Measure m = measure_qkv(x.q, x.k, x.v, x.upstream, sc ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0);
        var.push_back(m.score_var), grad.push_back(m.grad), sat.push_back(m.saturated);
      }
      res.var[sc].push_back(var), res.grad[sc].push_back(grad), res.sat[sc].push_back(sat);
    }
  for (int i = 0; i < r.seeds(); ++i) {
    res.slope_un.push_back(loglog_slope(res.dks, res.var[0][i]));
  }
  r.section(fmt::format("2. q, k, v from the initialised in_proj of a one-head Pre-LN layer reading {} real sentences (built-in corpus, "
                        "its most frequent source length; the seed draws the weights and the sentences), float64; means over {} seeds",
                        count, r.seeds()));
  Table t("real", {"d_k", "var unscaled", "var scaled", "saturated unscaled", "saturated scaled", "grad unscaled", "grad scaled"});
  const std::vector<Spread> vu = spread_per_column(res.var[0]), vs = spread_per_column(res.var[1]), su = spread_per_column(res.sat[0]),
                            ss = spread_per_column(res.sat[1]), gu = spread_per_column(res.grad[0]), gs = spread_per_column(res.grad[1]);
  for (size_t k = 0; k < dks.size(); ++k) t.row({dks[k], vu[k].mean, vs[k].mean, su[k].mean, ss[k].mean, gu[k].mean, gs[k].mean});
  r.print(t);
  r.say("The attention reads LayerNorm(embedding * sqrt(d_k) + position): components of variance about 1, which Xavier's in_proj maps to");
  r.say("q and k components of variance about 1/2, so Var(q . k) is about d_k / 4: the paper's d_k law with a smaller constant.");
  r.add_panel(Chart{"2. initialised layer, real sentences: variance of the scores (band: seeds)", "d_k", "Var", true, true,
                    {band_series("unscaled", res.dks, vu, "#1f77b4"), band_series("scaled", res.dks, vs, "#d62728")}, res.dks});
  r.add_panel(Chart{"2. initialised layer, real sentences: gradient through the softmax (band: seeds)", "d_k", "|d scores| / |d p|, median row",
                    true, true, {band_series("unscaled", res.dks, gu, "#1f77b4"), band_series("scaled", res.dks, gs, "#d62728")}, res.dks});
  auto& d = r.data()["real"];
  d["d_k"] = res.dks;
  d["unscaled"] = {{"score_var", res.var[0]}, {"grad_ratio_median", res.grad[0]}, {"saturated", res.sat[0]}};
  d["scaled"] = {{"score_var", res.var[1]}, {"grad_ratio_median", res.grad[1]}, {"saturated", res.sat[1]}};
  return res;
}

// ---- part 3: training with and without 1/sqrt(d_k) ----
struct TrainResult {
  std::vector<double> nll[2];                     // [scaled] per seed: held-out NLL after training
  std::vector<std::vector<double>> losses[2];     // [scaled] per seed
};

// One model on seed i's data, weights and batches, trained with or without 1/sqrt(d_k).
struct Trained {
  double nll;                 // held-out, teacher-forced (the first loss when training diverged)
  std::vector<double> losses;  // per step, NaN after a divergence stop
};

Trained train_one(Report& r, int i, bool scaled) {
  const int64_t D = r.integer("train-d-model"), heads = r.integer("train-heads");
  const IdData data = synthetic_task(r.text("task"), r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("train"),
                                     r.integer("eval"), r.seed(i));
  nn::Seq2SeqTransformer model(small_model(data, D, heads, r.integer("train-layers"), 4 * D, false), r.seed(i));
  if (!scaled)
    for (auto* a : attention_modules(model)) a->score_scale = 1.0;
  FitOptions fo;
  fo.steps = r.integer("steps");
  fo.lr = r.real("lr");
  fo.warmup = fo.steps / 10;
  fo.max_tokens = r.integer("max-tokens");
  fo.seed = r.seed(i);
  FitResult f = fit(model, data.train, fo);
  model.eval();
  f.losses.resize(static_cast<size_t>(fo.steps), NAN);
  return {f.diverged ? f.losses.front() : teacher_forced(model, data.test).nll, f.losses};
}

TrainResult train_runs(Report& r) {
  const int64_t D = r.integer("train-d-model"), heads = r.integer("train-heads");
  TrainResult res;
  for (int i = 0; i < r.seeds(); ++i)
    for (int sc = 1; sc >= 0; --sc) {
      Trained t = train_one(r, i, sc == 1);
      res.nll[sc].push_back(t.nll), res.losses[sc].push_back(std::move(t.losses));
    }
  r.section(fmt::format("3. training a Post-LN translator (d_model {}, {} head(s): d_k {}, {} layers) on the {} task, {} steps of Adam at lr {}, "
                        "with and without 1/sqrt(d_k); the seed draws the data, the weights and the batches",
                        D, heads, D / heads, r.integer("train-layers"), r.text("task"), r.integer("steps"), r.real("lr")));
  Table t("training", {"seed", "held-out NLL scaled", "held-out NLL unscaled", "unscaled - scaled"});
  for (int i = 0; i < r.seeds(); ++i)
    t.row({static_cast<int64_t>(r.seed(i)), res.nll[1][i], res.nll[0][i], res.nll[0][i] - res.nll[1][i]});
  r.print(t);
  std::vector<ChartSeries> curves;
  for (int sc = 1; sc >= 0; --sc) {
    const std::vector<Spread> sp = spread_per_column(res.losses[sc]);
    ChartSeries c{sc ? "scaled 1/sqrt(d_k)" : "unscaled", {}, {}, {}, {}, !sc, sc ? "#d62728" : "#1f77b4"};
    for (size_t k = 0; k < sp.size(); ++k) c.x.push_back(static_cast<double>(k + 1)), c.y.push_back(sp[k].mean), c.lo.push_back(sp[k].min), c.hi.push_back(sp[k].max);
    curves.push_back(c);
  }
  r.add_panel(Chart{"3. training loss with and without 1/sqrt(d_k) (band: seeds)", "step", "cross-entropy", false, true, curves, {}});
  r.data()["training"] = {{"nll_scaled", res.nll[1]}, {"nll_unscaled", res.nll[0]}};
  return res;
}

// --control: the placebo. A pool of models trained with 1/sqrt(d_k), each on its own seed; the
// training claim's difference between two groups of them. Parts 1 and 2 compare the arms on the
// same draws, and their paper claims each hold one arm against a threshold: no contrast to split.
void placebo(Report& r) {
  const int n = r.placebo_pool();
  r.say(fmt::format("PLACEBO: {} models trained with 1/sqrt(d_k) on seeds {}-{}; the training claim compares two groups of them, unpaired.", n,
                    r.seed(0), r.seed(n - 1)));
  std::vector<double> nll;
  Table t("the pool: scaled models", {"seed", "held-out NLL"});
  for (int i = 0; i < n; ++i) {
    nll.push_back(train_one(r, i, true).nll);
    t.row({static_cast<int64_t>(r.seed(i)), nll.back()});
  }
  r.print(t);
  // The unscaled trend's placebo: initialised layers at ONE d_k (the middle level), each on its own
  // seed, put in the levels' places, so that the true trend is zero.
  const std::vector<double> levels = real_levels(r);
  const int k = static_cast<int>(levels.size()), m = r.trend_placebo_pool(k);
  const int64_t mid = static_cast<int64_t>(levels[levels.size() / 2]);
  const IdData corpus = builtin_corpus(r.integer("pairs"), 1);
  std::vector<double> at_mid;
  for (int j = 0; j < m; ++j) at_mid.push_back(real_log_gradient(corpus, mid, r.integer("sentences"), r.seed(j), false));
  r.say(fmt::format("PLACEBO: {} initialised layers at d_k {} only (seeds {}-{}), unscaled, log10 median gradient: mean {:.3f}, from {:.3f} to {:.3f}; "
                    "the trend claim reads {} of them per seed as d_k {}.", m, mid, r.seed(0), r.seed(m - 1), spread(at_mid).mean,
                    spread(at_mid).min, spread(at_mid).max, k, fmt::join(levels, ", ")));
  r.placebo_trend("unscaled_gradient_trend", k, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(at_mid[static_cast<size_t>(j)]);
    return trend(levels, y, TrendKind::LogSlope);
  }, fmt::format("layers at d_k {} with different seeds as the levels", mid));
  r.no_placebo("scaled_gradient_trend", "a claim of no fall (above a negative threshold): a placebo's zero trend is what it claims");
  r.placebo("unscaled_trains_worse", [&](int a, int b) { return nll[b] - nll[a]; }, "scaled model a as 'scaled', b as 'unscaled'");
}

void run(Report& r) {
  if (r.placebo_mode()) return placebo(r);
  const std::vector<Row> rows = synthetic(r);
  synthetic_figure(r, rows);
  const IdData corpus = builtin_corpus(r.integer("pairs"), 1);
  const RealResult real = real_embeddings(r, corpus);
  // The dose-response on d_k: per seed, the slope of log10(median gradient) on log2(d_k), since d_k
  // multiplies (its levels are doublings) and the gradient falls by factors: a power law is a line.
  auto dose = [&](int sc) {
    std::vector<std::vector<double>> lg;
    for (const auto& seed : real.grad[sc]) {
      lg.emplace_back();
      for (double g : seed) lg.back().push_back(std::log10(g));
    }
    return r.dose_response({sc ? "d_k, scaled" : "d_k, unscaled", "d_k", sc ? "log10 gradient through the softmax, scaled"
                                                                          : "log10 gradient through the softmax, unscaled",
                            real.dks, lg, TrendKind::LogSlope, true, sc ? "#d62728" : "#1f77b4"});
  };
  const std::vector<double> trend_un = dose(0), trend_sc = dose(1);  // printed with part 2
  const TrainResult tr = train_runs(r);

  // ---- claims (lab/claims.cpp's rows for scale) ----
  std::vector<double> x, var_un, var_sc;
  for (const auto& row : rows) x.push_back(static_cast<double>(row.dk)), var_un.push_back(row.un.score_var), var_sc.push_back(row.sc.score_var);
  const double slope = loglog_slope(x, var_un);
  r.check("var_identity", std::abs(slope - 1),
          fmt::format("slope {:.3f}; Var {:.1f} at d_k 8, {:.1f} at d_k 512", slope, var_un.front(), var_un.back()));
  auto flat = [](const std::vector<double>& v) {
    Spread s = spread(v);
    return s.max / s.min;
  };
  std::vector<double> mp_sc, j_sc, g_sc;
  for (const auto& row : rows) mp_sc.push_back(row.sc.max_prob), j_sc.push_back(row.sc.jacobian), g_sc.push_back(row.sc.grad);
  const double worst = std::max({flat(var_sc), flat(mp_sc), flat(j_sc), flat(g_sc)});
  r.check("scaled_identity", worst,
          fmt::format("max/min over d_k: Var {:.3f}, max p {:.3f}, median |J| {:.3f}, gradient {:.3f}", flat(var_sc), flat(mp_sc), flat(j_sc), flat(g_sc)));
  r.check("real_var_grows", real.slope_un, fmt::format("log-log slope of Var(q . k) on d_k per seed: {:.3f}", fmt::join(real.slope_un, ", ")));
  r.paper("unscaled_gradient_trend", trend_un,
          fmt::format("slope of log10(median gradient through the softmax) per doubling of d_k, unscaled, per seed: {:.4f}", fmt::join(trend_un, ", ")));
  r.paper("scaled_gradient_trend", trend_sc, fmt::format("the same, scaled, per seed: {:.4f}", fmt::join(trend_sc, ", ")));
  std::vector<double> worse;
  for (size_t i = 0; i < tr.nll[0].size(); ++i) worse.push_back(tr.nll[0][i] - tr.nll[1][i]);
  r.paper("unscaled_trains_worse", worse, fmt::format("held-out NLL unscaled - scaled per seed: {:.3f}", fmt::join(worse, ", ")));
}

}  // namespace

Lab scale_lab() {
  Lab l;
  l.name = "scale";
  l.title = "why attention scales the scores by 1/sqrt(d_k)";
  l.reference = "Vaswani et al. 2017, arXiv:1706.03762 (section 3.2.1)";
  l.question = "How do the scores, the softmax and its gradient change with d_k, with and without the scaling, in an initialised "
               "layer reading real sentences, and does a model train worse without it?";
  l.control = "placebo: two groups of seeds of the model trained with 1/sqrt(d_k); initialised layers of one d_k in every d_k's place";
  l.placebo = true;
  l.default_seeds = 5;
  l.options = {{"batch", Option::Int, "16", "(1) sequences per d_k and seed"},
               {"queries", Option::Int, "32", "(1) queries per sequence"},
               {"keys", Option::Int, "32", "(1) keys per sequence"},
               {"pairs", Option::Int, "2000", "(2) built-in corpus pairs"},
               {"sentences", Option::Int, "32", "(2) sentences of one length read per d_k and seed"},
               {"dks", Option::Text, "16,32,64,128,256,512", "(2) the d_k levels of the dose-response (4 or more, increasing)"}};
  const std::vector<Option> task = task_options("(3) ");
  l.options.insert(l.options.end(), task.begin(), task.end());
  l.options.insert(l.options.end(), {{"train-d-model", Option::Int, "128", "(3) model width (feed-forward 4x)"},
                                     {"train-heads", Option::Int, "1", "(3) heads (d_k = width / heads)"},
                                     {"train-layers", Option::Int, "2", "(3) encoder and decoder layers each"},
                                     {"steps", Option::Int, "200", "(3) training steps per arm"},
                                     {"lr", Option::Real, "0.001", "(3) Adam learning rate (10% linear warm-up)"},
                                     {"max-tokens", Option::Int, "1024", "(3) padded tokens per batch"}});
  l.run = run;
  return l;
}

}  // namespace gf::lab

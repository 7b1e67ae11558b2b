// Lab `scale`: why attention divides the scores by sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).
//
// The paper: "for large values of d_k, the dot products grow large in magnitude, pushing the
// softmax function into regions where it has extremely small gradients"; if q and k have
// independent components of mean 0 and variance 1, q . k has mean 0 and variance d_k.
//
// Here, three parts (lab/scale.h):
//  1. (arms "N(0,1):*", the levels d_k from 8 to 512) the paper's assumption itself: q and k drawn
//     N(0, 1); Var(q . k) = d_k is then an identity, so this part only checks the arithmetic, on
//     the means over seeds (exact checks);
//  2. (arms "real:*", the levels --dks) the paper's claim on a model: q, k and v from the
//     initialised in_proj of a one-head Pre-LN layer reading real sentences of the built-in corpus:
//     the variance of the scores, the softmax's saturation and the gradient that backward carries
//     through a whole attention, softmax(Q K^T * scale) V, unscaled and scaled. The claims are the
//     dose-responses: per seed, the slope of log10(gradient) on log2(d_k);
//  3. (arms "train:*") the intervention: the same small translator trained twice on a synthetic
//     task, with and without 1/sqrt(d_k) (MultiheadAttention::score_scale), from the same
//     initialisation and batches.
// --control is a placebo: models trained with 1/sqrt(d_k) in both arms of the training claim, and
// initialised layers at the middle d_k, unscaled, in every level's place of the unscaled trend.
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "lab/runner.h"
#include "lab/scale.h"

namespace gf::lab {
namespace {

struct Settings {
  int64_t batch = 16, queries = 32, keys = 32, pairs = 2000, sentences = 32;
  std::vector<int64_t> dks{16, 32, 64, 128, 256, 512};
  TaskSettings task;
  int64_t train_d_model = 128, train_heads = 1, train_layers = 2, steps = 200;
  double lr = 0.001;
  int64_t max_tokens = 1024;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = {{"batch", &S::batch, "(1) sequences per d_k and seed"},
                 {"queries", &S::queries, "(1) queries per sequence"},
                 {"keys", &S::keys, "(1) keys per sequence"},
                 {"pairs", &S::pairs, "(2) built-in corpus pairs"},
                 {"sentences", &S::sentences, "(2) sentences of one length read per d_k and seed"},
                 {"dks", &S::dks, "(2) the d_k levels of the dose-response (4 or more, increasing)"}};
  f.add(Fields<S>::nest(&S::task, task_fields("(3) ")));
  return f.add({{"train-d-model", &S::train_d_model, "(3) model width (feed-forward 4x)"},
                {"train-heads", &S::train_heads, "(3) heads (d_k = width / heads)"},
                {"train-layers", &S::train_layers, "(3) encoder and decoder layers each"},
                {"steps", &S::steps, "(3) training steps per arm"},
                {"lr", &S::lr, "(3) Adam learning rate (10% linear warm-up)"},
                {"max-tokens", &S::max_tokens, "(3) padded tokens per batch"}});
}

void validate(const Settings& s) {
  GF_CHECK(s.dks.size() >= 4, "lab scale: --dks needs 4 or more d_k levels for the dose-response, got {}", s.dks.size());
  for (size_t k = 0; k < s.dks.size(); ++k)
    GF_CHECK(s.dks[k] >= 1 && (k == 0 || s.dks[k] > s.dks[k - 1]), "lab scale: --dks must be increasing positive widths, got {}", fmt::join(s.dks, ","));
  GF_CHECK(s.train_heads >= 1 && s.train_d_model % s.train_heads == 0, "lab scale: --train-heads ({}) must divide --train-d-model ({})", s.train_heads,
           s.train_d_model);
}

// Part 1's d_k levels: the paper's assumption over the range of its Table 1 and beyond.
const std::vector<double> kNormalDks{8, 16, 32, 64, 128, 256, 512};

std::vector<double> real_dks(const Settings& s) { return {s.dks.begin(), s.dks.end()}; }

std::vector<ArmSpec> arms(const Settings& s) {
  return {{"N(0,1):unscaled", kNormalDks}, {"N(0,1):scaled", kNormalDks}, {"real:unscaled", real_dks(s)}, {"real:scaled", real_dks(s)},
          {"train:scaled", {}},            {"train:unscaled", {}}};
}

// One run: the softmax's statistics at one d_k (parts 1, 2), or a training run (part 3).
struct Measured {
  uint64_t seed = 0;
  SoftmaxStats st;
  ScaleTraining trained;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (!m.trained.losses.empty())
    j = {{"test_nll", m.trained.nll}};
  else
    j = {{"score_var", m.st.score_var}, {"max_prob", m.st.max_prob}, {"entropy", m.st.entropy}, {"saturated", m.st.saturated},
         {"jacobian_norm_median", m.st.jacobian}, {"grad_ratio_median", m.st.grad}, {"grad_ratio_mean", m.st.grad_mean}};
}

// The corpus of part 2, and the seed's task of part 3 (both of its arms train on it).
struct Context {
  IdData corpus;
  std::map<uint64_t, IdData> task;
};

Context prepare(const Settings& s, Output&) { return {builtin_corpus(s.pairs, 1), {}}; }

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  Measured m{.seed = k.seed};
  const bool scaled = k.cond.arm.ends_with(":scaled");
  if (k.cond.arm.starts_with("train:")) {
    if (!c.task.count(k.seed)) c.task = {{k.seed, s.task.make(k.seed)}};  // seeds come one after another
    const IdData& data = c.task.at(k.seed);
    FitOptions fo;
    fo.steps = s.steps, fo.lr = s.lr, fo.warmup = fo.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = k.seed;
    m.trained = train_scaled(small_model(data, s.train_d_model, s.train_heads, s.train_layers, 4 * s.train_d_model, false), data, fo, scaled, k.seed);
    return m;
  }
  const int64_t dk = static_cast<int64_t>(k.cond.level);
  if (k.cond.arm.starts_with("N(0,1)")) {
    m.st = normal_softmax_stats(dk, scaled, s.batch, s.queries, s.keys, k.seed * 7919 + static_cast<uint64_t>(dk));
  } else {
    const QKV x = real_qkv(c.corpus, dk, s.sentences, k.seed);
    m.st = softmax_stats(x.q, x.k, x.v, x.upstream, scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0);
  }
  return m;
}

// ---------------------------------------------------------------- tables and figures

// Part 1: the mean over seeds of every statistic at one d_k.
SoftmaxStats seed_mean(const Grid<Measured>& g, const std::string& arm, double dk) {
  SoftmaxStats acc;
  for (const Measured* x : g.of(arm, dk)) {
    const SoftmaxStats& m = x->st;
    acc.score_var += m.score_var / g.seeds(), acc.max_prob += m.max_prob / g.seeds(), acc.entropy += m.entropy / g.seeds();
    acc.saturated += m.saturated / g.seeds(), acc.jacobian += m.jacobian / g.seeds();
    acc.grad += m.grad / g.seeds(), acc.grad_mean += m.grad_mean / g.seeds();
  }
  return acc;
}
// One statistic of part 1's seed means at every d_k.
std::vector<double> means_over_dk(const Grid<Measured>& g, const std::string& arm, double SoftmaxStats::*stat) {
  std::vector<double> out;
  for (double dk : kNormalDks) out.push_back(seed_mean(g, arm, dk).*stat);
  return out;
}
// One statistic per seed at every level of an arm: rows[seed][level].
std::vector<std::vector<double>> per_seed_levels(const Grid<Measured>& g, const std::string& arm, double SoftmaxStats::*stat) {
  std::vector<std::vector<double>> rows(static_cast<size_t>(g.seeds()));
  for (int i = 0; i < g.seeds(); ++i)
    for (double dk : g.arm(arm).levels) rows[static_cast<size_t>(i)].push_back(g.at(arm, dk, i).st.*stat);
  return rows;
}

void describe_normal(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("1. the paper's assumption: q, k, v ~ N(0, 1); {} sequences of {} queries x {} keys per d_k, {} seeds; float64", s.batch,
                        s.queries, s.keys, g.seeds()));
  Table t("scale", {"d_k", "var unscaled", "var scaled", "max p unscaled", "max p scaled", "H unscaled", "H scaled", "saturated unscaled",
                    "|J| unscaled", "|J| scaled", "grad unscaled", "grad scaled", "mean grad unscaled"});
  for (double dk : kNormalDks) {
    const SoftmaxStats un = seed_mean(g, "N(0,1):unscaled", dk), sc = seed_mean(g, "N(0,1):scaled", dk);
    t.row({static_cast<int64_t>(dk), un.score_var, sc.score_var, un.max_prob, sc.max_prob, un.entropy, sc.entropy, un.saturated, un.jacobian, sc.jacobian,
           un.grad, sc.grad, un.grad_mean});
  }
  r.print(t);
  r.say(fmt::format("H: mean softmax entropy in nats (uniform over {} keys: {:.3f}); |J|: median over rows of the Frobenius norm", s.keys,
                    std::log(static_cast<double>(s.keys))));
  r.say("of the softmax Jacobian diag(p) - p p^T; saturated: share of rows whose largest probability exceeds 0.99;");
  r.say("grad: median over rows of |d loss / d scores| / |d loss / d p| in softmax(Q K^T s) V, measured by backward (the");
  r.say("mean over rows: last column; it falls more slowly, carried by the rows that have not saturated).");
  r.say("With q and k drawn N(0, 1), Var(q . k) = d_k is arithmetic, not evidence: parts 2 and 3 test the paper on a model.");
  const std::vector<double>& x = kNormalDks;
  r.add_panel(Chart{"1. N(0,1) draws: variance of the scores", "d_k", "Var", true, true,
                    {{"unscaled q.k", x, means_over_dk(g, "N(0,1):unscaled", &SoftmaxStats::score_var), {}, {}, false},
                     {"scaled q.k/sqrt(d_k)", x, means_over_dk(g, "N(0,1):scaled", &SoftmaxStats::score_var), {}, {}, false},
                     {"d_k (the paper)", x, x, {}, {}, true}},
                    x});
  auto median_row = [&](const char* name, const std::string& arm, const char* color) {  // the seed mean, the band from min to max
    ChartSeries c{name, x, means_over_dk(g, arm, &SoftmaxStats::grad), {}, {}, false, color};
    for (const Spread& sp : spread_per_column(per_seed_levels(g, arm, &SoftmaxStats::grad))) c.lo.push_back(sp.min), c.hi.push_back(sp.max);
    return c;
  };
  r.add_panel(Chart{"1. N(0,1) draws: gradient through the softmax (band: seeds)", "d_k", "|d scores| / |d p|", true, true,
                    {median_row("unscaled, median row", "N(0,1):unscaled", "#1f77b4"),
                     {"unscaled, mean", x, means_over_dk(g, "N(0,1):unscaled", &SoftmaxStats::grad_mean), {}, {}, true, "#1f77b4"},
                     median_row("scaled, median row", "N(0,1):scaled", "#d62728")},
                    x});
}

void describe_real(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("2. q, k, v from the initialised in_proj of a one-head Pre-LN layer reading {} real sentences (built-in corpus, "
                        "its most frequent source length; the seed draws the weights and the sentences), float64; means over {} seeds",
                        s.sentences, g.seeds()));
  auto col = [&](const char* arm, double SoftmaxStats::*stat) { return spread_per_column(per_seed_levels(g, arm, stat)); };
  const std::vector<Spread> vu = col("real:unscaled", &SoftmaxStats::score_var), vs = col("real:scaled", &SoftmaxStats::score_var),
                            su = col("real:unscaled", &SoftmaxStats::saturated), ss = col("real:scaled", &SoftmaxStats::saturated),
                            gu = col("real:unscaled", &SoftmaxStats::grad), gs = col("real:scaled", &SoftmaxStats::grad);
  Table t("real", {"d_k", "var unscaled", "var scaled", "saturated unscaled", "saturated scaled", "grad unscaled", "grad scaled"});
  for (size_t k = 0; k < s.dks.size(); ++k) t.row({s.dks[k], vu[k].mean, vs[k].mean, su[k].mean, ss[k].mean, gu[k].mean, gs[k].mean});
  r.print(t);
  r.say("The attention reads LayerNorm(embedding * sqrt(d_k) + position): components of variance about 1, which Xavier's in_proj maps to");
  r.say("q and k components of variance about 1/2, so Var(q . k) is about d_k / 4: the paper's d_k law with a smaller constant.");
  const std::vector<double> x = real_dks(s);
  r.add_panel(Chart{"2. initialised layer, real sentences: variance of the scores (band: seeds)", "d_k", "Var", true, true,
                    {band_series("unscaled", x, vu, "#1f77b4"), band_series("scaled", x, vs, "#d62728")}, x});
  r.add_panel(Chart{"2. initialised layer, real sentences: gradient through the softmax (band: seeds)", "d_k", "|d scores| / |d p|, median row", true,
                    true, {band_series("unscaled", x, gu, "#1f77b4"), band_series("scaled", x, gs, "#d62728")}, x});
}

void describe_training(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("3. training a Post-LN translator (d_model {}, {} head(s): d_k {}, {} layers) on the {} task, {} steps of Adam at lr {}, "
                        "with and without 1/sqrt(d_k); the seed draws the data, the weights and the batches",
                        s.train_d_model, s.train_heads, s.train_d_model / s.train_heads, s.train_layers, s.task.task, s.steps, s.lr));
  Table t("training", {"seed", "held-out NLL scaled", "held-out NLL unscaled", "unscaled - scaled"});
  for (int i = 0; i < g.seeds(); ++i) {
    const Measured &sc = g.at("train:scaled", 0, i), &un = g.at("train:unscaled", 0, i);
    t.row({static_cast<int64_t>(sc.seed), sc.trained.nll, un.trained.nll, un.trained.nll - sc.trained.nll});
  }
  r.print(t);
  std::vector<ChartSeries> curves;
  for (const char* arm : {"train:scaled", "train:unscaled"}) {
    std::vector<std::vector<double>> losses;
    for (const Measured* m : g.of(arm)) losses.push_back(m->trained.losses);
    const bool scaled = std::string(arm) == "train:scaled";
    std::vector<double> steps;
    for (int64_t k = 1; k <= s.steps; ++k) steps.push_back(static_cast<double>(k));
    curves.push_back(band_series(scaled ? "scaled 1/sqrt(d_k)" : "unscaled", steps, spread_per_column(losses), scaled ? "#d62728" : "#1f77b4", !scaled));
  }
  r.add_panel(Chart{"3. training loss with and without 1/sqrt(d_k) (band: seeds)", "step", "cross-entropy", false, true, curves, {}});
}

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  describe_normal(s, g, r);
  describe_real(s, g, r);
  describe_training(s, g, r);
}

// ---------------------------------------------------------------- claims

// Part 1's largest over smallest across d_k, of a seed mean.
double flat(const std::vector<double>& v) {
  const Spread s = spread(v);
  return s.max / s.min;
}

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  using G = Grid<Measured>;
  const double mid = static_cast<double>(s.dks[s.dks.size() / 2]);
  auto slope_text = [](const char* what) {
    return [what](const G&, const std::vector<double>& x) { return fmt::format("{}{:.4f}", what, fmt::join(x, ", ")); };
  };
  return {
      {.spec = {.id = "var_identity", .kind = ClaimKind::Check,
                .statement = "q, k ~ N(0, 1): Var(q . k) = d_k: |log-log slope of the measured variance on d_k - 1| is below 0.1",
                .side = Compare::Below, .threshold = 0.1,
                .source = "an identity (a sum of d_k independent products of variance 1); only sampling noise is measured", .control_targets = false},
       .joint = [](const G& g) { return std::abs(loglog_slope(kNormalDks, means_over_dk(g, "N(0,1):unscaled", &SoftmaxStats::score_var)) - 1); },
       .evidence = [](const G& g, const auto&) {
         const std::vector<double> v = means_over_dk(g, "N(0,1):unscaled", &SoftmaxStats::score_var);
         return fmt::format("slope {:.3f}; Var {:.1f} at d_k 8, {:.1f} at d_k 512", loglog_slope(kNormalDks, v), v.front(), v.back());
       }},
      {.spec = {.id = "scaled_identity", .kind = ClaimKind::Check,
                .statement = "q, k ~ N(0, 1), scaled by 1/sqrt(d_k): variance, largest probability, Jacobian and gradient change by less than "
                             "25% over d_k (largest max/min)",
                .side = Compare::Below, .threshold = 1.25, .source = "the same identity: the scaled scores are N(0, 1) at every d_k",
                .control_targets = false},
       .joint = [](const G& g) {
         auto f = [&](double SoftmaxStats::*stat) { return flat(means_over_dk(g, "N(0,1):scaled", stat)); };
         return std::max({f(&SoftmaxStats::score_var), f(&SoftmaxStats::max_prob), f(&SoftmaxStats::jacobian), f(&SoftmaxStats::grad)});
       },
       .evidence = [](const G& g, const auto&) {
         auto f = [&](double SoftmaxStats::*stat) { return flat(means_over_dk(g, "N(0,1):scaled", stat)); };
         return fmt::format("max/min over d_k: Var {:.3f}, max p {:.3f}, median |J| {:.3f}, gradient {:.3f}", f(&SoftmaxStats::score_var),
                            f(&SoftmaxStats::max_prob), f(&SoftmaxStats::jacobian), f(&SoftmaxStats::grad));
       }},
      {.spec = {.id = "real_var_grows", .kind = ClaimKind::Check,
                .statement = "q and k from an initialised projection of real sentences: unscaled, Var(q . k) grows with d_k: its log-log slope on "
                             "d_k is above 0.5",
                .side = Compare::Above, .threshold = 0.5,
                .source = "Vaswani et al. 2017, section 3.2.1 and footnote 4 (variance d_k for unit-variance components); 0.5: midway between no "
                          "growth and d_k. A check, not evidence: the growth follows from random projections of the inputs (every seed must show "
                          "it; issue 35)",
                .control_targets = false},
       .per_seed = [x = real_dks(s)](const SeedView<Measured>& v) {
         std::vector<double> var;
         for (double dk : x) var.push_back(v("real:unscaled", dk).st.score_var);
         return loglog_slope(x, var);
       },
       .evidence = [](const G&, const std::vector<double>& x) {
         return fmt::format("log-log slope of Var(q . k) on d_k per seed: {:.3f}", fmt::join(x, ", "));
       }},
      {.spec = {.id = "unscaled_gradient_trend", .kind = ClaimKind::Paper,
                .statement = "... and the gradient through the softmax vanishes as d_k grows: the least-squares slope of log10 of the median "
                             "|d scores| / |d p| on log2(d_k) (per doubling of d_k, over --dks, by default 16 to 512), unscaled, is below -0.2",
                .side = Compare::Below, .threshold = -0.2,
                .source = "Vaswani et al. 2017, section 3.2.1 ('pushing the softmax function into regions where it has extremely small "
                          "gradients'); -0.2 per doubling: a tenth over the five doublings from 16 to 512, the factor of the lab's first version, "
                          "which compared the two ends (issue 35: the claim is the trend over every level)",
                .control_targets = true, .min_effect = 0.1, .min_effect_reason = "half the threshold's distance from no trend (0 per doubling)",
                .pilot_sd = 0.0165, .pilot_n = 5},
       .trend = TrendDef<Measured>{"d_k, unscaled", "real:unscaled", [](const Measured& m) { return std::log10(m.st.grad); }, TrendKind::LogSlope, "d_k",
                                   "log10 gradient through the softmax, unscaled", true, "#1f77b4"},
       .evidence = slope_text("slope of log10(median gradient through the softmax) per doubling of d_k, unscaled, per seed: "),
       .null = Condition{"real:unscaled", mid}},
      {.spec = {.id = "scaled_gradient_trend", .kind = ClaimKind::Paper,
                .statement = "scaled by 1/sqrt(d_k) the gradient through the softmax stays: the same slope per doubling, scaled, is above "
                             "log10(0.5) / 5 = -0.0602",
                .side = Compare::Above, .threshold = -0.0602,
                .source = "Vaswani et al. 2017, section 3.2.1 (the scaling counteracts the effect); log10(0.5) / 5: within a factor 2 over the "
                          "five doublings from 16 to 512, the lab's earlier end-to-end margin",
                .control_targets = false, .min_effect = 0.0301, .min_effect_reason = "half the way from the threshold to the paper's 'stays' (0 per doubling)",
                .pilot_sd = 0.0041, .pilot_n = 5},
       .trend = TrendDef<Measured>{"d_k, scaled", "real:scaled", [](const Measured& m) { return std::log10(m.st.grad); }, TrendKind::LogSlope, "d_k",
                                   "log10 gradient through the softmax, scaled", true, "#d62728"},
       .evidence = slope_text("the same, scaled, per seed: "),
       .no_placebo = "a claim of no fall (above a negative threshold): a placebo's zero trend is what it claims"},
      {.spec = {.id = "unscaled_trains_worse", .kind = ClaimKind::Paper,
                .statement = "the intervention: trained without 1/sqrt(d_k) (d_k 128) the same model, data and batches end worse: held-out NLL "
                             "unscaled minus scaled is above 0",
                .side = Compare::Above, .threshold = 0.0,
                .source = "Vaswani et al. 2017, section 3.2.1 (the unscaled softmax's small gradients hinder learning); issue 27; 0: the sign of "
                          "the paired difference",
                .control_targets = true, .min_effect = 0.1,
                .min_effect_reason = "a tenth of a nat of held-out NLL: the threshold is the sign (0), and a smaller gap is no 'hindered learning' "
                                     "a trainer would see",
                .pilot_sd = 0.158, .pilot_n = 5},
       .per_seed = [](const SeedView<Measured>& v) { return v("train:unscaled").trained.nll - v("train:scaled").trained.nll; },
       .evidence = [](const G&, const std::vector<double>& x) { return fmt::format("held-out NLL unscaled - scaled per seed: {:.3f}", fmt::join(x, ", ")); }},
  };
}

}  // namespace

Lab scale_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "scale",
               .title = "why attention scales the scores by 1/sqrt(d_k)",
               .reference = "Vaswani et al. 2017, arXiv:1706.03762 (section 3.2.1)",
               .question = "How do the scores, the softmax and its gradient change with d_k, with and without the scaling, in an initialised "
                           "layer reading real sentences, and does a model train worse without it?",
               .default_seeds = 5,
               .null = {"train:scaled", 0},
               .null_description = "the model trained with 1/sqrt(d_k)"},  // the unscaled trend's: its own (ClaimDef::null)
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

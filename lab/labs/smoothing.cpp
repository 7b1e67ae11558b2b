// Lab `smoothing`: what label smoothing does to calibration and to the last layers (Müller,
// Kornblith and Hinton 2019, "When does label smoothing help?").
//
// Label smoothing trains against (1 - eps) on the label plus eps spread over every class. Müller et
// al. find that it makes a network's confidence match its accuracy better (lower expected
// calibration error, their Section 3, Figure 2 and the translation experiment there), and that it
// pulls the penultimate layer's representations of one class into a tight cluster, each class at
// the same distance from the others' templates (Section 2, Figure 1): the logit of the right class
// exceeds the others' by about a fixed amount instead of growing without bound.
//
// Calibration is only a question where a model can be overconfident: where the right answer is
// uncertain and the network can memorise its training set. So the task here is a copy task whose
// targets carry noise the source does not predict (each target token replaced by a random symbol
// with probability --noise, in training and held-out data alike), trained long enough on a small
// set to memorise it. One arm, eps, at every level of --eps-levels; per seed (the seed draws the
// data, the noise, the weights and the batch order) the same model trained on the same batches at
// each level. Held-out calibration, the logit gap and the penultimate clusters on training tokens;
// the calibration and cluster claims compare eps 0 with eps --eps, the logit gap's claim is its
// trend over the levels (the slope of ln(gap) on eps, per seed).
// With --data DIR (lab/real_data.h) the task is that real translation task (the same for every
// seed, no noise added), and each level's greedy BLEU on the validation split is reported.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "lab/real_data.h"
#include "lab/runner.h"
#include "lab/smoothing.h"

namespace gf::lab {
namespace {

constexpr const char* kPlainColor = "#d62728";
constexpr const char* kSmoothColor = "#1f77b4";

struct Settings {
  int64_t symbols = 16, min_len = 4, max_len = 10, train = 600, eval = 300;
  double noise = 0.2, eps = 0.1;
  std::vector<double> eps_levels{0, 0.05, 0.1, 0.2};
  int64_t d_model = 64, heads = 4, layers = 2, steps = 400;
  double lr = 0.002;
  int64_t max_tokens = 512, eval_every = 50, feature_seqs = 300;
  RealDataSettings real;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = {{"symbols", &S::symbols, "symbols in the task's alphabet"},
                 {"min-len", &S::min_len, "shortest sequence"},
                 {"max-len", &S::max_len, "longest sequence"},
                 {"train", &S::train, "training sequences"},
                 {"eval", &S::eval, "held-out sequences"},
                 {"noise", &S::noise, "probability that a target token is replaced by a random symbol"},
                 {"eps", &S::eps, "label smoothing of the second arm"},
                 {"eps-levels", &S::eps_levels, "the eps levels of the dose-response (4 or more, from 0; --eps among them)"},
                 {"d-model", &S::d_model, "model width (FFN 4x)"},
                 {"heads", &S::heads, "attention heads"},
                 {"layers", &S::layers, "encoder and decoder layers each"},
                 {"steps", &S::steps, "training steps per arm"},
                 {"lr", &S::lr, "Adam learning rate (10% linear warm-up)"},
                 {"max-tokens", &S::max_tokens, "padded tokens per batch"},
                 {"eval-every", &S::eval_every, "steps between held-out calibration probes"},
                 {"feature-seqs", &S::feature_seqs, "training sequences whose tokens give the logit gap and the clusters"}};
  // --data: a real translation task in place of the noisy copy task (lab/real_data.h)
  return f.add(Fields<S>::nest(&S::real, real_data_fields()));
}

void validate(const Settings& s) {
  GF_CHECK(s.eps > 0 && s.eps < 1, "lab smoothing: --eps must be in (0, 1), got {}", s.eps);
  GF_CHECK(s.noise >= 0 && s.noise < 1, "lab smoothing: --noise must be in [0, 1), got {}", s.noise);
  GF_CHECK(s.eval_every >= 1, "lab smoothing: --eval-every must be positive, got {}", s.eval_every);
  // The calibration curve is probed every eval_every steps; with fewer steps it would have no point.
  GF_CHECK(s.eval_every <= s.steps, "lab smoothing: --eval-every {} is more than --steps {}: no calibration probe would be taken", s.eval_every,
           s.steps);
  // The levels of the dose-response: 4 or more, increasing, from 0, below 1, --eps among them (its
  // level is the other claims' smoothed arm).
  const std::vector<double>& l = s.eps_levels;
  GF_CHECK(std::adjacent_find(l.begin(), l.end(), std::greater_equal<>()) == l.end(), "lab smoothing: --eps-levels must increase, got '{}'",
           fmt::join(l, ","));
  GF_CHECK(l.size() >= 4, "lab smoothing: --eps-levels needs 4 or more levels for the dose-response, got '{}'", fmt::join(l, ","));
  GF_CHECK(l.front() == 0 && l.back() < 1, "lab smoothing: --eps-levels must start at 0 and stay below 1, got '{}'", fmt::join(l, ","));
  GF_CHECK(std::find(l.begin(), l.end(), s.eps) != l.end(), "lab smoothing: --eps {} must be one of --eps-levels '{}'", s.eps, fmt::join(l, ","));
}

// One seed's data: the noisy task, and its training targets before the noise.
struct Task {
  IdData data;
  std::vector<train::EncodedPair> clean_train;
};

struct Context {
  std::shared_ptr<const RealData> real;  // --data
  int64_t vocab = 0;                     // V, the target vocabulary
  uint64_t seed = 0;                     // whose task `task` is: every level of a seed trains on it
  std::shared_ptr<const Task> task;      // with --data: the real task, the same for every seed
};

// The copy task of `seed` with noisy targets (training and held-out alike).
Task noisy_task(const Settings& s, uint64_t seed) {
  Task t{synthetic_task("copy", s.symbols, s.min_len, s.max_len, s.train, s.eval, seed), {}};
  t.clean_train = t.data.train;
  add_target_noise(t.data.train, s.symbols, s.noise, seed * 7919 + 1);
  add_target_noise(t.data.test, s.symbols, s.noise, seed * 7919 + 2);
  return t;
}

const Task& task_of(const Settings& s, Context& c, uint64_t seed) {
  if (!c.real && (!c.task || c.seed != seed)) c.task = std::make_shared<const Task>(noisy_task(s, seed)), c.seed = seed;
  return *c.task;
}

Context prepare(const Settings& s, Report& r) {
  Context c;
  const int64_t warmup = s.steps / 10;
  if (s.real.given()) {
    c.real = std::make_shared<const RealData>(real_data(s.real, r));
    Task t{c.real->ids, c.real->ids.train};  // its first --eval test pairs held out, no noise added
    if (t.data.test.size() > static_cast<size_t>(s.eval)) t.data.test.resize(static_cast<size_t>(s.eval));
    c.task = std::make_shared<const Task>(std::move(t));
    c.vocab = c.real->ids.tgt_vocab;
    r.say(fmt::format("the real task above, no noise added (its own ambiguity is the uncertainty); calibration on its first {} test pairs, BLEU on",
                      c.task->data.test.size()));
    r.say(fmt::format("its first {} validation pairs. Post-LN, d_model {}, {} heads, {}+{} layers; {} steps of Adam at lr {} (warm-up {}),",
                      std::min<size_t>(static_cast<size_t>(s.eval), c.real->ids.valid.size()), s.d_model, s.heads, s.layers, s.layers, s.steps,
                      s.lr, warmup));
  } else {
    c.vocab = 4 + s.symbols;
    r.say(fmt::format("copy task over {} symbols, lengths {}-{}, each target token replaced by a random symbol with probability {} (training and held-out",
                      s.symbols, s.min_len, s.max_len, s.noise));
    r.say(fmt::format("alike): {} training and {} held-out sequences. Post-LN, d_model {}, {} heads, {}+{} layers; {} steps of Adam at lr {} (warm-up {}),",
                      s.train, s.eval, s.d_model, s.heads, s.layers, s.layers, s.steps, s.lr, warmup));
  }
  r.say(fmt::format("{} tokens a batch, the same batches for both arms: eps 0 and eps {}.", s.max_tokens, s.eps));
  r.say(fmt::format("The dose-response: the same model, data and batches at eps {} (the ones not 0 or {} trained only for it).",
                    fmt::join(s.eps_levels, ", "), s.eps));
  return c;
}

std::vector<ArmSpec> arms(const Settings& s) { return {{"eps", s.eps_levels}}; }

// A placebo pool's run (eps 0 on a seed of its own) skips the calibration probes and BLEU: no claim reads them.
SmoothingRun measure(const Settings& s, Context& c, const RunKey& k) {
  const Task& t = task_of(s, c, k.seed);
  SmoothingTraining tr{small_model(t.data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false), {}, k.pool ? 0 : s.eval_every,
                       static_cast<size_t>(s.feature_seqs), k.pool ? nullptr : c.real.get(), static_cast<size_t>(s.eval)};
  tr.fit.steps = s.steps, tr.fit.lr = s.lr, tr.fit.warmup = s.steps / 10, tr.fit.max_tokens = s.max_tokens, tr.fit.seed = k.seed;
  tr.fit.label_smoothing = k.cond.level;
  return train_smoothing(tr, t.data, t.clean_train);
}

using V = SeedView<SmoothingRun>;
using G = Grid<SmoothingRun>;

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3f}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

// One level's statistic, per seed.
std::vector<double> column(const G& g, double eps, double (*f)(const SmoothingRun&)) {
  std::vector<double> v;
  for (const SmoothingRun* m : g.of("eps", eps)) v.push_back(f(*m));
  return v;
}

double over(const SmoothingRun& a) { return a.end.held_out.confidence - a.end.held_out.accuracy; }

void describe_arms(const Settings& s, const Context& c, const G& g, Report& r) {
  r.section("held-out calibration, and the last layers on training tokens (mean [t 95% interval] over seeds)");
  Table t("smoothing", {"eps", "held-out accuracy", "mean confidence", "confidence - accuracy", "ECE (15 bins)", "held-out NLL",
                        "logit gap, training tokens", "logit gap, held-out", "clusters: templates' span, clean labels", "every direction",
                        "templates' span, every label"});
  for (double e : {0.0, s.eps})
    t.row({e, with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.held_out.accuracy; })),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.held_out.confidence; })), with_interval(column(g, e, over), "{:+.3f}"),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.held_out.ece; })),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.nll; })),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.gap_train; }), "{:.2f}"),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.gap_held_out; }), "{:.2f}"),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.cluster; })),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.cluster_raw; })),
           with_interval(column(g, e, [](const SmoothingRun& a) { return a.end.cluster_all; }))});
  r.print(t);
  Table p("per seed", {"seed", "ECE eps 0", "ECE eps", "difference", "gap ratio (eps / 0)", "cluster ratio (eps / 0)", "every direction",
                       "every label"});
  for (int i = 0; i < g.seeds(); ++i) {
    const SmoothingMeasures &a = g.at("eps", 0, i).end, &b = g.at("eps", s.eps, i).end;
    p.row({static_cast<int64_t>(r.seed(i)), a.held_out.ece, b.held_out.ece, b.held_out.ece - a.held_out.ece, b.gap_train / a.gap_train,
           b.cluster / a.cluster, b.cluster_raw / a.cluster_raw, b.cluster_all / a.cluster_all});
  }
  r.print(p);
  const double V = static_cast<double>(c.vocab);
  r.say(fmt::format("logit gap: z_label - mean of the other {} logits. With eps > 0 the loss is least when every gap is log((1 - eps + eps/V) / (eps/V))",
                    c.vocab - 1));
  r.say(fmt::format("= {:.2f} here (V = {}); without smoothing no finite gap is best. Cluster ratio: mean squared distance of a final decoder state",
                    std::log((1 - s.eps + s.eps / V) / (s.eps / V)), c.vocab));
  r.say("to its label's mean state over the mean squared distance between two labels' means (labels with at least 10 training tokens), in the");
  r.say("span of the output layer's rows (the class templates: the directions a logit reads; Müller et al. project onto three templates' plane),");
  if (c.real) {  // no noise: every label is clean, and with V > d_model the templates span every direction
    r.say("on every training token: no noise is added to a real task, so every label is clean (the first and third ratios are one number), and");
    r.say("when V is above d_model the templates span every direction (so are the first two).");
    return;
  }
  r.say("on the training tokens whose label the noise left alone; also in every direction of the state, and on every training token by its");
  r.say("label as trained on (a replaced label puts a token in a class its input does not belong to; only memorising pulls it in).");
}

void describe_figure(const Settings& s, const G& g, Report& r) {
  const double levels[2] = {0.0, s.eps};
  std::vector<ChartSeries> rel;  // the reliability diagram: bins pooled over seeds
  for (int k = 0; k < 2; ++k) {
    const auto runs = g.of("eps", levels[k]);
    ChartSeries c{fmt::format("eps {}", levels[k]), {}, {}, {}, {}, false, k ? kSmoothColor : kPlainColor};
    for (size_t b = 0; b < runs[0]->end.held_out.count.size(); ++b) {
      double n = 0, conf = 0, acc = 0;
      for (const SmoothingRun* x : runs) {
        const Calibration& cal = x->end.held_out;
        if (!cal.count[b]) continue;
        n += static_cast<double>(cal.count[b]);
        conf += cal.bin_confidence[b] * static_cast<double>(cal.count[b]);
        acc += cal.bin_accuracy[b] * static_cast<double>(cal.count[b]);
      }
      if (n >= 20) c.x.push_back(conf / n), c.y.push_back(acc / n);  // bins with at least 20 tokens over the seeds
    }
    rel.push_back(c);
  }
  rel.push_back(ChartSeries{"calibrated", {0, 1}, {0, 1}, {}, {}, true, "#7f7f7f"});
  r.add_panel(Chart{"reliability: held-out accuracy against confidence (seeds pooled)", "confidence (15 bins)", "accuracy", false, false, rel,
                    {0, 0.2, 0.4, 0.6, 0.8, 1.0}, Chart::Corner::TopLeft});
  const std::vector<double>& steps = g.at("eps", 0, 0).probe_steps;
  auto during = [&](bool overconfidence) {
    std::vector<ChartSeries> out;
    for (int k = 0; k < 2; ++k) {
      std::vector<std::vector<double>> rows;
      for (const SmoothingRun* x : g.of("eps", levels[k])) rows.push_back(overconfidence ? x->probe_over : x->probe_ece);
      out.push_back(band_series(fmt::format("eps {}", levels[k]), steps, spread_per_column(rows), k ? kSmoothColor : kPlainColor));
    }
    return out;
  };
  r.add_panel(Chart{"held-out ECE during training (band: seeds)", "step", "ECE", false, false, during(false), {}, Chart::Corner::TopLeft});
  auto overconfident = during(true);
  overconfident.push_back(ChartSeries{"calibrated", {steps.front(), steps.back()}, {0, 0}, {}, {}, true, "#7f7f7f"});
  r.add_panel(Chart{"held-out confidence - accuracy during training (band: seeds)", "step", "overconfidence", false, false, overconfident, {},
                    Chart::Corner::TopLeft});
  std::vector<double> x, gap, cluster;
  for (int i = 0; i < g.seeds(); ++i) {
    const SmoothingMeasures &a = g.at("eps", 0, i).end, &b = g.at("eps", s.eps, i).end;
    x.push_back(static_cast<double>(r.seed(i))), gap.push_back(b.gap_train / a.gap_train), cluster.push_back(b.cluster / a.cluster);
  }
  r.add_panel(Chart{"eps / eps-0 ratios per seed (1: no change)", "seed", "ratio", false, false,
                    {ChartSeries{"logit gap on training tokens", x, gap, {}, {}, false, "#9467bd"},
                     ChartSeries{"cluster ratio", x, cluster, {}, {}, false, "#8c564b"},
                     ChartSeries{"no change", {x.front(), x.back()}, {1, 1}, {}, {}, true, "#7f7f7f"}},
                    x, Chart::Corner::TopRight});
}

// --data: BLEU on the validation split per eps level, beside Vaswani et al.'s (reported, not claimed).
void describe_bleu(const Settings& s, const Context& c, const G& g, Report& r) {
  r.section(fmt::format("BLEU on the first {} validation sentences (greedy, sacreBLEU 13a), per eps level (mean [t 95% interval] over seeds)",
                        std::min<size_t>(static_cast<size_t>(s.eval), c.real->ids.valid.size())));
  // Vaswani et al. 2017, Table 3, rows (D) and base: the big EN-DE task's development set (newstest2013).
  const std::map<double, std::string> paper = {{0.0, "25.3 (PPL 4.67)"}, {0.1, "25.8 (PPL 4.92, the base model)"}, {0.2, "25.7 (PPL 5.47)"}};
  Table t("bleu", {"eps", "BLEU here", "per seed", "Vaswani et al. 2017, Table 3 (EN-DE newstest2013)"});
  for (double e : s.eps_levels) {
    const std::vector<double> v = column(g, e, [](const SmoothingRun& a) { return a.bleu; });
    const auto it = paper.find(e);
    t.row({e, with_interval(v, "{:.2f}"), fmt::format("{:.2f}", fmt::join(v, ", ")), it == paper.end() ? "-" : it->second});
  }
  r.print(t);
  r.say("Reported, not claimed. The paper's numbers are a 65M-parameter model's on WMT English-German: compare the direction, not the size.");
}

void describe(const Settings& s, const Context& c, const G& g, Report& r) {
  describe_arms(s, c, g, r);
  describe_figure(s, g, r);
  if (c.real) describe_bleu(s, c, g, r);
  r.section("dose-response: the logit gap on training tokens against eps (mean and 95% t interval over seeds)");
  Table lv("levels", {"eps", "held-out ECE", "logit gap (geometric mean)", "the loss's optimum gap"});
  const double V = static_cast<double>(c.vocab);
  for (double e : s.eps_levels) {
    const double optimum = e > 0 ? std::log((1 - e + e / V) / (e / V)) : INFINITY;
    const Spread ece = spread(column(g, e, [](const SmoothingRun& a) { return a.end.held_out.ece; }));
    const Spread ln_gap = spread(column(g, e, [](const SmoothingRun& a) { return std::log(a.end.gap_train); }));
    lv.row({e, ece.mean, std::exp(ln_gap.mean), optimum});
  }
  r.print(lv);
}

// The float64 check of the loss, over the two arms the other claims compare.
double worst_loss_check(const G& g, double eps) {
  double worst = 0;
  for (double e : {0.0, eps})
    for (double x : column(g, e, [](const SmoothingRun& a) { return a.loss_check; })) worst = std::max(worst, x);
  return worst;
}

std::vector<ClaimDef<SmoothingRun>> claims(const Settings& s) {
  const double eps = s.eps;
  auto per_seed_line = [](const char* what, const char* format) {
    return [=](const G&, const std::vector<double>& x) { return fmt::format("{} per seed: {}", what, fmt::format(fmt::runtime(format), fmt::join(x, ", "))); };
  };
  return {
      {.spec = {.id = "baseline_overconfident", .kind = ClaimKind::Paper,
                .statement = "without label smoothing the memorising model is overconfident on held-out tokens: its mean confidence minus its accuracy",
                .side = Compare::Above, .threshold = 0.02,
                .source = "Guo et al. 2017 and Müller et al. 2019, Figure 2 (the reliability diagrams of networks trained without smoothing lie below "
                          "the diagonal): the regime in which the paper's calibration claim is made; 0.02 is a tenth of the task's noise rate",
                .control_targets = false, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.01,
                .min_effect_reason = "half the threshold's distance from calibrated (0)", .pilot_sd = 0.03, .pilot_n = 5},
       .per_seed = [](const V& v) { return over(v("eps", 0)); },
       .evidence = per_seed_line("eps 0: held-out confidence - accuracy", "{:+.3f}"),
       .no_placebo = "one arm's statistic (eps 0) against 0, no contrast between arms"},
      {.spec = {.id = "ece_lower", .kind = ClaimKind::Paper,
                .statement = "label smoothing (eps 0.1) lowers the held-out expected calibration error (15 bins): ECE with smoothing minus ECE without",
                .side = Compare::Below, .threshold = -0.01,
                .source = "Müller et al. 2019, Section 3: training with label smoothing gives calibration close to temperature scaling's, far below "
                          "the unsmoothed network's ECE, on image classification and on translation; -0.01: at least one point of ECE",
                .control_targets = true, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.005,
                .min_effect_reason = "half the threshold's distance from no change in ECE (0)", .pilot_sd = 0.0262, .pilot_n = 5},
       .per_seed = [eps](const V& v) { return v("eps", eps).end.held_out.ece - v("eps", 0).end.held_out.ece; },
       .evidence = per_seed_line("ECE(eps) - ECE(0)", "{:+.3f}")},
      {.spec = {.id = "logit_gap_trend", .kind = ClaimKind::Paper,
                .statement = "label smoothing bounds the logit gap on training tokens (the label's logit minus the mean of the others), the more the "
                             "larger eps: the least-squares slope of ln(gap) on eps over --eps-levels (by default 0, 0.05, 0.1, 0.2) is below -1",
                .side = Compare::Below, .threshold = -1.0,
                .source = "Müller et al. 2019, Section 2: with smoothing the loss is least at a finite gap, log((1 - eps + eps/V) / (eps/V)) (V 20: "
                          "5.94, 5.20 and 4.39 at eps 0.05, 0.1 and 0.2), which falls as eps grows; without it the gap grows while training fits "
                          "the labels. That law's slope of ln(gap) over the smoothed levels 0.05-0.2 is -1.97; -1 asks for half of it (issue 35: "
                          "the claim is the trend over the levels)",
                .control_targets = true, .min_effect = 0.5,
                .min_effect_reason = "half the threshold's distance from no trend (0): the law's -1.97 lies further still", .pilot_sd = 0.0983, .pilot_n = 5},
       // Slope, not per doubling: eps starts at 0, which has no log; ln(gap) since the gap changes by factors.
       .trend = TrendDef<SmoothingRun>{"eps", "eps", [](const SmoothingRun& m) { return std::log(m.end.gap_train); }, TrendKind::Slope,
                                       "label smoothing eps", "ln logit gap, training tokens", false, kSmoothColor},
       .evidence = per_seed_line("slope of ln(logit gap on training tokens) on eps,", "{:.3f}")},
      {.spec = {.id = "tighter_clusters", .kind = ClaimKind::Paper,
                .statement = "label smoothing tightens the penultimate layer's clusters: the within-class over between-class squared distance of the "
                             "decoder's last states in the span of the class templates (the output layer's rows), on the training tokens whose "
                             "label the noise left alone, with smoothing over without",
                .side = Compare::Below, .threshold = 0.95,
                .source = "Müller et al. 2019, Section 2 and Figure 1 (the penultimate layer projected onto the plane of three classes' templates): "
                          "label smoothing pulls the representations of a class's training examples into a tight cluster, equally distant from "
                          "the other classes' templates. The paper gives no size (its evidence is a picture), so the claim is the direction: "
                          "tighter at all; 0.95 (tighter by 5%), not 1, since the placebo (issue 35): a threshold at the null's own value is "
                          "called supported by chance in 2.5-5% of placebo splits (change log)",
                .control_targets = true, .min_effect = 0.025,
                .min_effect_reason = "half the threshold's distance from no change (a ratio of 1)", .pilot_sd = 0.0512, .pilot_n = 5},
       .per_seed = [eps](const V& v) { return v("eps", eps).end.cluster / v("eps", 0).end.cluster; },
       .evidence = per_seed_line("cluster ratio, eps / eps 0,", "{:.3f}")},
      {.spec = {.id = "smoothed_loss", .kind = ClaimKind::Check,
                .statement = "the loss trained on is label smoothing's definition, (1 - eps) (-log p_label) + eps x mean over the V classes of -log "
                             "p: the largest relative difference between train::batch_loss and the definition, float64",
                .side = Compare::Below, .threshold = 1e-10,
                .source = "the same quantity computed two ways (the fused linear_cross_entropy and a direct sum); float64 rounding only",
                .control_targets = false},
       .joint = [eps](const G& g) { return worst_loss_check(g, eps); },
       .evidence = [eps](const G& g, const auto&) {
         return fmt::format("largest |batch_loss - definition| / definition {:.3g} (float64)", worst_loss_check(g, eps));
       }},
  };
}

}  // namespace

Lab smoothing_lab() {
  return make_lab(Experiment<Settings, Context, SmoothingRun>{
      .info = {.name = "smoothing",
               .title = "label smoothing: calibration, the logit gap and the penultimate clusters",
               .reference = "Müller, Kornblith and Hinton 2019, arXiv:1906.02629 (Sections 2 and 3, Figures 1 and 2)",
               .question = "On a task with noise no model can predict, trained until it memorises its training set, does label smoothing lower the "
                           "expected calibration error, bound the logit gap and tighten the penultimate layer's clusters?",
               .default_seeds = 5,
               .null = {"eps", 0},
               .null_description = "the model trained without label smoothing (eps 0)"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

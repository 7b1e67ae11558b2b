// Lab `entropy`: attention entropy collapse, and σReparam against it (Zhai et al. 2023,
// arXiv:2303.06296).
//
// The paper: "low attention entropy is accompanied by high training instability, which can take
// the form of oscillating loss or divergence"; it calls the pathologically low entropy (each query
// attending to about one key) entropy collapse, bounds a head's entropy from below by a quantity
// that falls exponentially with the spectral norm of W_Q W_K^T, and prevents the collapse with
// σReparam (every weight used as (γ / σ(W)) W, σ its spectral norm, γ learned), which lets its
// models train without warm-up.
//
// Here: a small Post-LN translator (no warm-up, Adam, no gradient clipping) on a synthetic task
// drawn by each seed, trained plainly at every learning rate of --lrs (arm "plain": the levels of a
// dose-response, the first the safe rate, the last the high rate) and with σReparam at the high rate
// (arm "σReparam"); a seed gives its runs the same data, initial function and batches. Every few
// steps each head's entropy (encoder self, decoder self and cross attention) on a fixed batch of
// held-out pairs over its largest value log(visible keys), and the largest product of the query and
// key weights' spectral norms (the paper's bound's quantity): lab/parts/entropy_runs.cpp. The
// placebo's null: the plain model at the high rate; --ablate trains every run at the safe rate. With
// --data DIR (lab/real_data.h) every run trains on that real task (the same data for every seed).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "lab/entropy.h"
#include "lab/real_data.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

// A head below a tenth of its largest entropy attends to about one key (0.99 on one of 8 keys: 0.036).
constexpr double kCollapsed = 0.1;
const char* const kPlain = "plain";
const char* const kReparam = "σReparam";
const char* const kNull = "plain at the high rate";  // the placebo's null condition, not one of the arms

struct Settings {
  std::vector<double> lrs{0.001, 0.002, 0.005, 0.01};
  std::string task = "reverse";
  int64_t pairs = 2000, symbols = 16, min_len = 6, max_len = 12, d_model = 64, heads = 4, layers = 2, ff = 128;
  std::string reparam = "all";
  bool pre_ln = false;
  double clip = 0;
  int64_t warmup = 0, steps = 180, max_tokens = 1024, every = 10;
  RealDataSettings real;
  double safe() const { return lrs.front(); }
  double high() const { return lrs.back(); }
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = {
      {"lrs", &S::lrs,
       "the plain model's learning rates, the dose-response's levels (4 or more, increasing): the first is the safe rate, the last the high "
       "rate, σReparam's (--ablate: every one replaced by the first)"},
      {"task", &S::task, "copy, reverse, sort or corpus (the built-in English->Korean corpus), drawn by each seed"},
      {"pairs", &S::pairs, "training pairs"},
      {"symbols", &S::symbols, "synthetic tasks: alphabet size"},
      {"min-len", &S::min_len, "synthetic tasks: shortest sequence"},
      {"max-len", &S::max_len, "synthetic tasks: longest sequence"},
      {"d-model", &S::d_model, "model width"},
      {"heads", &S::heads, "attention heads"},
      {"layers", &S::layers, "encoder and decoder layers each"},
      {"ff", &S::ff, "feed-forward width"},
      {"reparam", &S::reparam, "σReparam's scope: all (every linear layer of the Transformer layers, as the paper) or qk (the query and key weights only)"},
      {"pre-ln", &S::pre_ln, "Pre-LN layers (default Post-LN, as the paper's unstable baselines)"},
      {"clip", &S::clip, "gradient-norm clip (0: off)"},
      {"warmup", &S::warmup, "linear warm-up steps, then constant (0: none, the paper's unstable setting)"},
      {"steps", &S::steps, "steps per run"},
      {"max-tokens", &S::max_tokens, "tokens per batch"},
      {"every", &S::every, "steps between entropy measurements"}};
  return f.add(Fields<S>::nest(&S::real, real_data_fields()));
}

void validate(const Settings& s) {
  const std::string text = fmt::format("{}", fmt::join(s.lrs, ","));
  for (size_t k = 1; k < s.lrs.size(); ++k) GF_CHECK(s.lrs[k] > s.lrs[k - 1], "lab entropy: --lrs must increase, got '{}'", text);
  GF_CHECK(s.lrs.size() >= 4, "lab entropy: --lrs needs 4 or more learning rates for the dose-response, got '{}'", text);
  GF_CHECK(s.lrs.front() > 0, "lab entropy: --lrs must be above 0 (the trend is per doubling), got '{}'", text);
  GF_CHECK(s.reparam == "all" || s.reparam == "qk", "lab entropy: --reparam is all or qk, got '{}'", s.reparam);
  GF_CHECK(s.every >= 1 && s.steps >= s.every, "lab entropy: need 1 <= --every <= --steps, got {} and {}", s.every, s.steps);
}

// One run: its learning rate (under --ablate the safe rate), its arm, and what it measured; a
// σReparam run also the difference from the plain model at initialisation.
struct Measured {
  double lr = 0;
  bool reparam = false;
  EntropyRun run;
  double init_difference = NAN;
};
void to_json(nlohmann::json& j, const Measured& m) {
  const EntropyRun& x = m.run;
  j = {{"lr", m.lr}, {"losses", x.fit.losses}, {"diverged_at", x.fit.diverged_at}, {"record_steps", x.at}, {"head_names", x.head_names},
       {"head_entropy", x.heads}, {"max_qk_spectral_product", x.qk_norm}, {"final_loss", x.final_loss}, {"least_head_end", x.least_head_end}};
  if (m.reparam) j["init_difference"] = m.init_difference;
}

struct Context {
  std::optional<IdData> real;  // --data: the task of every seed (its first 64 test pairs)
  std::optional<IdData> data;  // the current seed's task
  uint64_t data_seed = 0;
  std::map<std::tuple<bool, double, uint64_t>, Measured> runs;  // under --ablate the levels share their run
};

// Seed `seed`'s task: the one --task draws for it, or --data's real task.
const IdData& data_of(const Settings& s, Context& c, uint64_t seed) {
  if (c.real) return *c.real;
  if (!c.data || c.data_seed != seed)
    c.data = s.task == "corpus" ? builtin_corpus(s.pairs, seed) : synthetic_task(s.task, s.symbols, s.min_len, s.max_len, s.pairs, 64, seed),
    c.data_seed = seed;
  return *c.data;
}

EntropySetup setup_of(const Settings& s, const IdData& data) {
  EntropySetup e;
  e.arch = small_model(data, s.d_model, s.heads, s.layers, s.ff, s.pre_ln);
  e.base.steps = s.steps, e.base.warmup = s.warmup, e.base.clip = s.clip, e.base.max_tokens = s.max_tokens;
  e.every = s.every, e.reparam_all = s.reparam == "all";
  return e;
}

Context prepare(const Settings& s, Report& r) {
  Context c;
  if (s.real.given()) {
    c.real = real_data(s.real, r).ids;
    if (c.real->test.size() > 64) c.real->test.resize(64);
  }
  const double high = r.ablate() ? s.safe() : s.high();
  if (r.ablate())
    r.say(fmt::format("every rate of --lrs and σReparam's run at the safe rate lr {:g}; the plain runs are one per seed (the same seed, data "
                      "and rate give the same numbers), so the trend is 0 by construction: its placebo (--control) is its real control",
                      s.safe()));
  const IdData& data = data_of(s, c, r.seed(0));
  r.say(fmt::format("task {}: {} training pairs; {} model d_model {}, {} heads, {}+{} layers, ff {}; Adam (0.9, 0.98), {}, "
                    "clip {}; {} steps of <= {} tokens; entropy on 64 held-out pairs at step 0 and every {} steps; plain at lr {}; σReparam "
                    "at lr {:g} on {}",
                    c.real ? "the real one above (the same for every seed)" : s.task + " (drawn by each seed)", data.train.size(),
                    s.pre_ln ? "Pre-LN" : "Post-LN", s.d_model, s.heads, s.layers, s.layers, s.ff,
                    s.warmup > 0 ? fmt::format("{} warm-up steps", s.warmup) : "no warm-up", s.clip > 0 ? fmt::format("{}", s.clip) : "off",
                    s.steps, s.max_tokens, s.every, fmt::join(s.lrs, ", "), high, s.reparam == "all" ? "every linear layer of the encoder and decoder layers (not the embeddings or the output projection)"
                                  : "the query and key weights only"));
  return c;
}

std::vector<ArmSpec> arms(const Settings& s) { return {{kPlain, s.lrs}, {kReparam, {}}}; }

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  const bool reparam = k.cond.arm == kReparam;
  const double lr = k.ablate ? s.safe() : k.cond.arm == kPlain ? k.cond.level : s.high();  // σReparam and the null: the high rate
  const auto key = std::make_tuple(reparam, lr, k.seed);
  if (!c.runs.count(key)) {
    const IdData& data = data_of(s, c, k.seed);
    const EntropySetup e = setup_of(s, data);
    Measured m{lr, reparam, train_entropy_run(data, e, lr, reparam, k.seed)};
    if (reparam) m.init_difference = reparam_init_difference(data, e, k.seed);
    c.runs[key] = std::move(m);
  }
  return c.runs.at(key);
}

// ---------------------------------------------------------------- tables and panels

std::string arm_label(const Measured& m) { return fmt::format("lr {:g} {}", m.lr, m.reparam ? kReparam : kPlain); }

// The runs of the figures and tables: the plain model's at each level (under --ablate only the
// first: every level is the safe rate's runs), then σReparam's.
std::vector<std::vector<const Measured*>> groups(const Settings& s, const Grid<Measured>& g, bool ablate) {
  std::vector<std::vector<const Measured*>> out;
  for (double lr : s.lrs)
    if (!ablate || out.empty()) out.push_back(g.of(kPlain, lr));
  out.push_back(g.of(kReparam));
  return out;
}

void print_runs(const std::vector<std::vector<const Measured*>>& runs, Report& r) {
  r.section("per run: final loss, least head's entropy (H / log(visible keys); 1 = uniform over the keys, 0 = one key), logit-scale bound");
  Table t("runs", {"lr", "arm", "seed", "steps run", "diverged at", "first loss", "final loss", "least head H at end", "mean head H at end",
                   "lowest least head H", "max σ(Wq)σ(Wk) at end"});
  for (const auto& group : runs)
    for (size_t i = 0; i < group.size(); ++i) {
      const EntropyRun& x = group[i]->run;
      double lowest = INFINITY;
      for (const auto& h : x.heads) lowest = std::min(lowest, least_head(h));
      const double mean = std::accumulate(x.heads.back().begin(), x.heads.back().end(), 0.0) / static_cast<double>(x.heads.back().size());
      t.row({group[i]->lr, group[i]->reparam ? kReparam : kPlain, static_cast<int64_t>(r.seed(static_cast<int>(i))),
             static_cast<int64_t>(x.fit.losses.size()), x.fit.diverged_at, x.fit.losses.front(), x.final_loss, x.least_head_end, mean, lowest,
             x.qk_norm.back()});
    }
  r.print(t);
}

// One run's heads x steps, on the fixed 0..1 scale.
ValueMap head_map(const Measured& m, uint64_t seed) {
  const EntropyRun& x = m.run;
  ValueMap v{fmt::format("heads x steps, {}, seed {}", arm_label(m), seed), "step", "", x.head_names, {}, {}, false, "H / log(keys)", 0, 1};
  for (int64_t s : x.at) v.col_labels.push_back(std::to_string(s));
  v.values.assign(x.head_names.size(), std::vector<double>(x.at.size(), NAN));  // (heads, records)
  for (size_t k = 0; k < x.at.size(); ++k)
    for (size_t h = 0; h < x.head_names.size(); ++h) v.values[h][k] = x.heads[k][h];
  return v;
}

// A per-record quantity of a group of runs (seeds) as a mean line with a min..max band.
template <class F>
ChartSeries over_seeds(const std::string& name, const std::vector<const Measured*>& runs, F value, const std::string& color, bool dashed) {
  size_t n = SIZE_MAX;
  for (const Measured* m : runs) n = std::min(n, m->run.at.size());
  std::vector<std::vector<double>> rows;
  for (const Measured* m : runs) {
    rows.emplace_back();
    for (size_t k = 0; k < n; ++k) rows.back().push_back(value(m->run, k));
  }
  std::vector<double> xs;
  for (size_t k = 0; k < n; ++k) xs.push_back(static_cast<double>(runs.front()->run.at[k]));
  return band_series(name, xs, spread_per_column(rows), color, dashed);
}

// The training loss as means of `w` steps at each record step >= w (a record's preceding steps).
double loss_window(const EntropyRun& x, size_t k, int64_t w) {
  const int64_t end = x.at[k];
  if (end < w || end > static_cast<int64_t>(x.fit.losses.size())) return NAN;
  return std::accumulate(x.fit.losses.begin() + (end - w), x.fit.losses.begin() + end, 0.0) / static_cast<double>(w);
}

// 0 and at most ~6 round steps up to `steps`, so that the step axes start at step 0.
std::vector<double> step_ticks(int64_t steps) {
  int64_t every = 1;
  for (int64_t c : {1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000})
    if (every = c; steps / c <= 6) break;
  std::vector<double> t;
  for (int64_t s = 0; s <= steps; s += every) t.push_back(static_cast<double>(s));
  return t;
}

// The plain model's colour at level k of n: blue (safe) to red (high).
std::string level_color(size_t k, size_t n) {
  static const char* const ramp[] = {"#1f77b4", "#17becf", "#bcbd22", "#ff7f0e", "#d62728", "#8c564b"};
  const size_t last = std::size(ramp) - 1;
  return ramp[n <= 1 ? last : std::min(last, k * last / (n - 1))];
}

void add_figure(const Settings& s, const Grid<Measured>& g, Report& r, bool ablate) {
  const std::vector<const Measured*> safe = g.of(kPlain, s.safe()), high = g.of(kPlain, s.high()), reparam = g.of(kReparam);
  const double last = static_cast<double>(safe.front()->run.at.back());
  const std::vector<double> ticks = step_ticks(safe.front()->run.at.back());
  Chart loss{"training loss (mean of the steps since the last record; band: seeds)", "step", "loss", false, true, {}, ticks, Chart::Corner::BottomLeft};
  Chart least{"least head's entropy / log(keys) (band: seeds)", "step", "min over the heads", false, false, {}, ticks, Chart::Corner::TopRight};
  Chart bound{"largest σ(W_q) σ(W_k) over the attentions (band: seeds)", "step", "spectral norm product", false, true, {}, ticks,
              Chart::Corner::TopLeft};
  auto add = [&](const std::vector<const Measured*>& runs, const std::string& color, bool dashed) {
    const std::string name = arm_label(*runs.front());
    loss.series.push_back(over_seeds(name, runs, [&](const EntropyRun& x, size_t k) { return loss_window(x, k, s.every); }, color, dashed));
    least.series.push_back(over_seeds(name, runs, [](const EntropyRun& x, size_t k) { return least_head(x.heads[k]); }, color, dashed));
    bound.series.push_back(over_seeds(name, runs, [](const EntropyRun& x, size_t k) { return x.qk_norm[k]; }, color, dashed));
  };
  for (size_t k = s.lrs.size(); k-- > 0;)
    if (!ablate || k == 0) add(g.of(kPlain, s.lrs[k]), level_color(k, s.lrs.size()), false);
  add(reparam, "#9467bd", true);
  least.series.push_back({fmt::format("collapse threshold {}", kCollapsed), {0, last}, {kCollapsed, kCollapsed}, {}, {}, true, "#777777"});
  r.add_panel(loss);
  r.add_panel(least);
  r.add_panel(bound);
  r.add_panel(head_map(*high.front(), r.seed(0)));
  r.add_panel(head_map(*reparam.front(), r.seed(0)));
  if (!ablate) r.add_panel(head_map(*safe.front(), r.seed(0)));
}

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  print_runs(groups(s, g, r.ablate()), r);
  add_figure(s, g, r, r.ablate());
}

// ---------------------------------------------------------------- claims

using V = SeedView<Measured>;

std::vector<double> each_seed(const Grid<Measured>& g, const std::function<double(const V&)>& f) {
  std::vector<double> out;
  for (int i = 0; i < g.seeds(); ++i) out.push_back(f(g.seed(i)));
  return out;
}
std::string list(const std::vector<double>& v) { return fmt::format("{:.3g}", fmt::join(v, ", ")); }
// The largest difference from the plain model at initialisation, over every seed.
double init_difference(const Grid<Measured>& g) {
  double worst = 0;
  for (const Measured* m : g.of(kReparam)) worst = std::max(worst, m->init_difference);
  return worst;
}

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  const double safe = s.safe(), high = s.high();
  // The rates as the runs had them: under --ablate every one is the safe rate.
  auto lr_of = [high](const Grid<Measured>& g) { return g.at(kPlain, high, 0).lr; };
  auto at = [](double lr, double (*f)(const Measured&)) {
    return [lr, f](const Grid<Measured>& g) { return each_seed(g, [&](const V& v) { return f(v(kPlain, lr)); }); };
  };
  auto final_loss = [](const Measured& m) { return m.run.final_loss; };
  auto least_end = [](const Measured& m) { return m.run.least_head_end; };
  return {
      {.spec = {.id = "entropy_collapse_trend", .kind = ClaimKind::Paper,
                .statement = "without σReparam or warm-up, the least head's entropy falls as the learning rate grows: the least-squares slope of "
                             "its H / log(visible keys) at the end of training on log2(lr) (per doubling, over --lrs, by default 1e-3 to 1e-2) is "
                             "below -0.05",
                .side = Compare::Below, .threshold = -0.05,
                .source = "Zhai et al. 2023, section 3 (entropy collapse comes with high learning rates); -0.05 per doubling, written before the "
                          "first run of the trend: the smallest fall the lab cares about, 0.17 of log(keys) over the 3.3 doublings from 1e-3 to "
                          "1e-2, about a third of the way from a healthy head (0.55-0.61 at 1e-3 in the lab's earlier runs) to collapse (0.1, "
                          "attending to about one key). Replaces `collapse` (the high rate's level against 0.1; issue 35: a claim about a factor "
                          "is its trend)",
                .control_targets = true, .min_effect = 0.025,
                .min_effect_reason = "half the threshold's distance from no trend (0 per doubling of the rate)", .pilot_sd = 0.0241, .pilot_n = 5},
       .trend = TrendDef<Measured>{"learning rate", kPlain, least_end, TrendKind::LogSlope, "learning rate",
                                   "least head's H / log(keys) at the end, plain", true, "#d62728"},
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         return fmt::format("slope of the least head's H / log(keys) at the end per doubling of lr ({}), plain, per seed: {} (at lr {:g}: {})",
                            fmt::join(s.lrs, ", "), list(x), lr_of(g), list(at(high, least_end)(g)));
       }},
      {.spec = {.id = "worse_loss", .kind = ClaimKind::Paper,
                .statement = "the collapse comes with failed training: final loss at the high rate / at the safe rate, without σReparam, paired by "
                             "seed",
                .side = Compare::Above, .threshold = 1.5,
                .source = "Zhai et al. 2023, section 3 (low entropy is accompanied by instability: oscillating loss or divergence); 1.5x is the "
                          "margin the lab used before intervals, kept",
                .control_targets = true, .min_effect = 0.25,
                .min_effect_reason = "half the threshold's distance from equal losses (a ratio of 1): 1.75x", .pilot_sd = 0.655, .pilot_n = 5},
       .per_seed = [=](const V& v) { return v(kPlain, high).run.final_loss / v(kPlain, safe).run.final_loss; },
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         return fmt::format("final loss at lr {:g} / at lr {:g}, plain, per seed: {} (losses {} vs {})", lr_of(g), safe, list(x),
                            list(at(high, final_loss)(g)), list(at(safe, final_loss)(g)));
       }},
      {.spec = {.id = "reparam_entropy", .kind = ClaimKind::Paper,
                .statement = "σReparam keeps the least head's entropy up at the high rate: its H / log(keys) at the end minus the plain model's, "
                             "paired by seed",
                .side = Compare::Above, .threshold = 0.2,
                .source = "Zhai et al. 2023, section 4 (σReparam prevents entropy collapse); 0.2 is twice the collapse threshold. At the safe "
                          "rate the paper expects no such gap (σReparam matches stable baselines), which the ablation tests",
                .control_targets = true, .min_effect = 0.1, .min_effect_reason = "half the threshold's distance from no gap (0)", .pilot_sd = 0.124,
                .pilot_n = 5},
       .per_seed = [=](const V& v) { return v(kReparam).run.least_head_end - v(kPlain, high).run.least_head_end; },
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         return fmt::format("least head's H / log(keys) at the end at lr {:g}, σReparam minus plain, per seed: {} (σReparam {})", lr_of(g),
                            list(x), list(each_seed(g, [](const V& v) { return v(kReparam).run.least_head_end; })));
       }},
      {.spec = {.id = "reparam_loss", .kind = ClaimKind::Paper,
                .statement = "σReparam keeps the loss down at the high rate: final loss without / with σReparam, paired by seed",
                .side = Compare::Above, .threshold = 1.5,
                .source = "Zhai et al. 2023, sections 4-5 (σReparam trains without warm-up where the baseline is unstable); the same 1.5x as "
                          "worse_loss",
                .control_targets = true, .min_effect = 0.25,
                .min_effect_reason = "half the threshold's distance from equal losses (a ratio of 1), as worse_loss", .pilot_sd = 0.487,
                .pilot_n = 5},
       .per_seed = [=](const V& v) { return v(kPlain, high).run.final_loss / v(kReparam).run.final_loss; },
       .evidence = [=](const Grid<Measured>& g, const std::vector<double>& x) {
         return fmt::format("final loss at lr {:g}, plain / σReparam, per seed: {} (σReparam {})", lr_of(g), list(x),
                            list(each_seed(g, [](const V& v) { return v(kReparam).run.final_loss; })));
       }},
      {.spec = {.id = "reparam_init", .kind = ClaimKind::Check,
                .statement = "σReparam starts from the function it replaces (γ initialised to σ(W)): largest |logit difference| at initialisation",
                .side = Compare::Below, .threshold = 1e-3,
                .source = "the weights are scaled by γ / σ(W) = 1 up to the last power-iteration step and float32 rounding (logits of order 1-10)",
                .control_targets = false},
       .joint = init_difference,
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         return fmt::format("largest |logit difference| at initialisation between the model with σReparam and without: {:.3g}",
                            init_difference(g));
       }},
  };
}

}  // namespace

Lab entropy_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "entropy",
               .title = "attention entropy collapse at a high learning rate, and σReparam",
               .reference = "Zhai et al. 2023, arXiv:2303.06296 (entropy collapse, σReparam)",
               .question = "Without warm-up, does a high learning rate drive some attention head to near-zero entropy and spoil training, and "
                           "does σReparam (each weight divided by its spectral norm, times a learned scale) keep that head's entropy up and the "
                           "loss down at the same rate?",
               .default_seeds = 5,
               .ablation = "the safe learning rate at every rate of --lrs and for σReparam",
               .null = {kNull, 0},
               .null_description = "the plain model at the high rate (the last of --lrs)"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

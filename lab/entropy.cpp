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
// drawn by each seed, trained plainly at every learning rate of --lrs (a dose-response,
// lab/report.h: the first level is the safe rate, the last the high rate), and with σReparam
// (nn::MultiheadAttention::use_sigma_reparam, nn::Linear::use_sigma_reparam) at the high rate; the
// same seed gives every run the same data, initial function and batches. Every few steps the
// entropy of every head (encoder self, decoder self and cross attention) on a fixed batch of
// held-out pairs, normalised by its largest possible value log(visible keys), and the largest
// product of the query and key weights' spectral norms (the paper's bound's quantity). The claims
// are per seed, with an interval across seeds; the collapse claim is the trend of the least head's
// entropy per doubling of the rate. --control is a placebo (plain models at the high rate, each on
// its own seed, in the arms' and the levels' places); --ablate runs every rate at the safe rate:
// the paper's collapse and the rescue must then vanish. With --data DIR (lab/real_data.h) every run
// trains on that real translation task instead (the same data for every seed).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "tensor/check.h"
#include "train/run/batch_loss.h"
#include "train/loop/grad_stats.h"

namespace gf::lab {
namespace {

// A head below a tenth of its largest entropy attends to about one key (0.99 on one of 8 keys: 0.036).
constexpr double kCollapsed = 0.1;

enum Arm { kPlain = 0, kReparam = 1 };
const char* const kArmName[2] = {"plain", "σReparam"};

// One training run: loss per step, and at step 0 (initialisation) and every `every` steps each
// head's entropy on the probe batch as a share of log(visible keys), and the logit-scale bound.
struct Run {
  double lr = 0;
  Arm arm = kPlain;
  uint64_t seed = 0;
  FitResult fit;
  std::vector<int64_t> at;                 // steps of the records
  std::vector<std::vector<double>> heads;  // (records, heads): H / log(visible keys)
  std::vector<double> qk_norm;             // (records): max over attentions of σ(W_q) σ(W_k), effective weights
  std::vector<std::string> head_names;     // "enc0.self.h0", ...
  double final_loss = NAN;                 // mean of the last 10% of the steps (see finish())
  double least_head_end = NAN;             // least head's H / log(keys) at the last record
};

// Each head's entropy on one forward of the probe batch, normalised.
std::vector<double> probe_heads(nn::Seq2SeqTransformer& model, train::EntropyProbe& probe, const train::BatchTensors& batch,
                                std::vector<std::string>* names) {
  NoGradGuard ng;
  probe.arm(batch.src, batch.tgt_in);
  model.forward(batch.src, batch.tgt_in);
  std::vector<double> out;
  for (const auto& [site, h] : probe.take())
    for (size_t k = 0; k < h.heads.size(); ++k) {
      out.push_back(h.uniform > 0 ? h.heads[k] / h.uniform : NAN);
      if (names) names->push_back(fmt::format("{}.h{}", site, k));
    }
  return out;
}


// max over the model's attentions of σ(W_q) σ(W_k), of the weights the forward uses: it bounds
// |q . k| per unit of |x|^2 and so, by the paper's Theorem, how low a head's entropy can go.
double max_qk_norm(const nn::Seq2SeqTransformer& model) {
  NoGradGuard ng;  // no power-iteration step is taken for this
  double m = 0;
  for (auto* a : attention_modules(model))
    m = std::max(m, spectral_norm(a->projection_weight(0).data()) * spectral_norm(a->projection_weight(1).data()));
  return m;
}

double min_of(const std::vector<double>& v) {
  double m = INFINITY;
  for (double x : v) m = std::isnan(x) ? x : std::min(m, x);  // NaN (a broken run) propagates
  return m;
}
double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

// The final loss: the mean of the last 10% of the steps. A run that fit() stopped as diverged has
// no such tail; it counts as at least as bad as the divergence bar (3x its first loss).
double final_loss_of(const FitResult& f) {
  const auto& L = f.losses;
  if (f.diverged) return std::max(3 * L.front(), std::isfinite(L.back()) ? L.back() : 0.0);
  const size_t tail = std::max<size_t>(1, L.size() / 10);
  return std::accumulate(L.end() - static_cast<std::ptrdiff_t>(tail), L.end(), 0.0) / static_cast<double>(tail);
}

struct Setting {
  nn::Seq2SeqOptions arch;
  FitOptions base;
  int64_t every = 10;
  bool reparam_all = true;  // σReparam on every linear layer of the Transformer layers, or only on W_q and W_k
};

// σReparam on the model's Transformer layers: every attention's query and key weights, and with
// `all` (the paper's choice) every linear layer of the encoder and decoder layers as well. The
// embeddings and the output projection stay plain (the training loss reads the projection's
// weight directly).
void apply_sigma_reparam(nn::Module& m, bool all) {
  for (const auto& [name, child] : m.children()) {
    if (auto* a = dynamic_cast<nn::MultiheadAttention*>(child.get())) {
      a->use_sigma_reparam(all);
      continue;  // its out_proj is done by it
    }
    if (auto* l = dynamic_cast<nn::Linear*>(child.get()); l && all) l->use_sigma_reparam();
    apply_sigma_reparam(*child, all);
  }
}

Run train_one(const IdData& data, const Setting& s, double lr, Arm arm, uint64_t seed) {
  std::vector<size_t> first(std::min<size_t>(64, data.test.size()));
  std::iota(first.begin(), first.end(), 0);
  const train::BatchTensors probe_batch = train::to_tensors(train::collate(data.test, first));
  Run r;
  r.lr = lr, r.arm = arm, r.seed = seed;
  nn::Seq2SeqTransformer model(s.arch, seed);
  if (arm == kReparam) apply_sigma_reparam(*model.transformer, s.reparam_all);
  train::EntropyProbe probe(model);
  auto record = [&](int64_t step, std::vector<std::string>* names) {
    r.at.push_back(step);
    r.heads.push_back(probe_heads(model, probe, probe_batch, names));
    r.qk_norm.push_back(max_qk_norm(model));
  };
  record(0, &r.head_names);
  FitOptions o = s.base;
  o.lr = lr;
  o.seed = seed;
  r.fit = fit(model, data.train, o, [&](int64_t step, double) {
    if (step % s.every == 0) record(step, nullptr);
  });
  r.final_loss = final_loss_of(r.fit);
  r.least_head_end = min_of(r.heads.back());
  return r;
}

// Seed `seed`'s task: the one --task draws for it, or --data's real task (the same for every seed;
// the probe batch and the held-out pairs are its first 64 test pairs).
IdData make_data(const Report& r, const RealData* real, uint64_t seed) {
  if (real) {
    IdData d = real->ids;
    if (d.test.size() > 64) d.test.resize(64);
    return d;
  }
  const std::string task = r.text("task");
  if (task == "corpus") return builtin_corpus(r.integer("pairs"), seed);
  return synthetic_task(task, r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("pairs"), 64, seed);
}

// Every run of the lab: the plain model at each level of --lrs, σReparam at the high rate.
struct Grid {
  std::vector<double> lrs;              // the levels; front() the safe rate, back() the high rate
  std::vector<std::vector<Run>> plain;  // [level][seed]
  std::vector<Run> reparam;             // [seed], at the high rate (--ablate: the safe rate)
  const std::vector<Run>& safe() const { return plain.front(); }
  const std::vector<Run>& high() const { return plain.back(); }
};

// The largest output difference, at initialisation, between a model with σReparam and the same
// model without it: the reparametrisation starts from the function it replaces (γ = σ(W)).
double init_difference(const IdData& data, const Setting& s, uint64_t seed) {
  NoGradGuard ng;
  nn::Seq2SeqTransformer plain(s.arch, seed), reparam(s.arch, seed);
  apply_sigma_reparam(*reparam.transformer, s.reparam_all);
  plain.eval(), reparam.eval();
  std::vector<size_t> first(std::min<size_t>(64, data.test.size()));
  std::iota(first.begin(), first.end(), 0);
  const train::BatchTensors b = train::to_tensors(train::collate(data.test, first));
  const Tensor a = plain.forward(b.src, b.tgt_in).data(), c = reparam.forward(b.src, b.tgt_in).data();  // (B, T, V) each
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(a.flat_get(i) - c.flat_get(i));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);  // a NaN fails the check
  }
  return worst;
}

// ---------------------------------------------------------------- report

std::string arm_label(double lr, Arm arm) { return fmt::format("lr {:g} {}", lr, kArmName[arm]); }

void print_runs(Report& r, const Grid& g, bool ablate) {
  r.section("per run: final loss, least head's entropy (H / log(visible keys); 1 = uniform over the keys, 0 = one key), logit-scale bound");
  Table t("runs", {"lr", "arm", "seed", "steps run", "diverged at", "first loss", "final loss", "least head H at end", "mean head H at end",
                   "lowest least head H", "max σ(Wq)σ(Wk) at end"});
  auto add = [&](const Run& x) {
    double lowest = INFINITY;
    for (const auto& h : x.heads) lowest = std::min(lowest, min_of(h));
    t.row({x.lr, kArmName[x.arm], static_cast<int64_t>(x.seed), static_cast<int64_t>(x.fit.losses.size()), x.fit.diverged_at,
           x.fit.losses.front(), x.final_loss, x.least_head_end, mean_of(x.heads.back()), lowest, x.qk_norm.back()});
  };
  for (const auto& level : g.plain) {
    for (const Run& x : level) add(x);
    if (ablate) break;  // every level is the safe rate's runs
  }
  for (const Run& x : g.reparam) add(x);
  r.print(t);
}

void save_numbers(Report& r, const Grid& g, bool ablate) {
  auto& d = r.data();
  auto add = [&](const Run& x) {
    d["runs"].push_back({{"lr", x.lr}, {"arm", kArmName[x.arm]}, {"seed", x.seed}, {"losses", x.fit.losses},
                         {"diverged_at", x.fit.diverged_at}, {"record_steps", x.at}, {"head_names", x.head_names},
                         {"head_entropy", x.heads}, {"max_qk_spectral_product", x.qk_norm}, {"final_loss", x.final_loss},
                         {"least_head_end", x.least_head_end}});
  };
  for (const auto& level : g.plain) {
    for (const Run& x : level) add(x);
    if (ablate) break;  // every level is the safe rate's runs
  }
  for (const Run& x : g.reparam) add(x);
  d["lrs"] = g.lrs;
}

// One run's heads x steps, on the fixed 0..1 scale.
ValueMap head_map(const Run& x) {
  ValueMap m;
  m.title = fmt::format("heads x steps, {}, seed {}", arm_label(x.lr, x.arm), x.seed);
  m.x_label = "step";
  m.value_label = "H / log(keys)";
  m.lo = 0, m.hi = 1;
  m.row_labels = x.head_names;
  for (int64_t s : x.at) m.col_labels.push_back(std::to_string(s));
  m.values.assign(x.head_names.size(), std::vector<double>(x.at.size(), NAN));  // (heads, records)
  for (size_t k = 0; k < x.at.size(); ++k)
    for (size_t h = 0; h < x.head_names.size(); ++h) m.values[h][k] = x.heads[k][h];
  return m;
}

// A per-record quantity of a group of runs (seeds) as a mean line with a min..max band.
template <class F>
ChartSeries over_seeds(const std::string& name, const std::vector<Run>& runs, F value, const std::string& color, bool dashed) {
  std::vector<std::vector<double>> rows;
  size_t n = SIZE_MAX;
  for (const Run& x : runs) n = std::min(n, x.at.size());
  for (const Run& x : runs) {
    std::vector<double> row;
    for (size_t k = 0; k < n; ++k) row.push_back(value(x, k));
    rows.push_back(row);
  }
  std::vector<double> xs;
  for (size_t k = 0; k < n; ++k) xs.push_back(static_cast<double>(runs.front().at[k]));
  return band_series(name, xs, spread_per_column(rows), color, dashed);
}

// The training loss as means of `w` steps at each record step >= w (a record's preceding steps).
double loss_window(const Run& x, size_t k, int64_t w) {
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

void add_figure(Report& r, const Grid& g, int64_t every, bool ablate) {
  const std::vector<double> ticks = step_ticks(g.safe().front().at.back());
  Chart loss{"training loss (mean of the steps since the last record; band: seeds)", "step", "loss", false, true, {}, ticks};
  Chart least{"least head's entropy / log(keys) (band: seeds)", "step", "min over the heads", false, false, {}, ticks};
  Chart bound{"largest σ(W_q) σ(W_k) over the attentions (band: seeds)", "step", "spectral norm product", false, true, {}, ticks};
  auto add = [&](const std::vector<Run>& runs, const std::string& color, bool dashed) {
    const std::string name = arm_label(runs.front().lr, runs.front().arm);
    loss.series.push_back(over_seeds(name, runs, [&](const Run& x, size_t k) { return loss_window(x, k, every); }, color, dashed));
    least.series.push_back(over_seeds(name, runs, [](const Run& x, size_t k) { return min_of(x.heads[k]); }, color, dashed));
    bound.series.push_back(over_seeds(name, runs, [](const Run& x, size_t k) { return x.qk_norm[k]; }, color, dashed));
  };
  for (size_t k = g.plain.size(); k-- > 0;)
    if (!ablate || k == 0) add(g.plain[k], level_color(k, g.plain.size()), false);
  add(g.reparam, "#9467bd", true);
  least.series.push_back({fmt::format("collapse threshold {}", kCollapsed), {0, static_cast<double>(g.safe().front().at.back())},
                          {kCollapsed, kCollapsed}, {}, {}, true, "#777777"});
  loss.legend = Chart::Corner::BottomLeft;
  least.legend = Chart::Corner::TopRight;
  bound.legend = Chart::Corner::TopLeft;
  r.add_panel(loss);
  r.add_panel(least);
  r.add_panel(bound);
  r.add_panel(head_map(g.high().front()));
  r.add_panel(head_map(g.reparam.front()));
  if (!ablate) r.add_panel(head_map(g.safe().front()));
}

// The per-seed statistic f(seed index) of every seed.
template <class F>
std::vector<double> per_seed(int n, F f) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(f(i));
  return v;
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3g}", s.empty() ? "" : ", ", x);
  return s;
}

// The dose-response: per seed, the least head's entropy at the end at each rate, and its slope on
// log2(lr) (the rate multiplies: the levels are spaced by ratios).
std::vector<double> collapse_trend(Report& r, const Grid& g) {
  std::vector<std::vector<double>> least(g.safe().size());  // [seed][level]
  for (const auto& level : g.plain)
    for (size_t i = 0; i < level.size(); ++i) least[i].push_back(level[i].least_head_end);
  return r.dose_response({"learning rate", "learning rate", "least head's H / log(keys) at the end, plain", g.lrs, least,
                          TrendKind::LogSlope, true, "#d62728"});
}

void claims(Report& r, const Grid& g, double init_diff) {
  const int n = static_cast<int>(g.safe().size());
  const auto& ph = g.high();
  const auto& ps = g.safe();
  const auto& rh = g.reparam;
  const double high = ph.front().lr, safe = ps.front().lr;
  const auto trend = collapse_trend(r, g);
  r.paper("entropy_collapse_trend", trend,
          fmt::format("slope of the least head's H / log(keys) at the end per doubling of lr ({}), plain, per seed: {} (at lr {:g}: {})",
                      fmt::join(g.lrs, ", "), list(trend), high, list(per_seed(n, [&](int i) { return ph[i].least_head_end; }))));
  const auto worse = per_seed(n, [&](int i) { return ph[i].final_loss / ps[i].final_loss; });
  r.paper("worse_loss", worse,
          fmt::format("final loss at lr {:g} / at lr {:g}, plain, per seed: {} (losses {} vs {})", high, safe, list(worse),
                      list(per_seed(n, [&](int i) { return ph[i].final_loss; })), list(per_seed(n, [&](int i) { return ps[i].final_loss; }))));
  const auto kept = per_seed(n, [&](int i) { return rh[i].least_head_end - ph[i].least_head_end; });
  r.paper("reparam_entropy", kept,
          fmt::format("least head's H / log(keys) at the end at lr {:g}, σReparam minus plain, per seed: {} (σReparam {})", high, list(kept),
                      list(per_seed(n, [&](int i) { return rh[i].least_head_end; }))));
  const auto lower = per_seed(n, [&](int i) { return ph[i].final_loss / rh[i].final_loss; });
  r.paper("reparam_loss", lower,
          fmt::format("final loss at lr {:g}, plain / σReparam, per seed: {} (σReparam {})", high, list(lower),
                      list(per_seed(n, [&](int i) { return rh[i].final_loss; }))));
  r.check("reparam_init", init_diff,
          fmt::format("largest |logit difference| at initialisation between the model with σReparam and without: {:.3g}", init_diff));
}

// The learning rates of the dose-response (lab/report.h): 4 or more, increasing, all > 0.
std::vector<double> lr_levels(const Report& r) {
  const std::vector<double> lrs = parse_increasing_reals(r.text("lrs"), "lab entropy: --lrs");
  GF_CHECK(lrs.size() >= 4, "lab entropy: --lrs needs 4 or more learning rates for the dose-response, got '{}'", r.text("lrs"));
  GF_CHECK(lrs.front() > 0, "lab entropy: --lrs must be above 0 (the trend is per doubling), got '{}'", r.text("lrs"));
  return lrs;
}

// --control: the placebo. A pool of plain models at the high rate, each on its own seed: every
// contrast between two groups of them (one group in each arm's place), and the trend with runs of
// the high rate on different seeds in every rate's place (true trend 0).
void placebo(Report& r, Setting& s, const std::vector<double>& lrs, const RealData* real) {
  const double high = lrs.back();
  const int levels = static_cast<int>(lrs.size()), n = r.trend_placebo_pool(levels);
  r.say(fmt::format("PLACEBO: {} plain models at lr {:g}, seeds {}-{}; each contrast compares two groups of them, unpaired, and the trend "
                    "reads {} of them per seed as lr {}.", n, high, r.seed(0), r.seed(n - 1), levels, fmt::join(lrs, ", ")));
  std::vector<Run> pool;
  Table t("the pool: plain, high rate", {"seed", "final loss", "least head H at end"});
  for (int i = 0; i < n; ++i) {
    const IdData data = make_data(r, real, r.seed(i));
    s.arch = small_model(data, r.integer("d-model"), r.integer("heads"), r.integer("layers"), r.integer("ff"), r.on("pre-ln"));
    pool.push_back(train_one(data, s, high, kPlain, r.seed(i)));
    t.row({static_cast<int64_t>(r.seed(i)), pool.back().final_loss, pool.back().least_head_end});
  }
  r.print(t);
  r.placebo_trend("entropy_collapse_trend", levels, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(pool[static_cast<size_t>(j)].least_head_end);
    return trend(lrs, y, TrendKind::LogSlope);
  }, fmt::format("plain models at lr {:g} with different seeds as the rates", high));
  const std::string how = "plain high-rate model a in one arm's place, b in the other's";
  r.placebo("worse_loss", [&](int a, int b) { return pool[b].final_loss / pool[a].final_loss; }, how);
  r.placebo("reparam_entropy", [&](int a, int b) { return pool[b].least_head_end - pool[a].least_head_end; }, how);
  r.placebo("reparam_loss", [&](int a, int b) { return pool[a].final_loss / pool[b].final_loss; }, how);
}

void run(Report& r) {
  Setting s;
  Grid g;
  g.lrs = lr_levels(r);
  const double safe = g.lrs.front(), high = r.ablate() ? safe : g.lrs.back();
  s.base.steps = r.integer("steps");
  s.base.warmup = r.integer("warmup");
  s.base.clip = r.real("clip");
  s.base.max_tokens = r.integer("max-tokens");
  s.every = r.integer("every");
  GF_CHECK(r.text("reparam") == "all" || r.text("reparam") == "qk", "lab entropy: --reparam is all or qk, got '{}'", r.text("reparam"));
  s.reparam_all = r.text("reparam") == "all";
  GF_CHECK(s.every >= 1 && s.base.steps >= s.every, "lab entropy: need 1 <= --every <= --steps, got {} and {}", s.every, s.base.steps);
  std::optional<RealData> real;
  if (uses_real_data(r)) real = real_data(r);
  const RealData* rd = real ? &*real : nullptr;
  if (r.placebo_mode()) return placebo(r, s, g.lrs, rd);
  if (r.ablate())
    r.say(fmt::format("every rate of --lrs and σReparam's run at the safe rate lr {:g}; the plain runs are one per seed (the same seed, data "
                      "and rate give the same numbers), so the trend is 0 by construction: its placebo (--control) is its real control",
                      safe));
  g.plain.resize(g.lrs.size());
  double init_diff = 0;
  for (int i = 0; i < r.seeds(); ++i) {
    const IdData data = make_data(r, rd, r.seed(i));
    s.arch = small_model(data, r.integer("d-model"), r.integer("heads"), r.integer("layers"), r.integer("ff"), r.on("pre-ln"));
    if (i == 0)
      r.say(fmt::format("task {}: {} training pairs; {} model d_model {}, {} heads, {}+{} layers, ff {}; Adam (0.9, 0.98), {}, "
                        "clip {}; {} steps of <= {} tokens; entropy on 64 held-out pairs at step 0 and every {} steps; plain at lr {}; σReparam "
                        "at lr {:g} on {}",
                        rd ? "the real one above (the same for every seed)" : r.text("task") + " (drawn by each seed)", data.train.size(), r.on("pre-ln") ? "Pre-LN" : "Post-LN", s.arch.layer.d_model, s.arch.layer.nhead,
                        s.arch.num_layers, s.arch.num_layers, s.arch.layer.dim_feedforward,
                        s.base.warmup > 0 ? fmt::format("{} warm-up steps", s.base.warmup) : "no warm-up",
                        s.base.clip > 0 ? fmt::format("{}", s.base.clip) : "off", s.base.steps, s.base.max_tokens, s.every,
                        fmt::join(g.lrs, ", "), high,
                        s.reparam_all ? "every linear layer of the encoder and decoder layers (not the embeddings or the output projection)"
                                      : "the query and key weights only"));
    for (size_t k = 0; k < g.lrs.size(); ++k)
      g.plain[k].push_back(r.ablate() && k > 0 ? g.plain[0].back() : train_one(data, s, g.lrs[k], kPlain, r.seed(i)));
    g.reparam.push_back(train_one(data, s, high, kReparam, r.seed(i)));
    init_diff = std::max(init_diff, init_difference(data, s, r.seed(i)));
  }
  print_runs(r, g, r.ablate());
  save_numbers(r, g, r.ablate());
  add_figure(r, g, s.every, r.ablate());
  claims(r, g, init_diff);
}

}  // namespace

Lab entropy_lab() {
  Lab l;
  l.name = "entropy";
  l.title = "attention entropy collapse at a high learning rate, and σReparam";
  l.reference = "Zhai et al. 2023, arXiv:2303.06296 (entropy collapse, σReparam)";
  l.question =
      "Without warm-up, does a high learning rate drive some attention head to near-zero entropy and spoil training, and does σReparam (each "
      "weight divided by its spectral norm, times a learned scale) keep that head's entropy up and the loss down at the same rate?";
  l.control = "placebo: plain models at the high rate on different seeds, in the arms' and the rates' places";
  l.placebo = true;
  l.ablation = "the safe learning rate at every rate of --lrs and for σReparam";
  l.default_seeds = 5;
  l.options = {{"lrs", Option::Text, "0.001,0.002,0.005,0.01",
                "the plain model's learning rates, the dose-response's levels (4 or more, increasing): the first is the safe rate, the last "
                "the high rate, σReparam's (--ablate: every one replaced by the first)"},
               {"task", Option::Text, "reverse", "copy, reverse, sort or corpus (the built-in English->Korean corpus), drawn by each seed"},
               {"pairs", Option::Int, "2000", "training pairs"},
               {"symbols", Option::Int, "16", "synthetic tasks: alphabet size"},
               {"min-len", Option::Int, "6", "synthetic tasks: shortest sequence"},
               {"max-len", Option::Int, "12", "synthetic tasks: longest sequence"},
               {"d-model", Option::Int, "64", "model width"},
               {"heads", Option::Int, "4", "attention heads"},
               {"layers", Option::Int, "2", "encoder and decoder layers each"},
               {"ff", Option::Int, "128", "feed-forward width"},
               {"reparam", Option::Text, "all",
                "σReparam's scope: all (every linear layer of the Transformer layers, as the paper) or qk (the query and key weights only)"},
               {"pre-ln", Option::Switch, "", "Pre-LN layers (default Post-LN, as the paper's unstable baselines)"},
               {"clip", Option::Real, "0", "gradient-norm clip (0: off)"},
               {"warmup", Option::Int, "0", "linear warm-up steps, then constant (0: none, the paper's unstable setting)"},
               {"steps", Option::Int, "180", "steps per run"},
               {"max-tokens", Option::Int, "1024", "tokens per batch"},
               {"every", Option::Int, "10", "steps between entropy measurements"}};
  add_real_data_options(l.options);  // --data: a real translation task in place of --task (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

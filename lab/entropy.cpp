// Lab `entropy`: attention entropy collapse (Zhai et al. 2023, arXiv:2303.06296).
//
// The paper: "low attention entropy is accompanied by high training instability, which can take
// the form of oscillating loss or divergence"; it calls the pathologically low entropy (each query
// attending to about one key) entropy collapse, and its remedy lets models train without warm-up.
//
// Here: the same small Post-LN translator (no warm-up, Adam, no gradient clipping by default)
// trained on the same batches at several learning rates and seeds; every few steps the entropy of
// every head (encoder self, decoder self and cross attention) on a fixed batch of held-out
// pairs, normalised by its largest possible value log(visible keys) so that heads with
// different key counts compare; next to each run's loss.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "train/loop/batch_loss.h"
#include "train/loop/grad_stats.h"

namespace gf::lab {
namespace {

// A head below a tenth of its largest entropy attends to about one key (0.99 on one of 8 keys: 0.036).
constexpr double kCollapsed = 0.1;

std::vector<double> parse_list(const std::string& text, const std::string& what) {
  std::vector<double> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GF_CHECK(used != 0 && used == item.size() && v > 0, "lab entropy: --{} expects positive numbers separated by commas, got '{}'", what,
             text);
    out.push_back(v);
  }
  GF_CHECK(!out.empty(), "lab entropy: --{} is empty", what);
  std::sort(out.begin(), out.end());
  return out;
}

// One training run: loss per step, and at step 0 (initialisation) and every `every` steps each
// head's entropy on the probe batch as a share of log(visible keys).
struct Run {
  double lr = 0;
  uint64_t seed = 0;
  FitResult fit;
  std::vector<int64_t> at;                      // steps of the entropy records
  std::vector<std::vector<double>> heads;       // (records, heads): H / log(visible keys)
  std::vector<std::string> head_names;          // "enc0.self.h0", ...
  double final_loss = NAN;                      // mean of the last 10% of the steps; +inf when diverged
  double min_head_end = NAN, mean_head_end = NAN;  // at the last record
  double min_head_low = NAN;                    // the lowest min-head value over the run
  int64_t collapsed_at = -1;                    // first recorded step with a head below kCollapsed (-1: none)
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

// 0 and at most ~6 round steps up to `steps`, so that the axes start at step 0.
std::vector<double> step_ticks(int64_t steps) {
  int64_t every = 1;
  for (int64_t c : {1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000})
    if (every = c; steps / c <= 6) break;
  std::vector<double> t;
  for (int64_t s = 0; s <= steps; s += every) t.push_back(static_cast<double>(s));
  return t;
}

double min_of(const std::vector<double>& v) {
  double m = INFINITY;
  for (double x : v) m = std::isnan(x) ? x : std::min(m, x);  // NaN (a broken run) propagates
  return m;
}
double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

Run train_one(const IdData& data, const nn::Seq2SeqOptions& arch, const train::BatchTensors& probe_batch, double lr, uint64_t seed,
              const FitOptions& base, int64_t every) {
  Run r;
  r.lr = lr, r.seed = seed;
  nn::Seq2SeqTransformer model(arch, seed);
  train::EntropyProbe probe(model);
  r.at.push_back(0);
  r.heads.push_back(probe_heads(model, probe, probe_batch, &r.head_names));
  FitOptions o = base;
  o.lr = lr;
  o.seed = seed;
  r.fit = fit(model, data.train, o, [&](int64_t step, double) {
    if (step % every == 0) r.at.push_back(step), r.heads.push_back(probe_heads(model, probe, probe_batch, nullptr));
  });
  const auto& L = r.fit.losses;
  if (r.fit.diverged) {
    r.final_loss = INFINITY;
  } else {
    const size_t tail = std::max<size_t>(1, L.size() / 10);
    r.final_loss = std::accumulate(L.end() - static_cast<std::ptrdiff_t>(tail), L.end(), 0.0) / static_cast<double>(tail);
  }
  r.min_head_end = min_of(r.heads.back());
  r.mean_head_end = mean_of(r.heads.back());
  std::vector<double> least;  // per record
  for (size_t k = 0; k < r.heads.size(); ++k) {
    least.push_back(min_of(r.heads[k]));
    if (r.collapsed_at < 0 && least.back() < kCollapsed) r.collapsed_at = r.at[k];
  }
  r.min_head_low = min_of(least);
  return r;
}

IdData make_data(const Report& r) {
  const std::string task = r.text("task");
  if (task == "corpus") return builtin_corpus(r.integer("pairs"));
  return synthetic_task(task, r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("pairs"), 64, 12345);
}

using Sweep = std::vector<std::vector<Run>>;  // (learning rate, seed), rates ascending

void print_runs(Report& r, const Sweep& runs) {
  r.section("per run: loss and head entropy (H / log(visible keys); 1 = uniform over the keys, 0 = one key)");
  Table t("runs", {"lr", "seed", "steps run", "diverged at", "first loss", "final loss", "least head H at end", "mean head H at end",
                   "lowest least head H", "below 0.1 at step"});
  for (const auto& per_lr : runs)
    for (const auto& x : per_lr)
      t.row({x.lr, static_cast<int64_t>(x.seed), static_cast<int64_t>(x.fit.losses.size()), x.fit.diverged_at, x.fit.losses.front(),
             x.final_loss, x.min_head_end, x.mean_head_end, x.min_head_low, x.collapsed_at});
  r.print(t);

}

void save_numbers(Report& r, const std::vector<double>& lrs, const Sweep& runs) {
  auto& d = r.data();
  d["lrs"] = lrs;
  for (const auto& per_lr : runs)
    for (const auto& x : per_lr)
      d["runs"].push_back({{"lr", x.lr}, {"seed", x.seed}, {"losses", x.fit.losses}, {"diverged_at", x.fit.diverged_at}, {"entropy_steps", x.at},
                           {"head_names", x.head_names}, {"head_entropy", x.heads}, {"final_loss", x.final_loss}});  // null when diverged

}

// One run's heads x steps, on the fixed 0..1 scale.
ValueMap head_map(const Run& x) {
  ValueMap m;
  m.title = fmt::format("heads x steps at lr {:g}, first seed", x.lr);
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

// Loss and least/mean head entropy per rate (first seed), every run as a point, and the heads x
// steps maps of the highest and the lowest rate.
void add_figure(Report& r, const Sweep& runs, int64_t steps) {
  const std::vector<double> ticks = step_ticks(steps);
  Chart loss{"training loss (20-step means), first seed", "step", "loss", false, true, {}, ticks};
  Chart hmin{"least head entropy / log(keys), first seed", "step", "min over heads", false, false, {}, ticks};
  Chart hmean{"mean head entropy / log(keys), first seed", "step", "mean over heads", false, false, {}, ticks};
  for (const auto& per_lr : runs) {
    const Run& x = per_lr.front();
    const std::string name = fmt::format("lr {:g}{}", x.lr, x.fit.diverged ? " (diverged)" : "");
    ChartSeries l{name, {}, {}, {}, {}, false, ""};
    for (size_t s = 0; s + 20 <= x.fit.losses.size(); s += 20) {
      l.x.push_back(static_cast<double>(s + 20));
      l.y.push_back(std::accumulate(x.fit.losses.begin() + static_cast<std::ptrdiff_t>(s), x.fit.losses.begin() + static_cast<std::ptrdiff_t>(s + 20), 0.0) / 20);
    }
    loss.series.push_back(std::move(l));
    ChartSeries a{name, {}, {}, {}, {}, false, ""}, b{name, {}, {}, {}, {}, false, ""};
    for (size_t k = 0; k < x.at.size(); ++k) {
      a.x.push_back(static_cast<double>(x.at[k])), a.y.push_back(min_of(x.heads[k]));
      b.x.push_back(static_cast<double>(x.at[k])), b.y.push_back(mean_of(x.heads[k]));
    }
    hmin.series.push_back(std::move(a));
    hmean.series.push_back(std::move(b));
  }
  loss.legend = hmean.legend = Chart::Corner::BottomLeft;  // where the curves leave room
  r.add_panel(loss);
  r.add_panel(hmin);
  r.add_panel(hmean);
  // Every run as a point: its lowest least-head entropy against its final loss (the third claim).
  Chart scatter{"every run: final loss against its least head's lowest entropy", "lowest least-head H / log(keys)", "final loss", true, true, {}, {}};
  double y_lo = INFINITY, y_hi = 0;
  for (const auto& per_lr : runs) {
    ChartSeries p{fmt::format("lr {:g}", per_lr.front().lr), {}, {}, {}, {}, false, ""};
    for (const auto& x : per_lr) {
      p.x.push_back(x.min_head_low), p.y.push_back(x.final_loss);
      if (std::isfinite(x.final_loss)) y_lo = std::min(y_lo, x.final_loss), y_hi = std::max(y_hi, x.final_loss);
    }
    scatter.series.push_back(std::move(p));
  }
  if (y_hi > 0)
    scatter.series.push_back({fmt::format("collapse threshold {}", kCollapsed), {kCollapsed, kCollapsed}, {y_lo, y_hi}, {}, {}, true, "#777777"});
  scatter.legend = Chart::Corner::BottomLeft;  // collapsed runs sit top left, stable ones bottom right
  r.add_panel(scatter);
  r.add_panel(head_map(runs.back().front()));
  r.add_panel(head_map(runs.front().front()));

}

double median_of(const std::vector<Run>& v, double Run::*f) {
  std::vector<double> x;
  for (const auto& run : v) x.push_back(run.*f);
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

void check_claims(Report& r, const Sweep& runs) {
  const auto& hi = runs.back();
  const auto& lo = runs.front();
  const double hi_min = median_of(hi, &Run::min_head_end), lo_min = median_of(lo, &Run::min_head_end);
  r.claim(fmt::format("at the highest learning rate heads collapse: the least head's entropy ends below {} of log(keys), under a third of "
                      "the lowest rate's",
                      kCollapsed),
          hi_min < kCollapsed && hi_min < lo_min / 3,
          fmt::format("median over seeds of the least head's H / log(keys) at the end: {:.3g} at lr {:g}, {:.3g} at lr {:g}", hi_min,
                      hi.front().lr, lo_min, lo.front().lr));

  const double hi_loss = median_of(hi, &Run::final_loss);
  double best_loss = INFINITY, best_lr = 0;
  for (const auto& per_lr : runs)
    if (median_of(per_lr, &Run::final_loss) < best_loss) best_loss = median_of(per_lr, &Run::final_loss), best_lr = per_lr.front().lr;
  r.claim("the highest learning rate trains worse: its final loss is at least 1.5x the best rate's (or it diverged)", hi_loss >= 1.5 * best_loss,
          fmt::format("median final loss {:.4g} at lr {:g}; best {:.4g} at lr {:g}", hi_loss, hi.front().lr, best_loss, best_lr));

  // Over every run of the sweep: does a collapsed head go with a bad loss? The worst loss of the
  // runs that kept their heads against the best of those that collapsed, with a 1.5x margin.
  double worst_kept = 0, best_collapsed = INFINITY, kept_lowest = INFINITY, collapsed_highest = 0;
  int n_collapsed = 0, n_kept = 0;
  for (const auto& per_lr : runs)
    for (const auto& x : per_lr) {
      if (x.min_head_low < kCollapsed) {
        ++n_collapsed;
        best_collapsed = std::min(best_collapsed, x.final_loss);
        collapsed_highest = std::max(collapsed_highest, x.min_head_low);
      } else {
        ++n_kept;
        worst_kept = std::max(worst_kept, x.final_loss);
        kept_lowest = std::min(kept_lowest, x.min_head_low);
      }
    }
  r.claim(fmt::format("collapse goes with instability: every run with a head below {} of log(keys) ends with a loss at least 1.5x that of "
                      "every run without one",
                      kCollapsed),
          n_collapsed > 0 && n_kept > 0 && best_collapsed >= 1.5 * worst_kept,
          fmt::format("{} of {} runs collapsed (least head down to {:.3g} at most), their best final loss {:.4g}; in the other {} the "
                      "least head stayed at {:.3g} or more, their worst final loss {:.4g}",
                      n_collapsed, n_collapsed + n_kept, collapsed_highest, best_collapsed, n_kept, kept_lowest, worst_kept));
}

void run(Report& r) {
  const std::vector<double> lrs = parse_list(r.text("lrs"), "lrs");
  const IdData data = make_data(r);
  const bool pre_ln = r.on("pre-ln");
  nn::Seq2SeqOptions arch = small_model(data, r.integer("d-model"), r.integer("heads"), r.integer("layers"), r.integer("ff"), pre_ln);
  FitOptions base;
  base.steps = r.integer("steps");
  base.warmup = r.integer("warmup");
  base.clip = r.real("clip");
  base.max_tokens = r.integer("max-tokens");
  const int64_t every = r.integer("every");
  std::vector<size_t> first(std::min<size_t>(64, data.test.size()));
  std::iota(first.begin(), first.end(), 0);
  const train::BatchTensors probe = train::to_tensors(train::collate(data.test, first));
  r.say(fmt::format("task {}: {} training pairs; {} model d_model {}, {} heads, {}+{} layers, ff {}; Adam (0.9, 0.98), {}, clip {}",
                    r.text("task"), data.train.size(), pre_ln ? "Pre-LN" : "Post-LN", arch.layer.d_model, arch.layer.nhead, arch.num_layers,
                    arch.num_layers, arch.layer.dim_feedforward, base.warmup > 0 ? fmt::format("{} warm-up steps", base.warmup) : "no warm-up",
                    base.clip > 0 ? fmt::format("{}", base.clip) : "off"));
  r.say(fmt::format("{} steps of <= {} tokens per run; head entropy on the first {} held-out pairs at step 0 and every {} steps, as H / log(visible keys)",
                    base.steps, base.max_tokens, first.size(), every));

  Sweep runs;
  for (double lr : lrs) {
    runs.emplace_back();
    for (int i = 0; i < r.seeds(); ++i) runs.back().push_back(train_one(data, arch, probe, lr, r.seed(i), base, every));
  }

  print_runs(r, runs);
  save_numbers(r, lrs, runs);
  add_figure(r, runs, base.steps);
  check_claims(r, runs);
}

}  // namespace

Lab entropy_lab() {
  Lab l;
  l.name = "entropy";
  l.title = "attention entropy collapse at a high learning rate";
  l.reference = "Zhai et al. 2023, arXiv:2303.06296 (entropy collapse)";
  l.question = "Without warm-up, does a learning rate high enough to make training unstable drive attention heads to near-zero entropy, while stable rates keep it high?";
  l.default_seeds = 2;
  l.options = {{"lrs", Option::Text, "3e-4,1e-3,3e-3,1e-2,3e-2", "learning rates, comma-separated"},
               {"task", Option::Text, "reverse", "copy, reverse, sort or corpus (the built-in English->Korean corpus)"},
               {"pairs", Option::Int, "2000", "training pairs"},
               {"symbols", Option::Int, "16", "synthetic tasks: alphabet size"},
               {"min-len", Option::Int, "6", "synthetic tasks: shortest sequence"},
               {"max-len", Option::Int, "12", "synthetic tasks: longest sequence"},
               {"d-model", Option::Int, "64", "model width"},
               {"heads", Option::Int, "4", "attention heads"},
               {"layers", Option::Int, "2", "encoder and decoder layers each"},
               {"ff", Option::Int, "128", "feed-forward width"},
               {"pre-ln", Option::Switch, "", "Pre-LN layers (default Post-LN, as the paper's unstable baselines)"},
               {"clip", Option::Real, "0", "gradient-norm clip (0: off)"},
               {"warmup", Option::Int, "0", "linear warm-up steps, then constant (0: none, the paper's unstable setting)"},
               {"steps", Option::Int, "250", "steps per run"},
               {"max-tokens", Option::Int, "1024", "tokens per batch"},
               {"every", Option::Int, "10", "steps between entropy measurements"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

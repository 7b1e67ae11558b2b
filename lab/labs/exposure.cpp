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
// the same for every level) and kept at its best free-running (greedy) accuracy on held-out pairs
// (--select), at each level of the dose-response --ss-rates: the speed 100/k of scheduled
// sampling's decay (lab/common.h), 0 for teacher forcing. Each model is measured as lab/exposure.h
// says: accuracy per position teacher-forced against free-running, and a forced wrong token
// followed onwards. The positions compared are those every model of the analysis (every level and
// seed, or a placebo's whole pool) has enough sentences at. The scheduled-sampling claims are the
// trends of the late-half gap and of the derailment on 100/k.
// With --data DIR (lab/real_data.h) the translators are trained on that task instead (Multi30k's
// German -> English, say), each seed its own weights and batch order on the same data.
// --control: the placebo, teacher-forced models of seeds of their own in the levels' places.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "lab/exposure.h"
#include "lab/runner.h"
#include "lab/trained_model.h"

namespace gf::lab {
namespace {

using namespace exposure;
using V = SeedView<Measured>;
const char* const kArm = "ss-rate";

struct Settings {
  // Twelve models trained until converged (4 levels x 3 seeds) must fit the lab's budget: a
  // narrower, shallower model on a smaller corpus than the attribution lab's, and a learning rate
  // and stopping rule that reach the held-out loss's plateau in about 650 steps instead of 1,250
  // (docs/labs/exposure.md).
  TrainedModelSettings model{.corpus = 3000, .d_model = 32, .layers = 1, .train_steps = 4000, .lr = 0.004};
  int64_t valid_every = 50, patience = 2;
  double min_improvement = 0.05;
  std::string select = "free-running";
  std::vector<double> ss_rates{0, 0.25, 0.5, 1};
  int64_t sentences = 400, offsets = 8, min_support = 40, show = 0;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = Fields<S>::nest(&S::model, trained_model_fields());
  f.add({{"valid-every", &S::valid_every, "convergence: steps between held-out measurements"},
         {"patience", &S::patience, "convergence: measurements without a real improvement before stopping"},
         {"min-improvement", &S::min_improvement, "convergence: a real improvement lowers the best held-out NLL by this share"},
         {"select", &S::select,
          "which held-out measurement's weights each model keeps: free-running (the highest greedy token accuracy on the first 200 "
          "validation pairs) or nll (the lowest teacher-forced NLL, which never sees the model's own prefix)"},
         {"ss-rates", &S::ss_rates,
          "the dose-response's levels: the speed 100/k of scheduled sampling's decay k / (k + exp(step / k)), 0 for teacher forcing (4 or "
          "more, increasing, from 0; 0.5 is k 200)"},
         {"sentences", &S::sentences, "test sentences per model"},
         {"offsets", &S::offsets, "steps after the forced token to follow"},
         {"min-support", &S::min_support, "positions shown need this many sentences in every model"},
         {"show", &S::show, "from which test sentence the figure's example is searched (0-based)"}});
  return f.add(Fields<S>::nest(&S::model, trained_model_data_fields()));  // --data: the translators trained on a real task
}

void validate(const Settings& s) {
  GF_CHECK(s.model.model.empty(), "lab exposure: --model is not supported (the lab trains every arm the same way)");
  GF_CHECK(s.offsets >= kDerailSteps, "lab exposure: --offsets must be at least {}, got {}", kDerailSteps, s.offsets);
  const std::string rates = fmt::format("{}", fmt::join(s.ss_rates, ","));
  GF_CHECK(std::adjacent_find(s.ss_rates.begin(), s.ss_rates.end(), std::greater_equal<double>()) == s.ss_rates.end(),
           "lab exposure: --ss-rates must increase, got '{}'", rates);
  GF_CHECK(s.ss_rates.size() >= 4, "lab exposure: --ss-rates needs 4 or more levels for the dose-response, got {} ('{}')", s.ss_rates.size(), rates);
  GF_CHECK(s.ss_rates[0] == 0, "lab exposure: --ss-rates must start at 0 (teacher forcing, the model gap_grows and derails read), got '{}'",
           rates);
  GF_CHECK(s.select == "free-running" || s.select == "nll", "lab exposure: --select is free-running or nll, got '{}'", s.select);
}

struct Context {
  Output* out = nullptr;         // where each model says where it came from
  std::optional<RealData> real;  // --data: the task, read once
};

Context prepare(const Settings& s, Report& r) {
  Context c;
  c.out = &r;
  if (s.model.real.given()) c.real = real_data(s.model.real_settings(), r);
  std::vector<std::string> ks;
  for (double rate : s.ss_rates) ks.push_back(rate == 0 ? "teacher forcing" : fmt::format("{:g}", 100 / rate));
  r.say(fmt::format("training: until the held-out NLL has not improved by {:g}% for {} measurements {} steps apart (at most --train-steps {}), "
                    "keeping the weights of the measurement with {}; scheduled sampling: true token with probability k / (k + exp(step / k)), "
                    "at 100/k = {} (k = {})",
                    100 * s.min_improvement, s.patience, s.valid_every, s.model.train_steps,
                    s.select == "nll" ? "the lowest NLL (--select nll)" : "the highest free-running token accuracy on 200 held-out pairs",
                    fmt::join(s.ss_rates, ", "), fmt::join(ks, ", ")));
  return c;
}

Recipe recipe_of(const Settings& s, double rate) {
  Recipe rc;
  rc.converge = true;
  rc.until.every = s.valid_every, rc.until.patience = s.patience, rc.until.min_improvement = s.min_improvement;
  rc.until.select_free_running = s.select == "free-running";
  if (rate > 0) rc.sampling.k = 100 / rate;
  return rc;
}

// One model of level k.cond.level on k.seed (from the cache when trained before), measured; its
// weights and test pairs are not kept.
Measured measure(const Settings& s, Context& c, const RunKey& k) {
  TrainedModel tm = trained_model(s.model, c.real ? &*c.real : nullptr, k.seed, *c.out, recipe_of(s, k.cond.level));
  const size_t n = std::min(static_cast<size_t>(s.sentences), tm.test.size());
  Measured m{study_model(tm, n, s.offsets, k.seed, std::min<size_t>(static_cast<size_t>(s.show), n - 1)), {}};
  c.out->say(fmt::format("  {}: {} test sentences: token accuracy teacher-forced {:.3f}, free-running {:.3f}; free-running sentences exactly right "
                         "{:.3f}",
                         level_name(k.cond.level), n, m.study.tf_accuracy, m.study.fr_tokens, m.study.fr_exact));
  tm.model.reset(), tm.test.clear();
  m.model = std::move(tm);
  return m;
}

// ---------------------------------------------------------------- statistics

// The positions every run of the analysis has at least --min-support sentences at (4 or more).
size_t positions(const std::vector<const Measured*>& runs, int64_t min_support) {
  size_t P = SIZE_MAX;
  for (const Measured* m : runs) P = std::min(P, supported_positions(m->study.pos, min_support));
  GF_CHECK_AS(std::runtime_error, P >= 4, "lab exposure: only {} positions have enough sentences in every model (--min-support)", P);
  return P;
}

double late_gap(const ModelStudy& m, size_t P) { return pooled_gap(m.pos, P / 2, P); }
double early_gap(const ModelStudy& m, size_t P) { return pooled_gap(m.pos, 0, P / 2); }
double derail(const ModelStudy& m, size_t) { return derailment(m.drift); }

// A statistic at every level for one seed, and its slope on the rate (the levels start at 0,
// teacher forcing, where a slope per doubling has no place).
std::vector<double> at_levels(const V& v, const Settings& s, double (*stat)(const ModelStudy&, size_t), size_t P) {
  std::vector<double> y;
  for (double rate : s.ss_rates) y.push_back(stat(v(kArm, rate).study, P));
  return y;
}
double level_trend(const V& v, const Settings& s, double (*stat)(const ModelStudy&, size_t)) {
  return trend(s.ss_rates, at_levels(v, s, stat, positions(v.all(), s.min_support)), TrendKind::Slope);
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : ", ", x);
  return s;
}

// ---------------------------------------------------------------- the lab's own output

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  Levels res(s.ss_rates.size());
  for (size_t l = 0; l < s.ss_rates.size(); ++l) res[l] = g.of(kArm, s.ss_rates[l]);
  const size_t P = positions(g.all(), s.min_support);
  const PositionSeries ps = position_section(r, res, s.ss_rates, P, s.min_support);
  const DriftSeries dr = drift_section(r, res, s.ss_rates, s.offsets);
  const Measured& first = *res[0][0];
  r.data()["example"] = example_json(first.study.example, first.model);
  if (first.study.derailed.k >= 0) r.data()["example_changed"] = example_json(first.study.derailed, first.model);
  figure(r, ps, dr, res, s.ss_rates);
  // The dose-response of both statistics (their trends are the claims ss_gap_trend and ss_derailment_trend).
  std::vector<std::vector<double>> gaps, derails;
  for (int i = 0; i < g.seeds(); ++i)
    gaps.push_back(at_levels(g.seed(i), s, late_gap, P)), derails.push_back(at_levels(g.seed(i), s, derail, P));
  r.dose_response({"late-half gap", kRateAxis, "late-half gap (teacher-forced minus free-running accuracy)", s.ss_rates, gaps, TrendKind::Slope,
                   false, "#1f77b4"});
  r.dose_response({"derailment", kRateAxis, "derailment (error after a forced token minus from the true prefix)", s.ss_rates, derails,
                   TrendKind::Slope, false, "#d62728"});
}

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  const std::string one_arm = "the teacher-forced arm against a threshold, no contrast between arms";
  const int64_t support = s.min_support;
  auto gap_of = [support](const V& v, double (*gap)(const ModelStudy&, size_t)) { return gap(v(kArm, 0).study, positions(v.all(), support)); };
  return {
      {.spec = {.id = "gap_grows", .kind = ClaimKind::Paper,
                .statement = "free-running accuracy falls behind teacher-forced accuracy later in the sequence: the gap pooled over the later "
                             "half of the positions minus that over the earlier half, teacher-forced model trained to convergence",
                .side = Compare::Above, .threshold = 0.05,
                .source = "Bengio et al. 2015, section 1 (errors accumulate along the sequence); 0.05 is the threshold the lab used before "
                          "intervals, kept",
                .control_targets = false, .min_effect = 0.025, .min_effect_reason = "half the threshold's distance from no growth (0)",
                .pilot_sd = 0.0161, .pilot_n = 3},
       .per_seed = [gap_of](const V& v) { return gap_of(v, late_gap) - gap_of(v, early_gap); },
       .evidence = [gap_of, support](const Grid<Measured>& g, const std::vector<double>& x) {
         const size_t P = positions(g.all(), support);
         return fmt::format("teacher forcing: gap at positions {}-{} minus at 0-{}, per seed: {} (late {}; early {})", P / 2, P - 1, P / 2 - 1,
                            list(x), list(g.per_seed([&](const V& v) { return gap_of(v, late_gap); })),
                            list(g.per_seed([&](const V& v) { return gap_of(v, early_gap); })));
       },
       .no_placebo = one_arm},
      {.spec = {.id = "derails", .kind = ClaimKind::Paper,
                .statement = "a wrong token fed back is amplified: error rate in the 3 steps after a forced wrong token minus that of decoding "
                             "from the true prefix, teacher-forced model",
                .side = Compare::Above, .threshold = 0.05,
                .source = "Bengio et al. 2015, section 1 (a mistake fed back puts the model where training never showed it); 0.05 is the "
                          "absolute margin the lab used before intervals, kept",
                .control_targets = true, .min_effect = 0.025, .min_effect_reason = "half the threshold's distance from no amplification (0)",
                .pilot_sd = 0.0497, .pilot_n = 3},
       .per_seed = [](const V& v) { return derailment(v(kArm, 0).study.drift); },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>& x) {
         auto rates = [&](bool forced) {
           return list(g.per_seed([&](const V& v) {
             const auto [f, c] = error_rates(v(kArm, 0).study.drift, kDerailSteps);
             return forced ? f : c;
           }));
         };
         return fmt::format("teacher forcing: error rate at d = 1-{} after the forced token minus from the true prefix, per seed: {} (forced {}; "
                            "clean {})",
                            kDerailSteps, list(x), rates(true), rates(false));
       },
       .no_placebo = one_arm},
      {.spec = {.id = "ss_gap_trend", .kind = ClaimKind::Paper,
                .statement = "scheduled sampling narrows the late-position gap, the more the faster its schedule: the least-squares slope of the "
                             "late-half gap (as in gap_grows' later half) on the schedule's speed 100/k over --ss-rates (by default 0 = teacher "
                             "forcing, 0.25, 0.5, 1 = k 400, 200, 100), every model trained by the same convergence rule on the seed's data, is "
                             "below -0.01",
                .side = Compare::Below, .threshold = -0.01,
                .source = "Bengio et al. 2015, sections 2-4 (scheduled sampling closes the gap between training and inference; the decay's "
                          "speed sets how many of its own tokens the model is fed). The paper gives no size: -0.01 (the gap one accuracy point "
                          "narrower at k 100 than under teacher forcing, along the fitted line) is the smallest narrowing this lab cares about, "
                          "so a placebo's zero trend cannot pass. Written before the first run of the trend, knowing the two-arm version's "
                          "numbers at k 200 (the gap +0.010 to -0.013 narrower)",
                .control_targets = true, .min_effect = 0.005, .min_effect_reason = "half the threshold's distance from no trend (0)",
                .pilot_sd = 0.0201, .pilot_n = 3},
       .per_seed = [s](const V& v) { return level_trend(v, s, late_gap); },
       .evidence = [s](const Grid<Measured>&, const std::vector<double>& x) {
         return fmt::format("slope of the late-half gap on 100/k over {}, per seed: {:+.4f}", fmt::join(s.ss_rates, ", "), fmt::join(x, ", "));
       }},
      {.spec = {.id = "ss_derailment_trend", .kind = ClaimKind::Paper,
                .statement = "scheduled sampling makes the model less derailed by a wrong token, the more the faster its schedule: the "
                             "least-squares slope of the derailment (as in derails) on 100/k over --ss-rates is below -0.02",
                .side = Compare::Below, .threshold = -0.02,
                .source = "Bengio et al. 2015, section 2 (the model learns to deal with its own mistakes). No size in the paper: -0.02 (two "
                          "points less derailment, of about 0.6, at k 100 than under teacher forcing, along the fitted line) is the smallest "
                          "fall this lab cares about. Written before the first run of the trend, knowing the two-arm version's numbers at k 200 "
                          "(0.034 to 0.070 less)",
                .control_targets = true, .min_effect = 0.01, .min_effect_reason = "half the threshold's distance from no trend (0)",
                .pilot_sd = 0.0108, .pilot_n = 3},
       .per_seed = [s](const V& v) { return level_trend(v, s, derail); },
       .evidence = [s](const Grid<Measured>&, const std::vector<double>& x) {
         return fmt::format("slope of the derailment on 100/k over {}, per seed: {:+.4f}", fmt::join(s.ss_rates, ", "), fmt::join(x, ", "));
       }},
  };
}

}  // namespace

Lab exposure_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "exposure",
               .title = "exposure bias, and scheduled sampling against it",
               .reference = "Bengio et al. 2015, arXiv:1506.03099 (sections 1-2, scheduled sampling)",
               .question = "How does a translator trained with teacher forcing until converged do on its own prefix, position by position, and "
                           "after one wrong token; and does scheduled sampling, on the same data and rule, narrow both the more, the faster its "
                           "schedule?",
               .default_seeds = 3,
               .null = {kArm, 0},
               .null_description = "teacher-forced models"},
      .settings = fields(),
      .validate = validate,
      .arms = [](const Settings& s) { return std::vector<ArmSpec>{{kArm, s.ss_rates}}; },
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

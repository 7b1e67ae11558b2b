#pragma once
// The one runner every lab goes through: make_lab(experiment) turns a lab's declaration
// (lab/experiment.h) into its entry of `gradflow lab`, and the entry runs it:
//  - the lab: every condition of every arm for each seed (--seed, --seed + 1, ...), then the lab's
//    own tables (describe), then each claim from the grid: dose-responses drawn and their trends
//    decided, per-seed statistics decided across seeds (Holm-adjusted), checks on the worst seed;
//  - --ablate, or the --control of a lab whose control is its ablation: the same with every run
//    told to remove the causal ingredient (RunKey::ablate); the control's targets must not be
//    supported;
//  - --control of a lab with a null condition: the placebo. Each paper claim's own statistic, read
//    through a SeedView whose every (arm, level) is a run of the null condition on a seed of its own,
//    for the lab's number of seeds, in `placebo_pools` pools that share no run and no seed; each pool
//    decided by the plain 95% rule. The share of pools called supported is the claim's false-positive
//    rate. A claim that reads one condition (one arm against a threshold) has no placebo; the lab says
//    so (ClaimDef::no_placebo) for any claim whose conditions are not measured like the null one, since
//    the runner learns which conditions a claim reads by running its statistic on a run of the null.
// Every run's measurement is kept in NAME.json's "runs" when M converts to JSON.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <set>

#include "lab/experiment.h"

namespace gf::lab {

template <class M>
concept JsonWritable = requires(nlohmann::json& j, const M& m) { to_json(j, m); };

namespace runner_detail {
// The condition's name as tables and the JSON write it: "Post-LN" or "Post-LN @ 20".
std::string condition_name(const Condition& c, bool has_levels);
// A placebo pool run's seed: far from any seed a lab or its development runs use.
uint64_t pool_seed(uint64_t first_seed, int run);
double seconds_since(std::chrono::steady_clock::time_point t);
}  // namespace runner_detail

template <class S, class C, class M>
class Runner {
 public:
  Runner(const Experiment<S, C, M>& e, Report& r) : e_(e), r_(r), s_(e.settings.parse(r.settings())) {}

  void run() {
    if (e_.validate) e_.validate(s_);
    ctx_ = e_.prepare ? e_.prepare(s_, r_) : C{};
    arms_ = e_.arms(s_);
    if (r_.placebo_mode()) return placebo();
    Grid<M> grid(arms_, r_.seeds());
    measure_grid(grid);
    if (e_.describe) e_.describe(s_, ctx_, grid, r_);
    for (const auto& c : e_.claims(s_)) report(c, grid);
  }

 private:
  std::vector<Condition> conditions() const {
    std::vector<Condition> out;
    for (const auto& a : arms_) {
      if (a.levels.empty()) out.push_back({a.name, 0});
      for (double l : a.levels) out.push_back({a.name, l});
    }
    return out;
  }
  bool has_levels(const std::string& arm) const {
    for (const auto& a : arms_)
      if (a.name == arm) return !a.levels.empty();
    return false;
  }

  M measure_one(const RunKey& k, int done, int total) {
    const auto t0 = std::chrono::steady_clock::now();
    M m = e_.measure(s_, ctx_, k);
    r_.progress(fmt::format("  [{}/{}] {}{}, seed {}: {:.1f} s", done, total, k.pool ? "placebo pool: " : "",
                            runner_detail::condition_name(k.cond, has_levels(k.cond.arm)), k.seed, runner_detail::seconds_since(t0)));
    return m;
  }

  // Seeds outer, conditions inner: a seed's shared state (a checkpoint, its data) serves its conditions.
  void measure_grid(Grid<M>& grid) {
    const std::vector<Condition> conds = conditions();
    const int total = static_cast<int>(conds.size()) * r_.seeds();
    int done = 0;
    for (int i = 0; i < r_.seeds(); ++i)
      for (const Condition& c : conds) grid.put(c, i, measure_one({c, r_.seed(i), i, r_.ablation_mode(), false, r_.model(i)}, ++done, total));
    if constexpr (JsonWritable<M>) {
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& [c, seeds] : grid.runs())
        for (size_t i = 0; i < seeds.size(); ++i)
        {
          nlohmann::json run{{"arm", c.arm}, {"level", c.level}, {"seed", r_.seed(static_cast<int>(i))}, {"measured", *seeds[i]}};
          if (const std::string m = r_.model(static_cast<int>(i)); !m.empty()) run["model"] = m;  // --models: the folder this seed analysed
          runs.push_back(std::move(run));
        }
      r_.data()["runs"] = runs;
    }
  }

  // One seed's value of a claim's statistic, through any view (the lab's seed, or a placebo's).
  double value(const ClaimDef<M>& c, const SeedView<M>& v) const {
    if (!c.trend) return c.per_seed(v);
    std::vector<double> y;
    const ArmSpec* arm = nullptr;
    for (const auto& a : arms_) arm = a.name == c.trend->arm ? &a : arm;
    GF_CHECK_AS(std::logic_error, arm, "lab {}: claim '{}' reads arm '{}', which the lab has not", e_.info.name, c.spec.id, c.trend->arm);
    for (double l : arm->levels) y.push_back(c.trend->stat(v(arm->name, l)));
    return trend(arm->levels, y, c.trend->kind);
  }

  void report(const ClaimDef<M>& c, const Grid<M>& grid) {
    std::vector<double> values;
    if (c.trend) {
      const ArmSpec& a = grid.arm(c.trend->arm);
      std::vector<std::vector<double>> y(static_cast<size_t>(grid.seeds()));
      for (int i = 0; i < grid.seeds(); ++i)
        for (double l : a.levels) y[static_cast<size_t>(i)].push_back(c.trend->stat(grid.at(a.name, l, i)));
      values = r_.dose_response({c.trend->name, c.trend->factor, c.trend->statistic, a.levels, y, c.trend->kind, c.trend->log_x, c.trend->color});
    } else if (c.per_seed) {
      for (int i = 0; i < grid.seeds(); ++i) values.push_back(c.per_seed(grid.seed(i)));
    } else if (c.per_seed_each) {
      for (int i = 0; i < grid.seeds(); ++i)
        for (double x : c.per_seed_each(grid.seed(i))) values.push_back(x);
    }
    const std::string ev = c.evidence ? c.evidence(grid, values) : "";
    if (c.spec.kind == ClaimKind::Check) {
      if (c.joint) r_.check(c.spec.id, c.joint(grid), ev);
      else r_.check(c.spec.id, values, ev);
    } else {
      r_.paper(c.spec.id, values, ev);
    }
  }

  // ---- the placebo ----
  Condition null_of(const ClaimDef<M>& c) const { return c.null ? *c.null : e_.info.null; }

  // The conditions a claim reads for one seed, in the order it reads them: a dry run on one run.
  std::vector<Condition> slots(const ClaimDef<M>& c, const M& any) const {
    std::vector<Condition> read;
    SeedView<M> v([&](const Condition& k) -> const M& {
      if (std::find(read.begin(), read.end(), k) == read.end()) read.push_back(k);
      return any;
    }, 0, [&] { return std::vector<const M*>{&any}; });
    (void)value(c, v);
    return read;
  }

  void placebo() {
    const int n = r_.seeds(), pools = r_.placebo_pools(e_.info.placebo_pools);
    std::map<std::pair<Condition, int>, M> pool;  // (null condition, run number) -> its measurement
    auto run_of = [&](const Condition& null, int p) -> const M& {
      auto key = std::make_pair(null, p);
      if (!pool.count(key))
        pool.emplace(key, measure_one({null, runner_detail::pool_seed(r_.seed(0), p), p, false, true}, static_cast<int>(pool.size()) + 1, 0));
      return pool.at(key);
    };
    r_.say(fmt::format("PLACEBO: {}; each paper claim's own statistic, every condition it reads a run of that on a seed of its own, "
                       "{} seeds a pool, {} pools that share no run", e_.info.null_description, n, pools));
    for (const auto& c : e_.claims(s_)) {
      if (c.spec.kind != ClaimKind::Paper) continue;
      if (!c.no_placebo.empty()) {
        r_.no_placebo(c.spec.id, c.no_placebo);
        continue;
      }
      const Condition null = null_of(c);
      const int k = static_cast<int>(slots(c, run_of(null, 0)).size());
      if (k <= 1) {
        r_.no_placebo(c.spec.id, "one condition's statistic against a threshold, no contrast between conditions");
        continue;
      }
      for (int run = 0; run < pools * n * k; ++run) run_of(null, run);  // the whole pool first: SeedView::all() is every run of it
      // A claim that draws a null condition of its own (ClaimDef::null) names it.
      const std::string what = c.null ? "runs of " + runner_detail::condition_name(null, has_levels(null.arm)) : e_.info.null_description;
      Placebo p{c.spec.id, fmt::format("{} in each of the {} conditions it reads", what, k), pools * n * k, n, pools, 0, 0};
      std::vector<double> first;
      for (int rep = 0; rep < pools; ++rep) {
        std::vector<double> values;
        for (int i = 0; i < n; ++i) {
          std::vector<Condition> seen;
          SeedView<M> v([&](const Condition& want) -> const M& {
            auto at = std::find(seen.begin(), seen.end(), want);
            const int slot = static_cast<int>(at - seen.begin());
            if (at == seen.end()) seen.push_back(want);
            return run_of(null, (rep * n + i) * k + slot);
          }, i, [&] {
            std::vector<const M*> all;
            for (const auto& [key, m] : pool) all.push_back(&m);
            return all;
          });
          values.push_back(value(c, v));
        }
        const Outcome o = decide(c.spec.side, c.spec.threshold, values, 0.05);
        p.supported += o == Outcome::Supported, p.contradicted += o == Outcome::Contradicted;
        if (rep == 0) first = values;
      }
      r_.record_placebo(p, first);
    }
  }

  const Experiment<S, C, M>& e_;
  Report& r_;
  S s_;
  C ctx_{};
  std::vector<ArmSpec> arms_;
};

// The lab's entry in `gradflow lab`: its description, its flags (from the field table) and the runner.
template <class S, class C, class M>
Lab make_lab(Experiment<S, C, M> e) {
  Lab l;
  l.name = e.info.name, l.title = e.info.title, l.reference = e.info.reference, l.question = e.info.question;
  l.default_seeds = e.info.default_seeds, l.first_seed = e.info.first_seed, l.takes_models = e.info.takes_models;
  l.placebo = !e.info.null.arm.empty();
  if (l.placebo) l.control = "placebo: " + e.info.null_description + ", on seeds of its own, in every condition a claim reads";
  else if (e.info.control_is_ablation) l.control = e.info.ablation;
  if (l.placebo) l.ablation = e.info.ablation;
  l.options = e.settings.options();
  for (const auto& c : e.claims(S{})) l.claims.push_back(c.spec);
  for (auto& c : l.claims) c.lab = l.name;
  auto shared = std::make_shared<const Experiment<S, C, M>>(std::move(e));
  l.run = [shared](Report& r) { Runner<S, C, M>(*shared, r).run(); };
  return l;
}

}  // namespace gf::lab

#pragma once
// What a lab declares, and nothing else (the runner, lab/runner.h, owns the rest: seeds, placebo
// pools, the ablation, tables, JSON, SVG, the verdict and the lab's entry in `gradflow lab`):
//  1. its settings, once, in one field table (lab/fields.h);
//  2. its arms, each with the levels of its factor (or none);
//  3. one measurement function for an (arm, level, seed): a struct of numbers, M;
//  4. its claims, each a statistic of one seed's measurements (read by arm and level), decided
//     across seeds (lab/stats.h), a trend over an arm's levels, or an exact check.
// A placebo (--control of a lab with a null condition) is derived, not written: each paper claim's
// own statistic with every (arm, level) it reads replaced by a run of the null condition on a seed
// of its own, over pools of runs that share no seed (lab/runner.h).
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/fields.h"
#include "lab/lab.h"
#include "lab/report.h"
#include "lab/output.h"

namespace gf::lab {


// One condition: an arm, at one level of its factor when it has one (level 0 otherwise).
struct Condition {
  std::string arm;
  double level = 0;
  auto operator<=>(const Condition&) const = default;
};

struct ArmSpec {
  std::string name;
  std::vector<double> levels;  // the factor's levels, increasing; empty: the arm is one condition
};

// The run a measurement is asked for.
struct RunKey {
  Condition cond;
  uint64_t seed = 0;
  int index = 0;        // the seed's place: 0 .. seeds - 1, or a placebo pool's run number
  bool ablate = false;  // the ablation: the causal ingredient removed (Lab::ablation says what)
  bool pool = false;    // a placebo pool's run (of the null condition)
  std::string model;    // --models: the trained run folder this seed analyses ("" : the lab trains its own)
};

// One seed's measurements, read by arm and level. For a placebo, every (arm, level) a claim reads
// is a run of the null condition on a seed of its own.
template <class M>
class SeedView {
 public:
  using Lookup = std::function<const M&(const Condition&)>;
  SeedView(Lookup lookup, int index, std::function<std::vector<const M*>()> all)
      : lookup_(std::move(lookup)), index_(index), all_(std::move(all)) {}
  const M& operator()(const std::string& arm, double level = 0) const { return lookup_({arm, level}); }
  int index() const { return index_; }
  // Every run of this analysis: the lab's grid, or a placebo's whole pool (exposure reads the
  // positions every run shares).
  std::vector<const M*> all() const { return all_(); }

 private:
  Lookup lookup_;
  int index_;
  std::function<std::vector<const M*>()> all_;
};

// The lab's measurements: every condition of every arm, for each of its seeds.
template <class M>
class Grid {
 public:
  Grid(std::vector<ArmSpec> arms, int seeds) : arms_(std::move(arms)), seeds_(seeds) {}
  const std::vector<ArmSpec>& arms() const { return arms_; }
  int seeds() const { return seeds_; }
  const ArmSpec& arm(const std::string& name) const {
    for (const auto& a : arms_)
      if (a.name == name) return a;
    GF_FAIL_AS(std::logic_error, "lab: no arm '{}'", name);
  }
  void put(const Condition& c, int seed, M m) { runs_[c].resize(static_cast<size_t>(seeds_)), runs_[c][static_cast<size_t>(seed)] = std::make_shared<M>(std::move(m)); }
  const M& at(const std::string& arm, double level, int seed) const { return at({arm, level}, seed); }
  const M& at(const Condition& c, int seed) const {
    auto it = runs_.find(c);
    GF_CHECK_AS(std::logic_error, it != runs_.end() && it->second.at(static_cast<size_t>(seed)), "lab: no run of arm '{}' at level {} for seed {}",
                c.arm, c.level, seed);
    return *it->second[static_cast<size_t>(seed)];
  }
  // Every seed's run of one condition.
  std::vector<const M*> of(const std::string& arm, double level = 0) const {
    std::vector<const M*> out;
    for (int i = 0; i < seeds_; ++i) out.push_back(&at(arm, level, i));
    return out;
  }
  std::vector<const M*> all() const {
    std::vector<const M*> out;
    for (const auto& [c, runs] : runs_)
      for (const auto& m : runs) out.push_back(m.get());
    return out;
  }
  SeedView<M> seed(int i) const {
    return SeedView<M>([this, i](const Condition& c) -> const M& { return at(c, i); }, i, [this] { return all(); });
  }
  // One number per seed, f of that seed's view.
  std::vector<double> per_seed(const std::function<double(const SeedView<M>&)>& f) const {
    std::vector<double> out;
    for (int i = 0; i < seeds_; ++i) out.push_back(f(seed(i)));
    return out;
  }
  const std::map<Condition, std::vector<std::shared_ptr<M>>>& runs() const { return runs_; }

 private:
  std::vector<ArmSpec> arms_;
  int seeds_;
  std::map<Condition, std::vector<std::shared_ptr<M>>> runs_;
};

// A dose-response: the claim's statistic at every level of one arm, per seed, read as a trend.
template <class M>
struct TrendDef {
  std::string name;                      // the dose-response's name in NAME.json: "warm-up"
  std::string arm;                       // the arm whose levels are the factor's
  std::function<double(const M&)> stat;  // the statistic at one level
  TrendKind kind = TrendKind::Slope;
  std::string factor, statistic;         // the axes: "warm-up steps", "held-out NLL"
  bool log_x = false;
  std::string color;
};

// A claim: its row (statement, side, threshold, source, design) and how it is computed.
template <class M>
struct ClaimDef {
  ClaimSpec spec;
  // One value per seed from that seed's measurements (a paper claim's statistic, or a check that
  // every seed must pass, decided on the worst seed).
  std::function<double(const SeedView<M>&)> per_seed;
  // A trend over an arm's levels (spec.kind Paper): one trend per seed, drawn as a dose-response.
  std::optional<TrendDef<M>> trend;
  // A check of every seed together (a count pooled over seeds, a slope of means): one value.
  std::function<double(const Grid<M>&)> joint;
  // A check of several values per seed (a slope between each two consecutive levels), every one of
  // which must pass: decided on the worst, all kept (seed by seed, in order).
  std::function<std::vector<double>(const SeedView<M>&)> per_seed_each;
  // The evidence line under the claim (the numbers behind it), from the per-seed values.
  std::function<std::string(const Grid<M>&, const std::vector<double>& values)> evidence;
  // Why the derived placebo does not apply (a claim that reads one condition has none anyway).
  std::string no_placebo;
  // The condition this claim's placebo draws, where it is not the lab's (scale's trend and training).
  std::optional<Condition> null;
};

// The lab's description: what `gradflow lab` lists and the page shows.
struct LabInfo {
  std::string name, title, reference, question;
  int default_seeds = 3;
  uint64_t first_seed = 1;  // the first of the seeds a run uses by default (--seed)
  bool takes_models = false;  // --models RUN [RUN ...] (Lab::takes_models)
  std::string ablation;  // what --ablate (or an ablation --control) removes; "" none
  // The ablation is the lab's --control (a lab without a placebo), not --ablate.
  bool control_is_ablation = false;
  // The placebo's null condition; an empty arm: the lab has no placebo.
  Condition null;
  std::string null_description;  // "Post-LN trained without warm-up"
  int placebo_pools = 1;          // disjoint pools of the placebo (each seeds x slots runs)
};

template <class S, class C, class M>
struct Experiment {
  LabInfo info;
  Fields<S> settings;
  std::function<void(const S&)> validate;  // std::invalid_argument naming the flag
  std::function<std::vector<ArmSpec>(const S&)> arms;
  std::function<C(const S&, Report&)> prepare;  // the shared context (data, caches), built once
  std::function<M(const S&, C&, const RunKey&)> measure;
  // Its claims, in the order they are reported. A function of the settings, since a statistic may
  // read the levels (the depths of a sweep); their rows (statements, thresholds) may not depend on them.
  std::function<std::vector<ClaimDef<M>>(const S&)> claims;
  // The lab's own tables and panels, from its measurements (the runner prints the rest).
  std::function<void(const S&, const C&, const Grid<M>&, Report&)> describe;
};

// An empty shared context, for a lab that needs none.
struct NoContext {};

}  // namespace gf::lab

#include "lab/verdict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "lab/output.h"
#include "tensor/check.h"

namespace gf::lab {
namespace {

std::string num(double x) { return fmt::format("{:.4g}", x); }

std::string design_line(const Claim& c) {
  if (c.seeds_needed == 0) return "          design: no smallest effect stated for this claim (its row in the lab's file)\n";
  const std::string needed = c.seeds_needed >= 1000 ? "1000 or more" : std::to_string(c.seeds_needed);
  std::string line = fmt::format("          designed to settle an effect of {} with {} seeds (pilot sd {}, Holm level {:.3g}); this run has {}\n",
                                 num(c.spec.min_effect), needed, num(c.spec.pilot_sd), c.design_alpha, c.interval.n);
  if (c.by_design)
    line += fmt::format("          unsettled by design: needs {} seeds for its smallest effect ({} beyond the threshold); the run has {}\n", needed,
                        num(c.spec.min_effect), c.interval.n);
  return line;
}


// Each designed paper claim's seeds at the lab's design level (Holm's strictest, 0.05 / m), and
// whether its unsettled outcome is by design.
void apply_designs(std::vector<Claim>& claims) {
  const int m = static_cast<int>(std::count_if(claims.begin(), claims.end(), [](const Claim& c) { return c.spec.kind == ClaimKind::Paper; }));
  if (m == 0) return;
  for (auto& c : claims) {
    if (c.spec.kind != ClaimKind::Paper || !c.spec.designed()) continue;
    c.design_alpha = design_alpha(m);
    c.seeds_needed = seeds_needed(c.spec.min_effect, c.spec.pilot_sd, c.design_alpha);
    c.by_design = c.outcome == Outcome::Unsettled && c.interval.n < c.seeds_needed;
  }
}

}  // namespace

Claim paper_claim(const ClaimSpec& s, const std::vector<double>& per_seed, const std::string& evidence, const std::string& salt) {
  GF_CHECK(per_seed.size() >= 2, "paper claim '{}' needs its statistic from at least 2 seeds (an interval across seeds), got {}: run with --seeds 2 "
           "or more", s.id, per_seed.size());
  Claim c{s, false, t_interval_at(per_seed, 0.95, s.range_lo, s.range_hi), per_seed, evidence};
  c.interval.method = "t 95%";
  if (s.bounded()) {
    c.bootstrap = bootstrap_interval(per_seed, std::hash<std::string>{}(salt + "/" + s.id));
    c.bootstrap.lo = std::clamp(c.bootstrap.lo, s.range_lo, s.range_hi), c.bootstrap.hi = std::clamp(c.bootstrap.hi, s.range_lo, s.range_hi);
  }
  return c;
}

Claim check_claim(const ClaimSpec& s, double value, const std::string& evidence) {
  const bool passes = on_claimed_side(s, value);
  Claim c{s, passes, {value, value, value, 1, "exact"}, {value}, evidence};
  c.outcome = passes ? Outcome::Supported : Outcome::Contradicted;
  return c;
}

Claim check_claim(const ClaimSpec& s, const std::vector<double>& per_seed, const std::string& evidence) {
  GF_CHECK(!per_seed.empty(), "check '{}' got no value", s.id);
  double worst = per_seed.front();
  for (double x : per_seed) {
    if (!std::isfinite(x)) worst = NAN;
    if (std::isfinite(worst)) worst = s.side == Compare::Above ? std::min(worst, x) : std::max(worst, x);
  }
  Claim c = check_claim(s, worst, evidence);
  c.values = per_seed;
  return c;
}

// Holm's step-down (lab/stats.h) across the paper claims: each claim's decisive interval is the t
// interval at the level it was held to (those after the stop: the stopping level), so the printed
// interval and the outcome agree.
void decide(std::vector<Claim>& claims) {
  std::vector<Claim*> tested;
  std::vector<double> p;
  for (auto& c : claims)
    if (c.spec.kind == ClaimKind::Paper) {
      tested.push_back(&c);
      const SidePValues s = side_p_values(c.spec.side, c.spec.threshold, c.values);
      p.push_back(std::min(s.supported, s.contradicted));
    }
  const auto levels = holm(p, [&](size_t k, double alpha) {
    return decide(tested[k]->spec.side, tested[k]->spec.threshold, tested[k]->values, alpha) != Outcome::Unsettled;
  });
  for (size_t k = 0; k < tested.size(); ++k) {
    Claim& c = *tested[k];
    const double alpha = levels[k].alpha;
    c.outcome = levels[k].stopped ? Outcome::Unsettled : decide(c.spec.side, c.spec.threshold, c.values, alpha);
    c.decisive = t_interval_at(c.values, 1 - alpha, c.spec.range_lo, c.spec.range_hi);
    if (c.outcome == Outcome::Unsettled) c.seeds_to_settle = seeds_to_settle(c.spec.threshold, c.values, alpha);
    c.holds = c.outcome == Outcome::Supported;
  }
  apply_designs(claims);
}

std::string claim_text(const Claim& c) {
  const bool paper = c.spec.kind == ClaimKind::Paper;
  const Interval& iv = c.interval;
  const char* tag = !paper                                  ? (c.holds ? "passes" : "FAILS")
                    : c.outcome == Outcome::Supported        ? "supported"
                    : c.outcome == Outcome::Contradicted     ? "CONTRADICTED"
                    : c.by_design                            ? "unsettled by design"
                                                             : "unsettled";
  std::string line = fmt::format("  [{}] {} {}: {}\n", tag, kind_name(c.spec.kind), c.spec.id, c.spec.statement);
  if (!paper) {
    line += fmt::format("          {} (exact) {} {}; {}\n", num(iv.mean), side_symbol(c.spec.side), num(c.spec.threshold), c.spec.source);
  } else {
    line += fmt::format("          {} [{}, {}] ({}, n {}) {} {}{}; {}\n", num(iv.mean), num(iv.lo), num(iv.hi), iv.method, iv.n,
                        side_symbol(c.spec.side), num(c.spec.threshold), c.spec.control_targets ? ", a target of the control" : "", c.spec.source);
    if (c.decisive.n > 0)
      line += fmt::format("          decided on [{}, {}] ({}, Holm-adjusted across the lab's paper claims)\n", num(c.decisive.lo), num(c.decisive.hi),
                          c.decisive.method);
    if (c.bootstrap.n > 0) line += fmt::format("          bootstrap [{}, {}] ({}, beside the t interval)\n", num(c.bootstrap.lo), num(c.bootstrap.hi), c.bootstrap.method);
    if (!c.values.empty()) {
      std::vector<std::string> v;
      for (double x : c.values) v.push_back(num(x));
      line += fmt::format("          per seed: {}\n", fmt::join(v, ", "));
    }
    if (c.seeds_to_settle == 0)
      line += "          unsettled: the mean sits on the threshold (or a value is not finite); more seeds would not settle it\n";
    else if (c.seeds_to_settle > 0)
      line += fmt::format("          unsettled at n {}: an effect of this size ({} from the threshold) with this spread would need {}{} seeds to be settled "
                          "at the level it was held to\n",
                          iv.n, num(std::abs(iv.mean - c.spec.threshold)), c.seeds_to_settle >= 1000 ? "1000 or more" : "about ",
                          c.seeds_to_settle >= 1000 ? std::string() : std::to_string(c.seeds_to_settle));
    line += design_line(c);
  }
  if (!c.evidence.empty()) line += fmt::format("          {}\n", c.evidence);
  return line;
}


nlohmann::json claim_json(const Claim& c) {
  const bool paper = c.spec.kind == ClaimKind::Paper;
  nlohmann::json values = nlohmann::json::array();
  for (double v : c.values) values.push_back(number_json(v));
  nlohmann::json j = {{"id", c.spec.id}, {"kind", kind_name(c.spec.kind)}, {"statement", c.spec.statement}, {"holds", c.holds},
                      {"outcome", paper ? outcome_name(c.outcome) : c.holds ? "passes" : "fails"},
                      {"mean", number_json(c.interval.mean)}, {"lo", number_json(c.interval.lo)}, {"hi", number_json(c.interval.hi)},
                      {"n", c.interval.n}, {"method", c.interval.method}, {"side", side_name(c.spec.side)}, {"threshold", c.spec.threshold},
                      {"source", c.spec.source}, {"control_targets", c.spec.control_targets}, {"evidence", c.evidence}, {"values", values}};
  if (c.decisive.n > 0) j["decisive"] = {{"lo", number_json(c.decisive.lo)}, {"hi", number_json(c.decisive.hi)}, {"method", c.decisive.method}};
  if (c.bootstrap.n > 0) j["bootstrap"] = {{"lo", number_json(c.bootstrap.lo)}, {"hi", number_json(c.bootstrap.hi)}, {"method", c.bootstrap.method}};
  if (c.spec.bounded()) j["range"] = {number_json(c.spec.range_lo), number_json(c.spec.range_hi)};
  if (c.seeds_to_settle >= 0) j["seeds_to_settle"] = c.seeds_to_settle;
  if (c.seeds_needed > 0)
    j["design"] = {{"min_effect", c.spec.min_effect}, {"min_effect_reason", c.spec.min_effect_reason}, {"pilot_sd", c.spec.pilot_sd},
                   {"pilot_n", c.spec.pilot_n}, {"alpha", c.design_alpha}, {"seeds_needed", c.seeds_needed}, {"by_design", c.by_design}};
  return j;
}

Tally tally(const std::vector<Claim>& claims) {
  Tally t;
  for (const auto& c : claims) {
    t.targets += c.spec.control_targets, t.targets_failed += c.spec.control_targets && !c.holds;
    if (c.spec.kind == ClaimKind::Check) {
      ++t.checks, t.passed += c.holds;
      if (!c.holds) t.failed_ids.push_back(c.spec.id);
      continue;
    }
    ++t.papers;
    if (c.outcome == Outcome::Supported) ++t.supported;
    if (c.outcome == Outcome::Contradicted) ++t.contradicted, t.contradicted_ids.push_back(c.spec.id);
    if (c.outcome == Outcome::Unsettled) ++t.unsettled, t.unsettled_ids.push_back(c.by_design ? c.spec.id + " (by design)" : c.spec.id);
    if (c.outcome == Outcome::Supported && c.spec.control_targets) t.targets_supported.push_back(c.spec.id);
  }
  return t;
}

std::string verdict_line(const Tally& t, const std::string& reference, const std::string& control, bool ablation, int* code) {
  *code = t.contradicted > 0 || t.passed < t.checks ? 3 : t.unsettled > 0 ? 4 : 0;
  auto plural = [](int n, const char* one, const char* many) { return n == 1 ? one : many; };
  const std::string exact = t.checks == 0 ? ""
                            : t.passed == t.checks ? fmt::format(" ({} exact check{} pass{})", t.checks, plural(t.checks, "", "s"), plural(t.checks, "es", ""))
                                                   : fmt::format(" ({} of {} exact checks pass)", t.passed, t.checks);
  std::string line;
  if (t.papers == 0) {
    line = t.passed == t.checks ? fmt::format("demonstration: {} exact check{} pass{}", t.checks, plural(t.checks, "", "s"), plural(t.checks, "es", ""))
                                : fmt::format("demonstration: FAILS: {} of {} exact checks pass", t.passed, t.checks);
  } else {
    const char* head = t.contradicted > 0 ? "DISAGREES with" : t.passed < t.checks ? "FAILS an exact check, for" : t.unsettled > 0 ? "UNSETTLED for" : "AGREES with";
    line = fmt::format("check: {} {}{}: supports {}, contradicts {}, unsettled {} of {} paper claims{}", head, reference,
                       control.empty() ? "" : fmt::format(" (control: {})", control), t.supported, t.contradicted, t.unsettled, t.papers, exact);
  }
  if (!t.contradicted_ids.empty()) line += fmt::format("; contradicted: {}", fmt::join(t.contradicted_ids, ", "));
  if (!t.unsettled_ids.empty()) line += fmt::format("; unsettled: {}", fmt::join(t.unsettled_ids, ", "));
  if (!t.failed_ids.empty()) line += fmt::format("; fails: {}", fmt::join(t.failed_ids, ", "));
  if (ablation && !t.targets_supported.empty()) line += fmt::format("; targets of the control still supported: {}", fmt::join(t.targets_supported, ", "));
  return line;
}

std::string placebo_text(const std::vector<Placebo>& placebos, int seeds, const std::string& reference, std::string* line, int* code) {
  std::string text = fmt::format("\nplacebo: each paper claim's own statistic, every condition it reads a run of the null condition on a seed of "
                                 "its own, {} seeds a pool, pools that share no run; the share of pools the 95% rule calls supported must be at "
                                 "most {:g} (with fewer than 20 pools: a sanity check, not a rate):\n", seeds, kPlaceboMaxRate);
  std::vector<std::string> over;
  int tested = 0;
  for (const auto& p : placebos) {
    if (p.splits == 0) {
      text += fmt::format("  {:<34} {}\n", p.id, p.how);
      continue;
    }
    ++tested;
    text += fmt::format("  {:<34} supported {:>2} of {} pools ({:>4.1f}%), contradicted {:>3}, {} runs  {}\n", p.id, p.supported, p.splits,
                        100 * p.rate(), p.contradicted, p.pool, p.how);
    if (!(p.rate() <= kPlaceboMaxRate)) over.push_back(p.id);
  }
  *code = over.empty() && tested > 0 ? 0 : 3;
  *line = over.empty() ? fmt::format("placebo: the rule calls a claim with no effect supported in at most {:g} of pools, for {} of {} paper claims "
                                     "of {} (the others are no contrast)", kPlaceboMaxRate, tested, placebos.size(), reference)
                       : fmt::format("placebo: FAILS: the rule calls a claim with no effect supported in more than {:g} of pools: {}", kPlaceboMaxRate,
                                     fmt::join(over, ", "));
  return text;
}

}  // namespace gf::lab

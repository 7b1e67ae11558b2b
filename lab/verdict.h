#pragma once
// From a lab's claims to its verdict. A paper claim is *supported* when its interval across seeds
// lies strictly on the claimed side of its threshold, *contradicted* when it lies strictly on the
// other side, *unsettled* when it contains the threshold; the intervals that decide are
// Holm-adjusted across the lab's paper claims (a family-wise 95%). An exact check passes or fails on
// its value. The verdict line counts the paper claims in the three outcomes:
//   check: AGREES with Xiong et al. 2020 ...: supports 7, contradicts 0, unsettled 0 of 7 paper claims
//   check: UNSETTLED for ...: supports 5, contradicts 0, unsettled 2 of 7 paper claims; unsettled: a, b
//   check: DISAGREES with ...: supports 5, contradicts 1, unsettled 1 of 7 paper claims; contradicted: c
// and the exit code: 0 every paper claim supported and every check passing; 3 a claim contradicted
// or a check failing; 4 otherwise (something unsettled). Under each paper claim a design line:
// "designed to settle an effect of E with N seeds (pilot sd S, Holm level a); this run has n"; an
// unsettled claim with fewer seeds than N is "unsettled by design".
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/stats.h"

namespace gf::lab {

struct Claim {
  ClaimSpec spec;              // its row, as the lab declared it
  bool holds = false;          // paper: supported; check: passes (decided by decide())
  Interval interval;           // paper: the 95% t interval across seeds, clipped to the statistic's
                               // range; check: mean = lo = hi = the value, n 1, "exact"
  std::vector<double> values;  // paper: the per-seed values; a check over seeds: each seed's
  std::string evidence;        // the numbers behind the verdict
  Outcome outcome = Outcome::Unsettled;  // paper: decided by decide() (check: supported or contradicted)
  Interval decisive;           // paper: the Holm-adjusted interval that decided it
  Interval bootstrap;          // a bounded statistic's percentile bootstrap (n 0 when not computed)
  int seeds_to_settle = -1;    // paper, unsettled: seeds_to_settle() at the level it was held to
  int seeds_needed = 0;        // the design's seeds for min_effect at design_alpha (0: no design stated)
  double design_alpha = 0;
  bool by_design = false;      // unsettled with fewer seeds than seeds_needed
};

// A paper claim from one value of its statistic per seed (needs >= 2); `salt` seeds its bootstrap.
Claim paper_claim(const ClaimSpec& spec, const std::vector<double>& per_seed, const std::string& evidence, const std::string& salt);
// An exact check of one value, or of one per seed, decided on the worst seed.
Claim check_claim(const ClaimSpec& spec, double value, const std::string& evidence);
Claim check_claim(const ClaimSpec& spec, const std::vector<double>& per_seed, const std::string& evidence);

// Decides the paper claims (Holm's step-down across them) and applies their designs.
void decide(std::vector<Claim>& claims);

// The lines printed for a claim.
std::string claim_text(const Claim& c);
nlohmann::json claim_json(const Claim& c);

// The counts behind the verdict line.
struct Tally {
  int papers = 0, supported = 0, contradicted = 0, unsettled = 0, checks = 0, passed = 0, targets = 0, targets_failed = 0;
  std::vector<std::string> contradicted_ids, unsettled_ids, failed_ids, targets_supported;
};
Tally tally(const std::vector<Claim>& claims);
// The verdict line and the exit code (0, 3 or 4). `control`: what a control run removed ("" none);
// `ablation`: whether the run is an ablation (its still-supported targets are named).
std::string verdict_line(const Tally& t, const std::string& reference, const std::string& control, bool ablation, int* code);

// A placebo (--control of a lab with a null condition, lab/runner.h): one paper claim's own
// statistic over `splits` pools of `group` seeds each, every run of the null condition on a seed of
// its own (`pool` runs in all); how many pools the plain 95% rule called supported or contradicted.
struct Placebo {
  std::string id;
  std::string how;  // what stands in each condition the claim reads, or why there is no placebo
  int pool = 0, group = 0, splits = 0, supported = 0, contradicted = 0;
  double rate() const { return splits > 0 ? static_cast<double>(supported) / splits : NAN; }  // the false-positive rate
};
constexpr double kPlaceboMaxRate = 0.05;
// The placebo's lines and its verdict: 0 when every tested claim's rate is at most kPlaceboMaxRate.
std::string placebo_text(const std::vector<Placebo>& placebos, int seeds, const std::string& reference, std::string* line, int* code);

}  // namespace gf::lab

#pragma once
// The claims every lab tests, in one table (lab/claims.cpp), each written down before the run that
// tests it: what is claimed, on which side of which threshold the lab's statistic must lie, and
// where that number comes from (the paper's figure, table or equation, or the reasoning behind it).
// A lab reports each of its rows once per run through Report::paper or Report::check
// (lab/report.h); `gradflow lab NAME --claims` prints its rows.
//
// Two kinds:
//  - Paper: what the cited paper (or the course) claims, turned into a statistic measured once per
//    seed. Three outcomes (lab/report.h): supported when its interval across seeds lies strictly on
//    the claimed side of the threshold, contradicted when it lies strictly on the other side,
//    unsettled when it contains the threshold; the intervals are Holm-adjusted across the lab's
//    paper claims. The lab's --control must keep each row marked control_targets from being
//    supported.
//  - Check: an exact property of the code or the maths (a Jacobian entry that is exactly 0, a
//    softmax row of zeros): one value, compared with the threshold. It is not evidence for a paper,
//    and the verdict line counts it apart.
#include <limits>
#include <string>
#include <vector>

#include "lab/stats.h"

namespace gf::lab {

enum class ClaimKind { Paper, Check };

struct ClaimSpec {
  std::string lab;        // "norm"
  std::string id;         // "postln_grows": stable key, used in the JSON and the tests
  ClaimKind kind = ClaimKind::Paper;
  std::string statement;  // what the paper says, as tested here (the statistic and its threshold)
  Compare side = Compare::Above;
  double threshold = std::numeric_limits<double>::quiet_NaN();  // written down before the run
  std::string source;     // the paper's figure/table/equation, or the reasoning behind the number
  bool control_targets = false;  // the lab's --control must keep this (paper) claim from being supported
  // The statistic's range, for a bounded one (a share in [0, 1], a correlation in [-1, 1]): its
  // intervals are clipped to it, and a percentile bootstrap is reported beside the t interval.
  double range_lo = -std::numeric_limits<double>::infinity();
  double range_hi = std::numeric_limits<double>::infinity();
  bool bounded() const { return range_lo > -std::numeric_limits<double>::infinity() || range_hi < std::numeric_limits<double>::infinity(); }
  // The design (issue 35, item 2; a paper claim's row of effects() in lab/claims.cpp, merged in by
  // claim_specs()): the smallest departure from the threshold, on the claimed side and in the
  // statistic's units, that the claim cares about, with the reason for that size (from the paper or
  // the reasoning, not from a run's outcome); and the seed-to-seed sd that the lab's pilot (a recorded
  // run at its defaults, pilot_n seeds) measured. From the two the report works out how many seeds
  // would settle an effect of min_effect (lab/report.h, seeds_needed). NaN: not stated.
  double min_effect = std::numeric_limits<double>::quiet_NaN();
  std::string min_effect_reason = "";
  double pilot_sd = std::numeric_limits<double>::quiet_NaN();
  int pilot_n = 0;
  bool designed() const { return min_effect > 0 && pilot_sd >= 0; }  // false for NaN
};

// Every lab's rows, in registry order (lab/claims.cpp).
const std::vector<ClaimSpec>& claim_specs();
// One lab's rows, in the table's order (empty when the lab has none).
std::vector<ClaimSpec> claim_specs_of(const std::string& lab);
// The row (lab, id); throws std::logic_error naming the lab's known ids when there is none.
const ClaimSpec& find_claim(const std::string& lab, const std::string& id);

const char* kind_name(ClaimKind k);  // "paper", "check"
// Whether `value` lies strictly on the spec's side of its threshold (false for NaN).
inline bool on_claimed_side(const ClaimSpec& spec, double value) { return on_side(spec.side, spec.threshold, value); }

}  // namespace gf::lab

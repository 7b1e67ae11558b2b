// The claims table: every lab's rows, each lab's in its own block opened by `// ---- NAME`, labs in
// registry order (lab/registry.cpp). A row's threshold is written down before the run that tests
// it; a threshold changed after seeing a run gets a row in docs/labs.md's change log (date, lab,
// claim, old -> new, why). Paper rows say what the paper claims and where; check rows are exact
// properties of the code or the maths (lab/claims.h).
#include "lab/claims.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "lab/lab.h"
#include "tensor/check.h"

namespace gf::lab {
namespace {

using enum ClaimKind;
using enum Compare;

std::vector<ClaimSpec> table() {
  return {
  };
}

// The design of each paper claim (issue 35, item 2; lab/claims.h): its smallest effect, the reason for
// that size, and the seed-to-seed sd the lab's pilot measured (the per-seed values of the output
// recorded on the lab's page, docs/labs/NAME.md: pilot_n seeds, the lab's other settings at their
// defaults). A block of its
// own, keyed by (lab, id), so that a claim's row and its design can be read apart. The sizes follow
// one rule unless the reason says otherwise: half the threshold's distance from no effect (for a
// threshold midway between two laws, half the way to the law the claim expects), so that the claim
// cares about a true value one and a half times as far from no effect as its threshold. A claim whose
// threshold is no effect itself (a sign) states its size from the statistic's scale.
struct Effect {
  const char* lab;
  const char* id;
  double min_effect, pilot_sd;
  int pilot_n;
  const char* reason;
};

std::vector<Effect> effects() {
  return {
  };
}

// Each design into its row: a design naming no paper row, or a row twice, is a bug of the table; a
// paper row without one runs with its design unstated (a unit test requires one for every row).
void merge_effects(std::vector<ClaimSpec>& rows) {
  std::set<std::pair<std::string, std::string>> merged;
  for (const Effect& e : effects()) {
    auto row = std::find_if(rows.begin(), rows.end(), [&](const ClaimSpec& c) { return c.lab == e.lab && c.id == e.id; });
    GF_CHECK_AS(std::logic_error, row != rows.end(), "claims table: the design of {}/{} names no claim", e.lab, e.id);
    GF_CHECK_AS(std::logic_error, row->kind == ClaimKind::Paper, "claims table: {}/{} is a check; only paper claims have a design", e.lab, e.id);
    GF_CHECK_AS(std::logic_error, merged.insert({e.lab, e.id}).second, "claims table: {}/{} has two designs", e.lab, e.id);
    GF_CHECK_AS(std::logic_error, e.min_effect > 0 && std::isfinite(e.min_effect) && e.pilot_sd >= 0 && std::isfinite(e.pilot_sd) && e.pilot_n >= 2,
                "claims table: the design of {}/{} needs min_effect > 0, a finite pilot_sd >= 0 and pilot_n >= 2", e.lab, e.id);
    GF_CHECK_AS(std::logic_error, *e.reason != '\0', "claims table: the design of {}/{} needs the reason for its smallest effect", e.lab, e.id);
    row->min_effect = e.min_effect, row->pilot_sd = e.pilot_sd, row->pilot_n = e.pilot_n, row->min_effect_reason = e.reason;
  }
}

// The table's own rules, checked once: ids unique within a lab, thresholds finite, every row with
// a statement and a source, control_targets only on paper rows.
std::vector<ClaimSpec> checked(std::vector<ClaimSpec> rows) {
  std::set<std::pair<std::string, std::string>> seen;
  merge_effects(rows);
  for (const auto& c : rows) {
    GF_CHECK_AS(std::logic_error, !c.lab.empty() && !c.id.empty(), "claims table: a row without a lab or an id");
    GF_CHECK_AS(std::logic_error, seen.insert({c.lab, c.id}).second, "claims table: lab {} has claim id '{}' twice", c.lab, c.id);
    GF_CHECK_AS(std::logic_error, std::isfinite(c.threshold), "claims table: {}/{} has a non-finite threshold", c.lab, c.id);
    GF_CHECK_AS(std::logic_error, !c.statement.empty() && !c.source.empty(), "claims table: {}/{} needs a statement and a source", c.lab, c.id);
    GF_CHECK_AS(std::logic_error, c.kind == ClaimKind::Paper || !c.control_targets,
                "claims table: {}/{} is an exact check; only paper claims are a control's targets", c.lab, c.id);
  }
  return rows;
}

}  // namespace

const std::vector<ClaimSpec>& claim_specs() {
  // The table's rows, and the claims each lab declared with lab/experiment.h, in registry order.
  static const std::vector<ClaimSpec> all = [] {
    const std::vector<ClaimSpec> rows = checked(table());
    std::vector<ClaimSpec> out;
    for (const Lab& l : labs()) {
      if (!l.claims.empty()) out.insert(out.end(), l.claims.begin(), l.claims.end());
      for (const ClaimSpec& c : rows)
        if (c.lab == l.name) out.push_back(c);
    }
    return out;
  }();
  return all;
}

std::vector<ClaimSpec> claim_specs_of(const std::string& lab) {
  std::vector<ClaimSpec> out;
  for (const auto& c : claim_specs())
    if (c.lab == lab) out.push_back(c);
  return out;
}

const ClaimSpec& find_claim(const std::string& lab, const std::string& id) {
  std::vector<std::string> known;
  for (const auto& c : claim_specs()) {
    if (c.lab != lab) continue;
    if (c.id == id) return c;
    known.push_back(c.id);
  }
  GF_FAIL_AS(std::logic_error, "lab {}: no claim '{}' in lab/claims.cpp (its claims: {})", lab, id,
             known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", ")));
}

const char* kind_name(ClaimKind k) { return k == ClaimKind::Paper ? "paper" : "check"; }

}  // namespace gf::lab

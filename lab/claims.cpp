// The claims table: every lab's rows, each lab's in its own block opened by `// ---- NAME`, labs in
// registry order (lab/registry.cpp). A row's threshold is written down before the run that tests
// it; a threshold changed after seeing a run gets a row in docs/labs.md's change log (date, lab,
// claim, old -> new, why). Paper rows say what the paper claims and where; check rows are exact
// properties of the code or the maths (lab/claims.h).
#include "lab/claims.h"

#include <fmt/format.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::lab {
namespace {

using enum ClaimKind;
using enum Compare;

std::vector<ClaimSpec> table() {
  return {
      // ---- norm
      // ---- leak
      // ---- padding
      // ---- nan
      // ---- scale
      // ---- depth
      // ---- entropy
      // ---- attribution
      // ---- exposure
      // ---- graph
      // ---- kvcache
      // ---- gqa
      // ---- smoothing
      // ---- crossattn
  };
}

// The table's own rules, checked once: ids unique within a lab, thresholds finite, every row with
// a statement and a source, control_targets only on paper rows.
std::vector<ClaimSpec> checked(std::vector<ClaimSpec> rows) {
  std::set<std::pair<std::string, std::string>> seen;
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
  static const std::vector<ClaimSpec> all = checked(table());
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
const char* side_name(Compare s) { return s == Compare::Above ? "above" : "below"; }
const char* side_symbol(Compare s) { return s == Compare::Above ? ">" : "<"; }

bool on_claimed_side(const ClaimSpec& spec, double value) {
  return spec.side == Compare::Above ? value > spec.threshold : value < spec.threshold;
}

}  // namespace gf::lab

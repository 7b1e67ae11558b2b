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
      // ---- attribution
      {"attribution", "attention_agrees", ClaimKind::Paper,
       "the last decoder layer's cross-attention (head mean) ranks the source tokens somewhat as the attribution methods do: its mean Spearman rho with "
       "gradient x input, leave-one-out and integrated gradients, per output token, averaged over sentences",
       Compare::Above, 0.2,
       "Jain and Wallace 2019, section 4.1 (attention correlates with importance measures, weakly); a map unrelated to the input scores 0 (s.e. about "
       "0.015 over 60 sentences), so 0.2 is a clear positive agreement; a constant map (ranks nothing) scores 0",
       true, -1.0, 1.0},
      {"attribution", "methods_agree_gxi", ClaimKind::Paper,
       "gradient x input agrees with the other attribution methods (leave-one-out, integrated gradients; mean Spearman rho) more than with attention: "
       "the difference",
       Compare::Above, 0.0,
       "Jain and Wallace 2019, section 4.1 (gradient and leave-one-out measures agree with each other more than with attention); the paper claims a "
       "direction, the interval across seeds is the margin",
       false, -2.0, 2.0},
      {"attribution", "methods_agree_loo", ClaimKind::Paper,
       "leave-one-out agrees with the other attribution methods (gradient x input, integrated gradients) more than with attention: the difference",
       Compare::Above, 0.0, "as methods_agree_gxi", false, -2.0, 2.0},
      {"attribution", "methods_agree_ig", ClaimKind::Paper,
       "integrated gradients agree with the other attribution methods (gradient x input, leave-one-out) more than with attention: the difference",
       Compare::Above, 0.0, "as methods_agree_gxi", false, -2.0, 2.0},
      {"attribution", "permuted_changes_output", ClaimKind::Paper,
       "a translator's output depends on its specific attention: with every cross-attention row permuted over the source, the next-token distribution "
       "moves by this total variation distance (mean over output tokens, median over permutations, mean over sentences)",
       Compare::Above, 0.25,
       "Jain and Wallace 2019, section 4.2 (the permutation counterfactual; they found little change for classifiers and left sequence-to-sequence "
       "models out); Wiegreffe and Pinter 2019 (attention matters where the task needs it). 0.25: a quarter of the probability mass moves",
       true, 0.0, 1.0},
      {"attribution", "uniform_changes_output", ClaimKind::Paper,
       "with every cross-attention row made uniform over the source, the next-token distribution moves by this total variation distance (mean over "
       "output tokens and sentences)",
       Compare::Above, 0.25, "Wiegreffe and Pinter 2019, section 3.1 (the uniform-attention baseline); the same 0.25 as permuted_changes_output", true, 0.0, 1.0},
      {"attribution", "ig_complete", ClaimKind::Check,
       "integrated gradients add up (completeness): |sum over source tokens of IG - (log p(y_t | x) - log p(y_t | 0))|, relative to the mean "
       "|log p(y_t | x) - log p(y_t | 0)|, over every output token of the first model",
       Compare::Below, 0.05,
       "Sundararajan et al. 2017, axiom of completeness; exact in the limit of the path integral, here 32 midpoint steps", false},
      // ---- exposure
      {"exposure", "gap_grows", ClaimKind::Paper,
       "free-running accuracy falls behind teacher-forced accuracy later in the sequence: the gap pooled over the later half of the positions minus that "
       "over the earlier half, teacher-forced model trained to convergence",
       Compare::Above, 0.05,
       "Bengio et al. 2015, section 1 (errors accumulate along the sequence); 0.05 is the threshold the lab used before intervals, kept", false},
      {"exposure", "derails", ClaimKind::Paper,
       "a wrong token fed back is amplified: error rate in the 3 steps after a forced wrong token minus that of decoding from the true prefix, "
       "teacher-forced model",
       Compare::Above, 0.05,
       "Bengio et al. 2015, section 1 (a mistake fed back puts the model where training never showed it); 0.05 is the absolute margin the lab used "
       "before intervals, kept",
       true},
      {"exposure", "ss_gap_trend", ClaimKind::Paper,
       "scheduled sampling narrows the late-position gap, the more the faster its schedule: the least-squares slope of the late-half gap (as in "
       "gap_grows' later half) on the schedule's speed 100/k over --ss-rates (by default 0 = teacher forcing, 0.25, 0.5, 1 = k 400, 200, 100), "
       "every model trained by the same convergence rule on the seed's data, is below -0.01",
       Compare::Below, -0.01,
       "Bengio et al. 2015, sections 2-4 (scheduled sampling closes the gap between training and inference; the decay's speed sets how many "
       "of its own tokens the model is fed). The paper gives no size: -0.01 (the gap one accuracy point narrower at k 100 than under teacher "
       "forcing, along the fitted line) is the smallest narrowing this lab cares about, so a placebo's zero trend cannot pass. Written before "
       "the first run of the trend, knowing the two-arm version's numbers at k 200 (the gap +0.010 to -0.013 narrower)",
       true},
      {"exposure", "ss_derailment_trend", ClaimKind::Paper,
       "scheduled sampling makes the model less derailed by a wrong token, the more the faster its schedule: the least-squares slope of the "
       "derailment (as in derails) on 100/k over --ss-rates is below -0.02",
       Compare::Below, -0.02,
       "Bengio et al. 2015, section 2 (the model learns to deal with its own mistakes). No size in the paper: -0.02 (two points less "
       "derailment, of about 0.6, at k 100 than under teacher forcing, along the fitted line) is the smallest fall this lab cares about. "
       "Written before the first run of the trend, knowing the two-arm version's numbers at k 200 (0.034 to 0.070 less)",
       true},
      // ---- crossattn
      {"crossattn", "encoder_gradient_share", Paper,
       "the encoder's layers get gradient of the same order as the decoder's, all of it through cross-attention: the mean encoder "
       "layer's gradient norm over the mean decoder layer's, averaged over training",
       Above, 0.1,
       "Vaswani et al. 2017, Section 3.2.3: every decoder layer's cross-attention reads the encoder's output, so the loss's gradient "
       "reaches the encoder through all of them and the two stacks train as one network; 0.1 is an order of magnitude below parity",
       true},
      {"crossattn", "encoder_learns", Paper,
       "what the encoder learns carries the translation: the trained model's held-out teacher-forced token accuracy minus that of the "
       "same model with its encoder and source embedding put back to their initial weights",
       Above, 0.2,
       "the decoder is trained on the representations the encoder learns; put back to its start, the encoder gives the decoder "
       "representations it never saw. 0.2: a fifth of all tokens",
       true, -1.0, 1.0},
      {"crossattn", "translates", Paper,
       "the trained model translates held-out sentences: its free-running greedy token accuracy",
       Above, 0.5,
       "a model that ignores the source guesses a symbol about 1 time in 10 (the default alphabet); 0.5 is far above that and below a model that has learnt the task",
       false, 0.0, 1.0},
      {"crossattn", "memory_paths_sum", Check,
       "d loss / d memory is the sum of what each decoder layer's cross-attention sends back (each layer reading its own copy of the "
       "memory): the relative difference, float64, at initialisation",
       Below, 1e-10,
       "the memory feeds the decoder only through cross-attention: the chain rule sums those paths exactly, up to float64 rounding",
       false},
      {"crossattn", "detached_encoder_zero", Check,
       "with the memory detached (encoder_gradient = false) no encoder parameter gets any gradient: the largest one's norm, float64",
       Below, 1e-300,
       "detach() cuts the only path from the loss to the encoder, so backward never reaches it (its gradients stay undefined, read as 0)",
       false},
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
      // ---- attribution (pilot: docs/labs/attribution.md's output, 3 seeds)
      {"attribution", "attention_agrees", 0.1, 0.0186, 3, "half the threshold's distance from no agreement (rho 0)"},
      {"attribution", "methods_agree_gxi", 0.05, 0.0224, 3,
       "0.05 of Spearman's rho, a fortieth of its range: the threshold is the sign (0), and a smaller difference in agreement ranks no "
       "method above another for a reader"},
      {"attribution", "methods_agree_loo", 0.05, 0.021, 3, "as methods_agree_gxi"},
      {"attribution", "methods_agree_ig", 0.05, 0.00955, 3, "as methods_agree_gxi"},
      {"attribution", "permuted_changes_output", 0.125, 0.0103, 3, "half the threshold's distance from no change (0)"},
      {"attribution", "uniform_changes_output", 0.125, 0.016, 3, "half the threshold's distance from no change (0)"},
      // ---- exposure (pilot: docs/labs/exposure.md's output at the dose-response defaults, 3 seeds)
      {"exposure", "gap_grows", 0.025, 0.0161, 3, "half the threshold's distance from no growth (0)"},
      {"exposure", "derails", 0.025, 0.0497, 3, "half the threshold's distance from no amplification (0)"},
      {"exposure", "ss_gap_trend", 0.005, 0.0201, 3, "half the threshold's distance from no trend (0)"},
      {"exposure", "ss_derailment_trend", 0.01, 0.0108, 3, "half the threshold's distance from no trend (0)"},
      // ---- crossattn (pilot: docs/labs/crossattn.md's output, 5 seeds)
      {"crossattn", "encoder_gradient_share", 0.05, 0.0352, 5, "half the threshold's distance from no gradient (0)"},
      {"crossattn", "encoder_learns", 0.1, 0.0476, 5, "half the threshold's distance from no difference (0)"},
      {"crossattn", "translates", 0.2, 0.0239, 5, "half the threshold's distance from chance (about 0.1): a token accuracy of 0.7"},
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

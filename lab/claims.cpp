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
      {"norm", "postln_grows", Paper,
       "Post-LN: the gradient of linear2.weight grows toward the output: in the decoder (the stack whose last layer feeds the loss) the last "
       "layer's is above 1.5x the first's",
       Above, 1.5,
       "Xiong et al. 2020, Theorem 1 and Figure 3 (Post-LN: the gradients near the output are large); 1.5: the lab's threshold since its first "
       "version (the paper shows growth, not a factor)",
       true},
      {"norm", "preln_not_growing", Paper,
       "Pre-LN: the gradient does not grow toward the output: the last layer's over the first's, the larger of the two stacks, is below 1",
       Below, 1.0,
       "Xiong et al. 2020, Theorem 1 (Pre-LN: the same bound for every layer) and Figure 3; 1: no growth. Replaces 1.2, chosen after the first "
       "version ('flat within 1.5x') failed; a falling profile passes, and docs/labs/norm.md shows it falls, which the paper does not predict",
       false},
      {"norm", "preln_falls_with_depth", Paper,
       "Pre-LN: the last layer's gradient falls with depth as 1/sqrt(L): the decoder's log-log slope on L is below -0.25", Below, -0.25,
       "Xiong et al. 2020, Theorem 1: O(d sqrt(ln d / L)) for Pre-LN (slope -0.5), O(d sqrt(ln d)) for Post-LN (slope 0); -0.25 is midway",
       false},
      {"norm", "postln_flat_with_depth", Paper,
       "Post-LN: the last layer's gradient does not fall with depth: the decoder's log-log slope on L is above -0.25", Above, -0.25,
       "Xiong et al. 2020, Theorem 1 (Post-LN: independent of L, slope 0; Pre-LN -0.5); -0.25 is midway", true},
      {"norm", "postln_needs_warmup", Paper,
       "Post-LN needs the warm-up: without it the held-out NLL ends more than 0.2 nats above the same seed's run with it", Above, 0.2,
       "Xiong et al. 2020, section 3.1 and Figure 2 (Post-LN without warm-up trains much worse); 0.2 nats: the lab's threshold since its first "
       "version",
       true},
      {"norm", "preln_needs_less", Paper,
       "Pre-LN needs the warm-up less: Post-LN's gain from it (NLL without minus with) exceeds Pre-LN's, seed by seed", Above, 0.0,
       "Xiong et al. 2020, section 3.2 and Figure 2 (Pre-LN trains well without warm-up); 0: the sign of the paired difference", true},
      {"norm", "deepnorm_trains", Paper,
       "the intervention: DeepNorm lets Post-LN train without warm-up: its held-out NLL ends more than 0.2 nats below plain Post-LN's, both "
       "without warm-up, seed by seed",
       Above, 0.2,
       "Wang et al. 2022, arXiv:2203.00555, sections 2-3 (DeepNorm bounds the model update and stabilises Post-LN early in training); issue "
       "27; 0.2 nats: the margin this lab asks of the warm-up itself",
       true},
      // ---- leak
      {"leak", "masked_future_zero", Check,
       "with the causal mask d logit_t / d input_t' is exactly 0 for every t' > t and non-zero for t' <= t (count of entries, over every seed "
       "and sequence, that break this)",
       Below, 0.5, "the mask sets the scores of later keys to -inf: their weight, and every path from a later input, is exactly 0", false},
      {"leak", "open_future_nonzero", Check,
       "without the mask every entry above the diagonal is non-zero (count of exact zeros, every seed)", Below, 0.5,
       "softmax weights are always > 0, so every later input reaches every logit: a property of softmax, not evidence", false},
      {"leak", "reads_answer", Paper,
       "without the mask the decoder reads the answer: the share of rows t whose largest dependence apart from their own input is on input "
       "t+1 (which holds logit_t's label) is above 0.5",
       Above, 0.5,
       "the course (without the mask the decoder copies the answer from the next position); 0.5: 'most rows' (by chance a row peaks at t+1 "
       "about 1/(T-1) of the time)",
       true},
      {"leak", "tf_lower", Paper,
       "without the mask the teacher-forced held-out NLL is lower: NLL with the mask minus NLL without it is above 0", Above, 0.0,
       "the course (the leak makes teacher forcing easy); 0: the sign of the paired difference", true},
      {"leak", "fr_collapses", Paper,
       "without the mask free-running greedy accuracy is far lower: its token accuracy over the masked model's is below 0.5", Below, 0.5,
       "the course (at inference the later tokens do not exist yet, so what the model learnt is of no use); 0.5: 'at most half', the lab's "
       "threshold since its first version",
       true},
      // ---- padding
      {"padding", "masked_alone_equals_batch", Check,
       "with the padding masks a sentence computes the same alone and in a batch: the largest relative difference (encoder out, logits, "
       "attention, gradients; float64) and the largest weight on a PAD key, worst seed, are below 1e-12",
       Below, 1e-12,
       "the masks give PAD keys weight exactly 0; what is left is float64 rounding (about 1e-16) of sums in another order, 1e-12 a margin of 1e4",
       false},
      {"padding", "unmasked_pad_changes_output", Paper,
       "without the padding masks a sentence computes something else in a batch: log10 of the smallest of the four relative differences is "
       "above -3",
       Above, -3.0,
       "the course (PAD must not change what a sentence computes; the masks are what prevents it); -3: a difference of 1e-3, far above float64's "
       "rounding and float32's (1e-7), the lab's threshold since its first version",
       true},
      {"padding", "target_mask_redundant", Check,
       "the target padding mask alone changes nothing for the sentence's own positions: the largest relative difference with it off, worst "
       "seed, is below 1e-12",
       Below, 1e-12, "the causal mask already hides the PAD after a sentence from each of its real positions", false},
      {"padding", "masked_pad_gradient_zero", Check,
       "with the masks the gradient reaching PAD positions of the encoder and decoder input is exactly 0 (count of seeds and sides where not)",
       Below, 0.5, "a masked key gets weight exactly 0, so no path from a PAD input reaches the loss", false},
      {"padding", "unmasked_pad_gets_gradient", Paper,
       "without the padding masks PAD source positions get gradient as words do: the largest |gradient| at a source PAD over the largest at a "
       "real source position is above 0.01",
       Above, 0.01,
       "reasoning: unmasked, a PAD key is attended like any word, so its gradient is of a word's order; 0.01 of it is far from the exact 0 of "
       "the masked model and far below parity",
       true},
      {"padding", "ignore_index_exact", Check,
       "with ignore_index = PAD the loss and gradient equal those of the real labels alone (count of batches where they differ at all)", Below,
       0.5, "cross_entropy leaves ignored labels out of the sum and the count", false},
      {"padding", "bucketing_cuts_pad_loss", Paper,
       "length-bucketed batches cut the PAD labels' share of the loss (ignore_index off) at least 2x against random batches: bucketed over "
       "random share, the larger of the untrained and the trained model, is below 0.5",
       Below, 0.5, "the course (bucketing by length is how trainers avoid padding); 2x: the lab's threshold since its first version", false},
      {"padding", "bucketing_lowers_pad_gradient", Paper,
       "... and lower PAD labels' share of the gradient: the same ratio for the gradient is below 1", Below, 1.0,
       "the course; 1 ('lower' at all) was chosen after a run in which the loss's 2x did not carry over to a trained model's gradient "
       "(92% -> 66%), as docs/labs/padding.md says",
       false},
      // ---- nan
      {"nan", "naive_nan_spreads", Paper,
       "a naive softmax turns one fully masked row into NaN through the whole model: the share of parameter entries whose gradient is NaN is "
       "above 0.5",
       Above, 0.5,
       "the course (NaN from a fully masked row reaches every weight); 0.5: most of the model. It can fail: backward need not carry a NaN "
       "everywhere (a ReLU passes nothing where its input is NaN: linear1.bias stays finite)",
       true},
      {"nan", "naive_nan_every_matrix", Check,
       "with the naive softmax the loss is NaN, one batch row of logits is NaN, and every weight matrix's gradient has NaN (count of seeds "
       "where not)",
       Below, 0.5, "exp(-inf - (-inf)) is NaN, and NaN times anything is NaN along every path from that row", false},
      {"nan", "anomaly_names_first_op", Check,
       "anomaly mode stops at the first op that made a NaN: in the forward pass, in the first encoder layer, at the empty source's row (count "
       "of seeds where not)",
       Below, 0.5, "AnomalyGuard checks each op's output as it is made", false},
      {"nan", "guarded_zero_row", Check,
       "gradflow's guarded softmax gives that row zero weights and everything finite, the other rows summing to 1 within 1e-5 (count of seeds "
       "where not)",
       Below, 0.5, "gradflow's softmax defines a row of -inf scores as zeros", false},
      {"nan", "lr_cannot_help", Check,
       "a lower learning rate cannot help: at lr, lr/10 and lr/100 the loss is NaN from the step with the empty source on (count of runs "
       "where not)",
       Below, 0.5,
       "the NaN is made in that step's forward pass, before any update the learning rate scales: a property of the protocol, not evidence",
       false},
      {"nan", "masks_fix", Check,
       "checking the masks does: dropping the fully masked row, or the guarded softmax, keeps every loss and parameter finite at every "
       "learning rate (count of runs where not)",
       Below, 0.5, "both remove the row of -inf scores before the softmax", false},
      // ---- scale
      {"scale", "var_identity", Check,
       "q, k ~ N(0, 1): Var(q . k) = d_k: |log-log slope of the measured variance on d_k - 1| is below 0.1", Below, 0.1,
       "an identity (a sum of d_k independent products of variance 1); only sampling noise is measured", false},
      {"scale", "scaled_identity", Check,
       "q, k ~ N(0, 1), scaled by 1/sqrt(d_k): variance, largest probability, Jacobian and gradient change by less than 25% over d_k (largest "
       "max/min)",
       Below, 1.25, "the same identity: the scaled scores are N(0, 1) at every d_k", false},
      {"scale", "real_var_grows", Paper,
       "q and k from an initialised projection of real sentences: unscaled, Var(q . k) grows with d_k: its log-log slope on d_k is above 0.5",
       Above, 0.5,
       "Vaswani et al. 2017, section 3.2.1 and footnote 4 (variance d_k for unit-variance components); 0.5: midway between no growth and d_k",
       true},
      {"scale", "real_unscaled_gradient_vanishes", Paper,
       "... and the gradient through the softmax vanishes: log10 of the median |d scores| / |d p| at d_k 512 over that at d_k 16 is below -1",
       Below, -1.0,
       "Vaswani et al. 2017, section 3.2.1 ('pushing the softmax function into regions where it has extremely small gradients'); -1: a "
       "tenth, the factor of the lab's first version",
       true},
      {"scale", "real_scaled_gradient_stays", Paper,
       "scaled by 1/sqrt(d_k) the gradient through the softmax stays: the same log10 ratio is above log10(0.5)", Above, -0.30103,
       "Vaswani et al. 2017, section 3.2.1 (the scaling counteracts the effect); 0.5: within a factor 2", false},
      {"scale", "unscaled_trains_worse", Paper,
       "the intervention: trained without 1/sqrt(d_k) (d_k 128) the same model, data and batches end worse: held-out NLL unscaled minus "
       "scaled is above 0",
       Above, 0.0,
       "Vaswani et al. 2017, section 3.2.1 (the unscaled softmax's small gradients hinder learning); issue 27; 0: the sign of the paired "
       "difference",
       true},
      // ---- depth
      {"depth", "postln_amplifies_more", Paper,
       "(a) Post-LN amplifies a weight change more with depth than Pre-LN: the log-log slope of the squared output change on N, Post-LN "
       "minus Pre-LN, is above 0",
       Above, 0.0, "Liu et al. 2020 (Admin), Theorem 2: Var of the output change O(N) for Post-LN, O(log N) for Pre-LN; 0: the sign", true},
      {"depth", "preln_nearer_log", Paper,
       "(a) Pre-LN's squared output change grows only as O(log N): its log-log slope on N is nearer the log law's (sum of 1/i over the "
       "same depths) than the linear law's (1): slope minus their midpoint is below 0",
       Below, 0.0, "Liu et al. 2020 (Admin), Theorem 2; the midpoint between the two laws is the decision boundary (the lab's first version's)",
       false},
      {"depth", "collapse_without_skips", Paper,
       "(b) pure attention without skip connections collapses the tokens to rank 1: log10 of res after the last layer over the input's is "
       "below -2",
       Below, -2.0,
       "Dong et al. 2021, Theorem 2.2 (convergence to rank 1, doubly exponential in depth); -2: below 1% of the input's, the lab's threshold "
       "since its first version",
       true},
      {"depth", "skips_prevent_collapse", Paper,
       "(b) with skip connections the tokens do not collapse: res after the last layer over the input's is above 0.3", Above, 0.3,
       "Dong et al. 2021, section 3 (skip connections prevent the collapse); 0.3: the lab's threshold since its first version", false},
      {"depth", "qk_gradients_vanish", Paper,
       "(c) as the tokens collapse the query/key gradients vanish against the value gradients: at the deepest layer whose input's res is "
       "above 1e-6, log10 of QK/V without skips over QK/V with skips is below -1",
       Below, -1.0,
       "Noci et al. 2022, section 3 (Theorem 3.2: the gradients of the queries' and keys' weights vanish with the tokens' spread). Read "
       "above res 1e-6 so that no number is at float64's rounding floor; -1: a tenth, the lab's earlier factor",
       true},
      // ---- entropy
      // ---- attribution
      // ---- exposure
      // ---- graph
      {"graph", "self_maps_quadratic", Paper,
       "standard attention saves its T x T maps for backward: the self-attention weights and masks saved grow quadratically with the target "
       "length (log-log slope per doubling of T above 1.5)",
       Above, 1.5,
       "Dao et al. 2022, section 2.2 (standard attention materialises the N x N matrices, O(N^2) memory); 1.5: midway between linear and "
       "quadratic",
       true},
      {"graph", "fused_linear", Paper,
       "the fused attention op saves only a row statistic: its self-attention saves grow linearly (slope per doubling of T below 1.5)", Below,
       1.5, "Dao et al. 2022, section 3 (FlashAttention keeps O(N) extra memory: the softmax's log-sum-exp per row); 1.5: the same midpoint",
       false},
      {"graph", "others_linear", Check,
       "everything else the graph saves grows at most linearly (the steepest single saved tensor outside the self-attention maps: log-log "
       "slope below 1.1)",
       Below, 1.1, "every other op's saved tensor is (B, T, width) or (B, T, S) with S fixed: linear in T", false},
      {"graph", "backward_reaches_all", Check,
       "backward reaches every parameter tensor of the layer (count of parameters without an accumulator or a finite, non-zero gradient)",
       Below, 0.5, "every parameter is used in the forward pass, so the engine must reach it", false},
      {"graph", "backward_frees", Check,
       "backward frees what the graph saved (Node::release): only the gradients and the output remain, unless retain_graph (count of "
       "violations)",
       Below, 0.5, "the engine releases each node's saved tensors once its gradient has been sent back", false},
      {"graph", "key_bias_no_gradient", Check,
       "the key third of in_proj_bias gets no gradient beyond float32 rounding: |grad b_k| / |grad b_q| below 1e-4", Below, 1e-4,
       "softmax's shift invariance (q . b_k is the same for every key of a row); Namazifar et al. 2023", false},
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

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
       true, 0.0, 1.0},
      {"leak", "tf_lower", Paper,
       "without the mask the teacher-forced held-out NLL is lower: NLL with the mask minus NLL without it is above 0.02 nats", Above, 0.02,
       "the course (the leak makes teacher forcing easy); 0.02 nats: the smallest effect the lab cares about. It was 0, the sign of the "
       "paired difference, until the placebo (issue 35) showed that a claim at the null's own value is called supported in 2.5-5% of "
       "placebo splits by chance alone (change log)",
       true},
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
      {"padding", "pad_change_trend", Paper,
       "without the padding masks, the more PAD a sentence is padded with, the more it computes something else: the least-squares slope of "
       "log10 of its logits' relative difference (padded against alone) on log2 of the padded source length (per doubling, over --lengths, "
       "by default 8, 16, 32, 64) is above 0.03",
       Above, 0.03,
       "the course (PAD must not change what a sentence computes); written before the first run of the trend: unmasked, a real query spreads "
       "its attention over n real and L - n PAD keys, so the PAD keys' share, about (L - n) / L, sets how far the output moves. For a source "
       "of about 4 tokens that share grows from 0.5 at L 8 to 0.94 at L 64, log10 0.27 over three doublings (0.09 per doubling); 0.03 is a "
       "third of it, the smallest growth the lab cares about",
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
      {"nan", "naive_nan_spreads", Check,
       "a naive softmax turns one fully masked row into NaN through the whole model: the share of parameter entries whose gradient is NaN is "
       "above 0.5",
       Above, 0.5,
       "the course (NaN from a fully masked row reaches every weight); 0.5: most of the model. It can fail: backward need not carry a NaN "
       "everywhere (a ReLU passes nothing where its input is NaN: linear1.bias stays finite). A check, not evidence: the share is the same on every seed (0.656), fixed by which parameters the NaN reaches, not by chance (issue 35)",
       false},
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
      {"scale", "real_var_grows", Check,
       "q and k from an initialised projection of real sentences: unscaled, Var(q . k) grows with d_k: its log-log slope on d_k is above 0.5",
       Above, 0.5,
       "Vaswani et al. 2017, section 3.2.1 and footnote 4 (variance d_k for unit-variance components); 0.5: midway between no growth and d_k. A check, not evidence: the growth follows from random projections of the inputs (every seed must show it; issue 35)",
       false},
      {"scale", "unscaled_gradient_trend", Paper,
       "... and the gradient through the softmax vanishes as d_k grows: the least-squares slope of log10 of the median |d scores| / |d p| "
       "on log2(d_k) (per doubling of d_k, over --dks, by default 16 to 512), unscaled, is below -0.2",
       Below, -0.2,
       "Vaswani et al. 2017, section 3.2.1 ('pushing the softmax function into regions where it has extremely small gradients'); -0.2 per "
       "doubling: a tenth over the five doublings from 16 to 512, the factor of the lab's first version, which compared the two ends "
       "(issue 35: the claim is the trend over every level)",
       true},
      {"scale", "scaled_gradient_trend", Paper,
       "scaled by 1/sqrt(d_k) the gradient through the softmax stays: the same slope per doubling, scaled, is above log10(0.5) / 5 = -0.0602",
       Above, -0.0602,
       "Vaswani et al. 2017, section 3.2.1 (the scaling counteracts the effect); log10(0.5) / 5: within a factor 2 over the five doublings "
       "from 16 to 512, the lab's earlier end-to-end margin",
       false},
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
      {"entropy", "entropy_collapse_trend", ClaimKind::Paper,
       "without σReparam or warm-up, the least head's entropy falls as the learning rate grows: the least-squares slope of its H / log(visible "
       "keys) at the end of training on log2(lr) (per doubling, over --lrs, by default 1e-3 to 1e-2) is below -0.05",
       Compare::Below, -0.05,
       "Zhai et al. 2023, section 3 (entropy collapse comes with high learning rates); -0.05 per doubling, written before the first run of the "
       "trend: the smallest fall the lab cares about, 0.17 of log(keys) over the 3.3 doublings from 1e-3 to 1e-2, about a third of the way from "
       "a healthy head (0.55-0.61 at 1e-3 in the lab's earlier runs) to collapse (0.1, attending to about one key). Replaces `collapse` (the "
       "high rate's level against 0.1; issue 35: a claim about a factor is its trend)",
       true},
      {"entropy", "worse_loss", ClaimKind::Paper,
       "the collapse comes with failed training: final loss at the high rate / at the safe rate, without σReparam, paired by seed", Compare::Above, 1.5,
       "Zhai et al. 2023, section 3 (low entropy is accompanied by instability: oscillating loss or divergence); 1.5x is the margin the lab used before "
       "intervals, kept",
       true},
      {"entropy", "reparam_entropy", ClaimKind::Paper,
       "σReparam keeps the least head's entropy up at the high rate: its H / log(keys) at the end minus the plain model's, paired by seed",
       Compare::Above, 0.2,
       "Zhai et al. 2023, section 4 (σReparam prevents entropy collapse); 0.2 is twice the collapse threshold. At the safe rate the paper expects no such "
       "gap (σReparam matches stable baselines), which the ablation tests",
       true},
      {"entropy", "reparam_loss", ClaimKind::Paper,
       "σReparam keeps the loss down at the high rate: final loss without / with σReparam, paired by seed", Compare::Above, 1.5,
       "Zhai et al. 2023, sections 4-5 (σReparam trains without warm-up where the baseline is unstable); the same 1.5x as worse_loss", true},
      {"entropy", "reparam_init", ClaimKind::Check,
       "σReparam starts from the function it replaces (γ initialised to σ(W)): largest |logit difference| at initialisation", Compare::Below, 1e-3,
       "the weights are scaled by γ / σ(W) = 1 up to the last power-iteration step and float32 rounding (logits of order 1-10)", false},
      // ---- graph
      {"graph", "self_maps_quadratic", Check,
       "standard attention saves its T x T maps for backward: the self-attention weights and masks saved grow quadratically with the target "
       "length (log-log slope per doubling of T above 1.5)",
       Above, 1.5,
       "Dao et al. 2022, section 2.2 (standard attention materialises the N x N matrices, O(N^2) memory); 1.5: midway between linear and "
       "quadratic. A check, not evidence: the byte counts are fixed by the shapes, the same on every seed (issue 35)",
       false},
      {"graph", "fused_linear", Check,
       "the fused attention op saves only a row statistic: its self-attention saves grow linearly (slope per doubling of T below 1.5)", Below,
       1.5, "Dao et al. 2022, section 3 (FlashAttention keeps O(N) extra memory: the softmax's log-sum-exp per row); 1.5: the same midpoint. A check, not evidence: the byte counts are fixed by the shapes (issue 35)",
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
      {"kvcache", "exponent_gap", Paper,
       "a decoding step's time grows with its position t about one power of t faster recomputed than cached: the fitted exponent a "
       "(time ~ t^a over the sweep of t) of the recomputed step minus the cached step's",
       Above, 0.5,
       "Shazeer 2019, Section 2.4: with the cache a step does Theta(d^2) work in the projections and Theta(t d) in attention; recomputing "
       "redoes every earlier position, Theta(t d^2) + Theta(t^2 d). Exponents 0 against 1 where the projections dominate, 1 against 2 where "
       "attention does: a gap of 1 either way; 0.5 leaves half of it to the fixed costs of a step",
       true},
      {"kvcache", "speedup_longest", Paper,
       "at the longest position of the sweep a recomputed step takes more than 10 times as long as a cached one",
       Above, 10,
       "a recomputed step at position t runs every product on t rows, a cached one on one row (Shazeer 2019, Section 2.4): ideally about t "
       "(512 at the default sweep's end); 10 leaves a factor of 50 for the cached step's fixed costs (dispatching some 40 small operations)",
       true},
      {"kvcache", "tokens_f64", Check,
       "in float64 greedy decoding picks the same tokens cached as recomputed, alone as in a padded batch, and through translate_batch "
       "with and without the cache (the count of tokens that differ)",
       Below, 0.5,
       "both ways compute the same function; float64 rounding (~1e-15 relative) could flip an argmax only where two logits are that close "
       "(docs/testing.md, Results across OpenBLAS kernels)",
       false},
      {"kvcache", "logits_f64", Check,
       "in float64 the logits agree to rounding: the largest difference, cached against recomputed and alone against in the batch, "
       "over the largest logit",
       Below, 1e-10,
       "tests/rounding.h's bound: some 33 products in sequence, of length at most 256, each off by at most 2 x 256 x 2^-53 = 5.7e-14 of "
       "its summed magnitudes: 1.9e-12, with room 50 for magnitudes above the logits'",
       false},
      {"kvcache", "logits_f32", Check,
       "in float32 the logits agree to rounding (not to the bit: one row and t rows go through different BLAS calls): the same "
       "relative difference",
       Below, 1e-3,
       "the same bound in float32: 33 x 2 x 256 x 2^-24 = 1.0e-3 of the summed magnitudes (tests/rounding.h)",
       false},
      {"kvcache", "cache_bytes", Check,
       "the cache holds 2 x layers x kv_heads x d_k x (bytes per value) per token and row: the largest |measured - formula| in bytes, "
       "over the cache's buffers and decoding's DecodeStats",
       Below, 0.5,
       "K and V are (rows, kv_heads, positions, d_k) in every layer (nn/kv_cache.h); the size Pope et al. 2022 give for the "
       "KV cache",
       false},
      // ---- gqa
      {"gqa", "gqa_quality_trend", Paper,
       "quality falls as more query heads share a key/value head: over G = 1, 2, 4, 8 query heads per key/value head (--groups), each "
       "converted from the multi-head checkpoint and uptrained as long as the multi-head model trains on, the least-squares slope of "
       "held-out teacher-forced token accuracy per doubling of G is below -0.01",
       Below, -0.01,
       "Ainslie et al. 2023, Table 1 (quality falls from multi-head through GQA-8 to multi-query: 47.2, 47.1, 46.6 average at "
       "XXL). Their fall is a fraction of a point over six doublings at 64 heads; -0.01 (one accuracy point per doubling) is the smallest "
       "fall this lab cares about, so a placebo's zero trend cannot pass. Written before the first run at these levels, knowing the "
       "three-arm version's numbers (4 heads: -1.9 points at G 2, -17.5 at G 4)",
       true},
      {"gqa", "gqa_near_mha", Paper,
       "grouped-query attention with heads/2 key/value heads, converted from the multi-head checkpoint and uptrained as long as the "
       "multi-head model trains on, stays near its quality: held-out teacher-forced token accuracy, grouped minus multi-head",
       Above, -0.05,
       "Ainslie et al. 2023, abstract and Table 1: uptrained GQA reaches quality close to multi-head attention (within a fraction of a "
       "point of its average score), multi-query loses more. Here at a tiny size, so 5 accuracy points is a loose reading of 'close'",
       false, -1.0, 1.0},
      {"gqa", "shared_grad_g2", Check,
       "a key/value head shared by G = 2 query heads gets more gradient than one query head's part of it: |g_shared| / mean |g_part| at "
       "initialisation",
       Above, 1.2,
       "the shared head's gradient is the sum of its G query heads' parts (the group_sum check); at initialisation the query heads' "
       "weights are independent, so their parts add like uncorrelated vectors, to sqrt(2) = 1.41 times one of equal size; 1.2 allows "
       "some anticorrelation. A check, not evidence: arithmetic on independent random vectors, required of every seed (issue 35)",
       false},
      {"gqa", "shared_grad_mqa", Check,
       "with one key/value head for all heads (multi-query, G = heads = 8 by default) the same ratio",
       Above, 1.6,
       "as shared_grad_g2: sqrt(G) for uncorrelated parts of equal size (2 at G 4, 2.83 at G 8); 1.6 allows some anticorrelation at any "
       "G from 4. A check, not evidence: arithmetic on independent random vectors, required of every seed (issue 35)",
       false},
      {"gqa", "group_sum", Check,
       "the grouped model and its multi-head expansion (each key/value head copied to its query heads) give the same loss, and a shared "
       "head's gradient is the sum of its copies' (largest relative difference, float64)",
       Below, 1e-10,
       "the expansion computes the same function; the chain rule sums the copies' gradients; only float64 rounding (~1e-15) separates them",
       false},
      {"gqa", "cache_bytes", Check,
       "decoding's KV cache per token (DecodeStats, self- and cross-attention) is 2 x layers x kv_heads x d_k x 4 bytes for every "
       "arm: the largest |measured - formula| in bytes",
       Below, 0.5,
       "K and V are (rows, kv_heads, positions, d_k) in every layer: the cache shrinks by G = heads / kv_heads (Ainslie et al. 2023, "
       "Section 2.2)",
       false},
      // ---- smoothing
      {"smoothing", "baseline_overconfident", Paper,
       "without label smoothing the memorising model is overconfident on held-out tokens: its mean confidence minus its accuracy",
       Above, 0.02,
       "Guo et al. 2017 and Müller et al. 2019, Figure 2 (the reliability diagrams of networks trained without smoothing lie below the "
       "diagonal): the regime in which the paper's calibration claim is made; 0.02 is a tenth of the task's noise rate",
       false, -1.0, 1.0},
      {"smoothing", "ece_lower", Paper,
       "label smoothing (eps 0.1) lowers the held-out expected calibration error (15 bins): ECE with smoothing minus ECE without",
       Below, -0.01,
       "Müller et al. 2019, Section 3: training with label smoothing gives calibration close to temperature scaling's, far below the "
       "unsmoothed network's ECE, on image classification and on translation; -0.01: at least one point of ECE",
       true, -1.0, 1.0},
      {"smoothing", "logit_gap_trend", Paper,
       "label smoothing bounds the logit gap on training tokens (the label's logit minus the mean of the others), the more the larger eps: "
       "the least-squares slope of ln(gap) on eps over --eps-levels (by default 0, 0.05, 0.1, 0.2) is below -1",
       Below, -1.0,
       "Müller et al. 2019, Section 2: with smoothing the loss is least at a finite gap, log((1 - eps + eps/V) / (eps/V)) (V 20: 5.94, 5.20 "
       "and 4.39 at eps 0.05, 0.1 and 0.2), which falls as eps grows; without it the gap grows while training fits the labels. That law's "
       "slope of ln(gap) over the smoothed levels 0.05-0.2 is -1.97; -1 asks for half of it (issue 35: the claim is the trend over the levels)",
       true},
      {"smoothing", "tighter_clusters", Paper,
       "label smoothing tightens the penultimate layer's clusters: the within-class over between-class squared distance of the decoder's "
       "last states in the span of the class templates (the output layer's rows), on the training tokens whose label the noise left "
       "alone, with smoothing over without",
       Below, 0.95,
       "Müller et al. 2019, Section 2 and Figure 1 (the penultimate layer projected onto the plane of three classes' templates): label "
       "smoothing pulls the representations of a class's training examples into a tight cluster, equally distant from the other "
       "classes' templates. The paper gives no size (its evidence is a picture), so the claim is the direction: tighter at all; 0.95 (tighter by 5%), not 1, since the placebo (issue 35): a threshold at the null's own value is called supported by chance in 2.5-5% of placebo splits (change log)",
       true},
      {"smoothing", "smoothed_loss", Check,
       "the loss trained on is label smoothing's definition, (1 - eps) (-log p_label) + eps x mean over the V classes of -log p: the "
       "largest relative difference between train::batch_loss and the definition, float64",
       Below, 1e-10,
       "the same quantity computed two ways (the fused linear_cross_entropy and a direct sum); float64 rounding only",
       false},
      // ---- precision
      {"precision", "updates_round_away", Paper,
       "with the weights stored in bfloat16 (no float32 master copy), a share above 0.25 of the nonzero Adam updates of the second half of "
       "training round away: the stored weight does not change",
       Above, 0.25,
       "Micikevicius et al. 2018, section 3.1 (an update below the weight's half spacing is lost: 2^-11 in float16, 2^-9 in bfloat16's 8 bits); "
       "Adam's steps are about the learning rate; 0.25: the lab's threshold",
       true, 0.0, 1.0},
      {"precision", "stall_follows_ratio", Paper,
       "modules stall in the order of their update/weight ratio (`train --grad-stats`): Spearman's correlation across module groups between "
       "that ratio and the share of their updates lost is below -0.5",
       Below, -0.5,
       "Micikevicius et al. 2018, section 3.1: whether an update survives depends on its size relative to the weight's; -0.5: a clear "
       "negative rank correlation, the lab's threshold",
       true, -1.0, 1.0},
      {"precision", "master_weights_needed", Paper,
       "bfloat16-stored weights learn less: their held-out NLL ends more than 0.05 nats above the float32-master run's (same start, same "
       "batches), seed by seed",
       Above, 0.05,
       "Micikevicius et al. 2018, section 3.1 and Figure 2a (without a float32 master copy training falls behind); Kalamkar et al. 2019 keep "
       "float32 master weights for bfloat16; 0.05 nats: the lab's threshold",
       true},
      {"precision", "fp16_would_underflow", Paper,
       "without loss scaling float16 would round to 0 a share above 0.01 of the nonzero entries of the loss's gradient with respect to the "
       "logits (below 2^-25)",
       Above, 0.01,
       "Micikevicius et al. 2018, section 3.2 and Figure 3 (gradients below float16's range become zeros: the reason for loss scaling); "
       "0.01: the lab's threshold",
       false, 0.0, 1.0},
      {"precision", "bf16_keeps_range", Check,
       "bfloat16 keeps float32's exponent range: a share below 1e-6 of the nonzero gradient entries (logits and every parameter) rounds to 0",
       Below, 1e-6,
       "Kalamkar et al. 2019, section 2 (bfloat16 has float32's 8-bit exponent: no loss scaling); its smallest normal is float32's 2^-126: "
       "an exact property of the format, so a check; the largest share over the seeds",
       false},
      {"precision", "bf16_softmax_sum_degrades", Paper,
       "a softmax whose exponentials and running sum are bfloat16 errs more at long length: its total variation distance from the exact "
       "weights at the longest length is above 4x that at the shortest",
       Above, 4.0,
       "Micikevicius et al. 2018, section 3.3 (large reductions, softmax's among them, in float32): a running sum drops every term below half "
       "its spacing, 2^-9 of the sum; 4x: the lab's threshold",
       false},
      {"precision", "fp32_softmax_holds", Paper,
       "with the scores from bfloat16 products and the softmax in float32 (gradflow's --precision bf16), the error does not grow with "
       "length: the same ratio is below 2",
       Below, 2.0,
       "each score is rounded from its own d_k products, independent of L, and the float32 sum keeps the small terms (Micikevicius et al. "
       "2018, section 3.3); 2: the lab's threshold",
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
      // ---- leak (pilot: docs/labs/leak.md's output, 5 seeds)
      {"leak", "reads_answer", 0.2, 0.059, 5,
       "half the threshold's distance from chance (a row peaks at t+1 about 1/(T-1) of the time, near 0.1): a share of 0.7, clearly most "
       "rows"},
      {"leak", "tf_lower", 0.01, 0.0818, 5, "half the threshold's distance from no difference (0 nats)"},
      {"leak", "fr_collapses", 0.25, 0.109, 5, "half the threshold's distance from no collapse (a ratio of 1): a quarter of the masked model's accuracy"},
      // ---- padding (pilot: docs/labs/padding.md's output, 5 seeds)
      {"padding", "unmasked_pad_changes_output", 1.0, 0.0689, 5, "one decade: a relative difference of 1e-2 rather than the threshold's 1e-3"},
      {"padding", "pad_change_trend", 0.015, 0.0444, 5, "half the threshold's distance from no trend (0 decades per doubling)"},
      {"padding", "unmasked_pad_gets_gradient", 0.09, 0.152, 5,
       "a PAD position getting a tenth of a word's gradient (0.1): within an order of magnitude of a word's, which is what 'as words do' "
       "means"},
      {"padding", "bucketing_cuts_pad_loss", 0.25, 0.0422, 5, "half the threshold's distance from no cut (a ratio of 1): a 4x cut"},
      {"padding", "bucketing_lowers_pad_gradient", 0.1, 0.0506, 5,
       "a share 10% lower: the threshold is no change (1), and a smaller change is not one a trainer would bucket for"},
      // ---- scale (pilot: docs/labs/scale.md's output, 5 seeds)
      {"scale", "unscaled_gradient_trend", 0.1, 0.0165, 5, "half the threshold's distance from no trend (0 per doubling)"},
      {"scale", "scaled_gradient_trend", 0.0301, 0.0041, 5, "half the way from the threshold to the paper's 'stays' (0 per doubling)"},
      {"scale", "unscaled_trains_worse", 0.1, 0.158, 5,
       "a tenth of a nat of held-out NLL: the threshold is the sign (0), and a smaller gap is no 'hindered learning' a trainer would see"},
      // ---- depth (pilot: docs/labs/depth.md's output, 5 seeds)
      {"depth", "postln_amplifies_more", 0.3, 0.146, 5,
       "half of Theorem 2's difference over depths 1-32: the linear law's slope (1) minus the log law's (0.40) is 0.60"},
      {"depth", "preln_nearer_log", 0.15, 0.07, 5, "half the way from the midpoint (the threshold) to the log law's slope, 0.30 below it"},
      {"depth", "collapse_without_skips", 1.0, 0.0242, 5, "half the threshold's distance from no collapse (log10 ratio 0)"},
      {"depth", "skips_prevent_collapse", 0.15, 0.0087, 5, "half the threshold's distance from full collapse (0)"},
      {"depth", "qk_gradients_vanish", 0.5, 0.134, 5, "half the threshold's distance from no difference (log10 ratio 0)"},
      // ---- entropy (pilot: docs/labs/entropy.md's output at the dose-response defaults, 180 steps, 5 seeds)
      {"entropy", "entropy_collapse_trend", 0.025, 0.0241, 5, "half the threshold's distance from no trend (0 per doubling of the rate)"},
      {"entropy", "worse_loss", 0.25, 0.655, 5, "half the threshold's distance from equal losses (a ratio of 1): 1.75x"},
      {"entropy", "reparam_entropy", 0.1, 0.124, 5, "half the threshold's distance from no gap (0)"},
      {"entropy", "reparam_loss", 0.25, 0.487, 5, "half the threshold's distance from equal losses (a ratio of 1), as worse_loss"},
      // ---- kvcache (pilot: docs/labs/kvcache.md's output, 5 seeds)
      {"kvcache", "exponent_gap", 0.25, 0.0258, 5, "half the way from the threshold (0.5) to the paper's gap of one power of t"},
      {"kvcache", "speedup_longest", 4.5, 14.4, 5, "half the threshold's distance from no speed-up (a ratio of 1)"},
      // ---- gqa (pilot: docs/labs/gqa.md's output at the dose-response defaults, 5 seeds)
      {"gqa", "gqa_near_mha", 0.025, 0.00862, 5, "half the way from the threshold (-0.05) to the paper's 'close' (0)"},
      {"gqa", "gqa_quality_trend", 0.005, 0.028, 5, "half the threshold's distance from no trend (0)"},
      // ---- smoothing (pilot: docs/labs/smoothing.md's output, 5 seeds)
      {"smoothing", "baseline_overconfident", 0.01, 0.03, 5, "half the threshold's distance from calibrated (0)"},
      {"smoothing", "ece_lower", 0.005, 0.0262, 5, "half the threshold's distance from no change in ECE (0)"},
      {"smoothing", "logit_gap_trend", 0.5, 0.0983, 5, "half the threshold's distance from no trend (0): the law's -1.97 lies further still"},
      {"smoothing", "tighter_clusters", 0.025, 0.0512, 5, "half the threshold's distance from no change (a ratio of 1)"},
      // ---- precision (pilot: docs/labs/precision.md's output, 5 seeds)
      {"precision", "updates_round_away", 0.125, 0.00515, 5, "half the threshold's distance from no update lost (0)"},
      {"precision", "stall_follows_ratio", 0.25, 0.0577, 5, "half the threshold's distance from no correlation (0)"},
      {"precision", "master_weights_needed", 0.025, 0.0104, 5, "half the threshold's distance from no difference (0 nats)"},
      {"precision", "fp16_would_underflow", 0.005, 0.0693, 5, "half the threshold's distance from no entry lost (0)"},
      {"precision", "bf16_softmax_sum_degrades", 1.5, 2.57, 5, "half the threshold's distance from no growth (a ratio of 1)"},
      {"precision", "fp32_softmax_holds", 0.5, 0.0813, 5, "half the way from the threshold (2) to no growth (1), which the claim expects"},
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

// Lab `padding`: what the padding masks and ignore_index are for.
//
// A batch pads every sentence to the longest one. The source padding mask keeps PAD out of the
// encoder's and the cross-attention's keys, the target padding mask keeps it out of the decoder's
// self-attention keys, and cross_entropy(ignore_index = PAD) keeps PAD labels out of the loss.
// With all three, a sentence computes the same thing alone and inside any batch.
//
// Here, on the built-in English -> Korean corpus, each seed's initialised model (lab/padding.h):
//  1. (the arms of the four mask settings) a short sentence alone and as row 0 of a batch with the
//     longest ones, in float64: the largest difference of encoder output, logits, every attention
//     map and every parameter gradient of that sentence's loss, with the masks, and with each
//     padding mask switched off; the seed's index picks the sentence (the i-th shortest);
//  2. (the same arms) the gradient of a batch's loss that reaches the PAD positions of the
//     encoder's and the decoder's input (exactly 0 when masked);
//  3. (arms "untrained random" .. "trained bucketed") with ignore_index off, the share of the loss
//     and of the gradient that PAD labels carry, for random batches against length-bucketed ones,
//     untrained, then after --steps of training of the same model;
//  4. (arm "padded", the levels are --lengths) a dose-response on the padded length: the sentence
//     of part 1 alone and padded with PAD to each source length, without the masks.
// --control is a placebo (initialised models of seeds of their own, each padding its own sentence
// to the middle length, in every length's place); --ablate keeps both padding masks on in every arm.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "lab/padding.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

struct Settings {
  int64_t pairs = 2000, d_model = 32, max_tokens = 1024, batches = 20, steps = 200;
  std::vector<int64_t> lengths{8, 16, 32, 64};
};

Fields<Settings> fields() {
  using S = Settings;
  return {{"pairs", &S::pairs, "pairs of the built-in corpus (90% train)"},
          {"d-model", &S::d_model, "model width (feed-forward 2x)"},
          {"max-tokens", &S::max_tokens, "padded tokens per batch"},
          {"batches", &S::batches, "batches measured per batching"},
          {"steps", &S::steps, "training steps before the second PAD-share measurement"},
          {"lengths", &S::lengths, "padded source lengths of the dose-response (4 or more, increasing, above the padded sentences' own)"}};
}

constexpr int kPools = 1;  // the placebo's pools

void validate(const Settings& s) {
  GF_CHECK(s.lengths.size() >= 4, "lab padding: --lengths needs 4 or more padded lengths for the dose-response, got '{}'", fmt::join(s.lengths, ","));
  for (size_t k = 0; k < s.lengths.size(); ++k)
    GF_CHECK(s.lengths[k] >= 1 && (k == 0 || s.lengths[k] > s.lengths[k - 1]), "lab padding: --lengths must be increasing positive lengths, got '{}'",
             fmt::join(s.lengths, ","));
  GF_CHECK(s.batches >= 1 && s.steps >= 0, "lab padding: --batches must be at least 1 and --steps at least 0, got {} and {}", s.batches, s.steps);
}

std::vector<ArmSpec> arms(const Settings& s) {
  std::vector<ArmSpec> a;
  for (const auto& m : kPaddingMasks) a.push_back({m.name, {}});
  for (const char* x : kPadShareArms) a.push_back({x, {}});
  a.push_back({"padded", std::vector<double>(s.lengths.begin(), s.lengths.end())});
  return a;
}

// The corpus, and one seed's models: its initialised model in float64 (parts 1, 2, 4) and in
// float32 (part 3, trained once its untrained stage is measured).
struct Context {
  IdData data;
  std::vector<size_t> by_len;
  std::shared_ptr<nn::Seq2SeqTransformer> f64, f32;
  uint64_t f64_seed = 0, f32_seed = 0;
  bool trained = false;
};

nn::Seq2SeqOptions lab_model(const Settings& s, const IdData& data) { return small_model(data, s.d_model, 2, 2, 2 * s.d_model, false); }

nn::Seq2SeqTransformer& float64_model(const Settings& s, Context& c, uint64_t seed) {
  if (!c.f64 || c.f64_seed != seed) {
    c.f64 = std::make_shared<nn::Seq2SeqTransformer>(lab_model(s, c.data), seed), c.f64_seed = seed;
    c.f64->to(DType::Float64);
    c.f64->eval();
  }
  return *c.f64;
}

Context prepare(const Settings& s, Report& r) {
  Context c;
  c.data = builtin_corpus(s.pairs);
  c.by_len = by_length(c.data);
  r.say(fmt::format("built-in corpus: {} training pairs, vocabularies {} / {}; Post-LN, d_model {}, 2 heads, 2 layers, untrained "
                    "(each seed its own initialisation); {} seeds",
                    c.data.train.size(), c.data.src_vocab, c.data.tgt_vocab, s.d_model, r.seeds()));
  // The sentences padded: one per seed, or one per placebo run (pools x seeds x lengths). A bad
  // --lengths fails here, before the work.
  const int64_t padded = r.placebo_mode() ? int64_t{r.placebo_pools(kPools)} * r.seeds() * static_cast<int64_t>(s.lengths.size()) : r.seeds();
  const int64_t longest = longest_padded(c.data, c.by_len, padded), positions = lab_model(s, c.data).max_len;
  GF_CHECK(s.lengths.front() > longest && s.lengths.back() <= positions,
           "lab padding: --lengths must lie above the padded sentences' longest source ({} tokens) and at most at the model's {} positions, "
           "got '{}'", longest, positions, fmt::join(s.lengths, ","));
  if (r.ablate()) r.say("ABLATION: both padding masks on in every arm (the rows keep their names).");
  return c;
}

// Part 3: the seed's float32 model, measured untrained, then trained by --steps and measured again.
PaddingRun measure_share(const Settings& s, Context& c, const RunKey& k) {
  const bool trained = k.cond.arm.starts_with("trained");
  if (!c.f32 || c.f32_seed != k.seed || (c.trained && !trained))
    c.f32 = std::make_shared<nn::Seq2SeqTransformer>(lab_model(s, c.data), k.seed), c.f32_seed = k.seed, c.trained = false;
  nn::Seq2SeqTransformer& model = *c.f32;
  if (trained && !c.trained) {
    FitOptions fo;
    fo.steps = s.steps, fo.lr = 1e-3, fo.max_tokens = s.max_tokens, fo.seed = k.seed;
    fit(model, c.data.train, fo);
    c.trained = true;
  }
  model.eval();
  std::vector<size_t> all(c.data.train.size());
  std::iota(all.begin(), all.end(), 0);
  const std::vector<std::vector<size_t>> plan = k.cond.arm.ends_with("random") ? random_batches(c.data.train, s.max_tokens, k.seed)
                                                                                : train::bucket_by_length(c.data.train, all, s.max_tokens);
  // Bucketed batches come sorted by length: visit them in a shuffled order, as an epoch does.
  std::vector<size_t> order(plan.size());
  std::iota(order.begin(), order.end(), 0);
  train::seeded_shuffle(order, k.seed);
  std::vector<std::vector<size_t>> visited;
  for (size_t i : order) visited.push_back(plan[i]);
  const size_t limit = static_cast<size_t>(s.batches);
  PaddingRun m{.part = PaddingRun::Share, .seed = k.seed};
  m.share = pad_share(model, c.data.train, visited, limit);
  m.batches = static_cast<int64_t>(std::min(limit, plan.size()));
  return m;
}

// The mask setting an arm of parts 1 and 2 names; null for the other arms.
const MaskSetting* mask_setting(const std::string& arm) {
  for (const MaskSetting& m : kPaddingMasks)
    if (arm == m.name) return &m;
  return nullptr;
}

PaddingRun measure(const Settings& s, Context& c, const RunKey& k) {
  const MaskSetting* ms = mask_setting(k.cond.arm);
  if (!ms && k.cond.arm != "padded") return measure_share(s, c, k);
  nn::Seq2SeqTransformer& model = float64_model(s, c, k.seed);
  const size_t idx = c.by_len[static_cast<size_t>(k.index) % c.by_len.size()];  // the i-th shortest pair
  if (k.cond.arm == "padded") {  // part 4: no padding masks (both under --ablate)
    model.masks.source_padding = model.masks.target_padding = k.ablate;
    GF_CHECK(static_cast<int64_t>(c.data.train[idx].src.size()) < k.cond.level, "lab padding: pair {} is longer than the padded length {}", idx,
             k.cond.level);
    return {.part = PaddingRun::Length, .seed = k.seed, .log_diff = padded_log_diff(model, c.data.train, idx, static_cast<int64_t>(k.cond.level))};
  }
  model.masks.source_padding = ms->source || k.ablate;  // --ablate: both padding masks in every arm, whatever it is named
  model.masks.target_padding = ms->target || k.ablate;
  std::vector<size_t> rows{idx};  // the pair alone, and with the 7 longest
  for (size_t j = 0; j < 7; ++j) rows.push_back(c.by_len[c.by_len.size() - 1 - j]);
  const train::Batch b = train::collate(c.data.train, rows);
  std::vector<size_t> some(c.data.train.size());  // (part 2) 8 random pairs
  std::iota(some.begin(), some.end(), 0);
  train::seeded_shuffle(some, k.seed);
  some.resize(std::min<size_t>(8, some.size()));
  PaddingRun m{.part = PaddingRun::Masks, .seed = k.seed};
  m.src_len = static_cast<int64_t>(c.data.train[idx].src.size()), m.tgt_len = static_cast<int64_t>(c.data.train[idx].tgt.size()) + 1;
  m.batch_src_len = b.src_len, m.batch_tgt_len = b.tgt_len - 1;
  m.cmp = compare_alone_batch(model, c.data.train, rows);
  m.pg = pad_gradient(model, train::collate(c.data.train, some));
  return m;
}

void describe(const Settings& s, const Context&, const Grid<PaddingRun>& g, Report& r) { describe_padding(s.lengths, g, r); }

// ---------------------------------------------------------------- claims

double largest(const Comparison& c) { return std::max({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel}); }


std::string comparison_text(const char* name, const Comparison& c) {
  return fmt::format("{}, worst seed: encoder out {:.2g}, logits {:.2g}, attention {:.2g}, gradients {:.2g}, weight on PAD keys {:.2g}", name,
                     c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel, c.pad_weight);
}

// Bucketed over random PAD share, the larger of the untrained and the trained model.
double bucketed_over_random(const SeedView<PaddingRun>& v, double PadShare::*share) {
  double x = 0;
  for (const char* stage : {"untrained", "trained"})
    x = std::max(x, v(std::string(stage) + " bucketed").share.*share / v(std::string(stage) + " random").share.*share);
  return x;
}

std::vector<ClaimDef<PaddingRun>> claims(const Settings& s) {
  using V = SeedView<PaddingRun>;
  using G = Grid<PaddingRun>;
  const char* const none = kPaddingMasks[3].name;
  const std::string one_arm = "one arm (no masks) against a threshold, no contrast between arms";
  const std::string batchings = "bucketed against random batches of the same models and sentences; a placebo of two random batchings is not measured";
  return {
      {.spec = {.id = "masked_alone_equals_batch", .kind = ClaimKind::Check,
                .statement = "with the padding masks a sentence computes the same alone and in a batch: the largest relative difference (encoder "
                             "out, logits, attention, gradients; float64) and the largest weight on a PAD key, worst seed, are below 1e-12",
                .side = Compare::Below, .threshold = 1e-12,
                .source = "the masks give PAD keys weight exactly 0; what is left is float64 rounding (about 1e-16) of sums in another order, "
                          "1e-12 a margin of 1e4",
                .control_targets = false},
       .joint = [](const G& g) {
         const Comparison both = worst_comparison(g, kPaddingMasks[0].name);
         return std::max(largest(both), both.pad_weight);
       },
       .evidence = [](const G& g, const auto&) { return comparison_text(kPaddingMasks[0].name, worst_comparison(g, kPaddingMasks[0].name)); }},
      {.spec = {.id = "unmasked_pad_changes_output", .kind = ClaimKind::Paper,
                .statement = "without the padding masks a sentence computes something else in a batch: log10 of the smallest of the four "
                             "relative differences is above -3",
                .side = Compare::Above, .threshold = -3.0,
                .source = "the course (PAD must not change what a sentence computes; the masks are what prevents it); -3: a difference of 1e-3, "
                          "far above float64's rounding and float32's (1e-7), the lab's threshold since its first version",
                .control_targets = true, .min_effect = 1.0,
                .min_effect_reason = "one decade: a relative difference of 1e-2 rather than the threshold's 1e-3", .pilot_sd = 0.0689, .pilot_n = 5},
       .per_seed = [none](const V& v) {
         const Comparison& c = v(none).cmp;
         return std::log10(std::min({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel}));
       },
       .evidence = [none](const G& g, const auto&) {
         std::string ev;
         for (const PaddingRun* m : g.of(none))
           ev += fmt::format("{}seed {}: {:.2g}, {:.2g}, {:.2g}, {:.2g}", ev.empty() ? "" : "; ", m->seed, m->cmp.memory.rel, m->cmp.logits.rel,
                             m->cmp.weights.rel, m->cmp.grads.rel);
         return "encoder out, logits, attention, gradients: " + ev;
       },
       .no_placebo = one_arm},
      {.spec = {.id = "pad_change_trend", .kind = ClaimKind::Paper,
                .statement = "without the padding masks, the more PAD a sentence is padded with, the more it computes something else: the "
                             "least-squares slope of log10 of its logits' relative difference (padded against alone) on log2 of the padded source "
                             "length (per doubling, over --lengths, by default 8, 16, 32, 64) is above 0.03",
                .side = Compare::Above, .threshold = 0.03,
                .source = "the course (PAD must not change what a sentence computes); written before the first run of the trend: unmasked, a "
                          "real query spreads its attention over n real and L - n PAD keys, so the PAD keys' share, about (L - n) / L, sets how "
                          "far the output moves. For a source of about 4 tokens that share grows from 0.5 at L 8 to 0.94 at L 64, log10 0.27 "
                          "over three doublings (0.09 per doubling); 0.03 is a third of it, the smallest growth the lab cares about",
                .control_targets = true, .min_effect = 0.015,
                .min_effect_reason = "half the threshold's distance from no trend (0 decades per doubling)", .pilot_sd = 0.0444, .pilot_n = 5},
       .trend = TrendDef<PaddingRun>{"padded length", "padded", [](const PaddingRun& m) { return m.log_diff; }, TrendKind::LogSlope,
                                   "padded source length", "log10 relative logits difference, padded vs alone", true, "#d62728"},
       .evidence = [](const G&, const std::vector<double>& x) {
         return fmt::format("slope of log10 of the logits' relative difference per doubling of the padded source length, per seed: {:.4f}",
                            fmt::join(x, ", "));
       },
       .null = Condition{"padded", static_cast<double>(s.lengths[s.lengths.size() / 2])}},
      {.spec = {.id = "target_mask_redundant", .kind = ClaimKind::Check,
                .statement = "the target padding mask alone changes nothing for the sentence's own positions: the largest relative difference "
                             "with it off, worst seed, is below 1e-12",
                .side = Compare::Below, .threshold = 1e-12,
                .source = "the causal mask already hides the PAD after a sentence from each of its real positions", .control_targets = false},
       .joint = [](const G& g) { return largest(worst_comparison(g, kPaddingMasks[2].name)); },
       .evidence = [](const G& g, const auto&) { return comparison_text(kPaddingMasks[2].name, worst_comparison(g, kPaddingMasks[2].name)); }},
      {.spec = {.id = "masked_pad_gradient_zero", .kind = ClaimKind::Check,
                .statement = "with the masks the gradient reaching PAD positions of the encoder and decoder input is exactly 0 (count of seeds and "
                             "sides where not)",
                .side = Compare::Below, .threshold = 0.5,
                .source = "a masked key gets weight exactly 0, so no path from a PAD input reaches the loss", .control_targets = false},
       .joint = [](const G& g) {
         double nonzero = 0;  // seeds with a non-zero gradient at a PAD input, masks on
         for (const PaddingRun* m : g.of(kPaddingMasks[0].name)) nonzero += (m->pg.src_pad != 0.0) + (m->pg.tgt_pad != 0.0);
         return nonzero;
       },
       .evidence = [](const G& g, const auto&) {
         const PadGradient on = worst_gradient(g, kPaddingMasks[0].name);
         return fmt::format("largest |gradient| at source PAD {:g} (real {:.3g}), target PAD {:g} (real {:.3g})", on.src_pad, on.src_real, on.tgt_pad,
                            on.tgt_real);
       }},
      {.spec = {.id = "unmasked_pad_gets_gradient", .kind = ClaimKind::Paper,
                .statement = "without the padding masks PAD source positions get gradient as words do: the largest |gradient| at a source PAD "
                             "over the largest at a real source position is above 0.01",
                .side = Compare::Above, .threshold = 0.01,
                .source = "reasoning: unmasked, a PAD key is attended like any word, so its gradient is of a word's order; 0.01 of it is far "
                          "from the exact 0 of the masked model and far below parity",
                .control_targets = true, .min_effect = 0.09,
                .min_effect_reason = "a PAD position getting a tenth of a word's gradient (0.1): within an order of magnitude of a word's, which "
                                     "is what 'as words do' means",
                .pilot_sd = 0.152, .pilot_n = 5},
       .per_seed = [none](const V& v) { return v(none).pg.src_real > 0 ? v(none).pg.src_pad / v(none).pg.src_real : NAN; },
       .evidence = [](const G&, const std::vector<double>& x) { return fmt::format("per seed: {:.3g}", fmt::join(x, ", ")); },
       .no_placebo = one_arm},
      {.spec = {.id = "ignore_index_exact", .kind = ClaimKind::Check,
                .statement = "with ignore_index = PAD the loss and gradient equal those of the real labels alone (count of batches where they "
                             "differ at all)",
                .side = Compare::Below, .threshold = 0.5, .source = "cross_entropy leaves ignored labels out of the sum and the count",
                .control_targets = false},
       .joint = [](const G& g) {
         double differs = 0;
         for (int i = 0; i < g.seeds(); ++i)
           for (const char* x : kPadShareArms) differs += g.at(x, 0, i).share.ignored_grad != 0.0;
         return differs;
       },
       .evidence = [](const G&, const auto&) {
         return std::string("batches where the loss or gradient with ignore_index = PAD differs at all from the real labels' alone");
       }},
      {.spec = {.id = "bucketing_cuts_pad_loss", .kind = ClaimKind::Paper,
                .statement = "length-bucketed batches cut the PAD labels' share of the loss (ignore_index off) at least 2x against random "
                             "batches: bucketed over random share, the larger of the untrained and the trained model, is below 0.5",
                .side = Compare::Below, .threshold = 0.5,
                .source = "the course (bucketing by length is how trainers avoid padding); 2x: the lab's threshold since its first version",
                .control_targets = false, .min_effect = 0.25,
                .min_effect_reason = "half the threshold's distance from no cut (a ratio of 1): a 4x cut", .pilot_sd = 0.0422, .pilot_n = 5},
       .per_seed = [](const V& v) { return bucketed_over_random(v, &PadShare::loss_share); },
       .evidence = [](const G& g, const auto&) {
         std::string ev;
         for (const char* stage : {"untrained", "trained"}) {
           const PadShare &rnd = g.at(std::string(stage) + " random", 0, 0).share, &bkt = g.at(std::string(stage) + " bucketed", 0, 0).share;
           ev += fmt::format("{}seed {} {}: loss {:.3f} -> {:.3f}, gradient {:.3f} -> {:.3f}", ev.empty() ? "" : "; ", g.at(kPadShareArms[0], 0, 0).seed,
                             stage, rnd.loss_share, bkt.loss_share, rnd.grad_share, bkt.grad_share);
         }
         return "bucketed / random PAD share of the loss, the larger of untrained and trained, per seed; " + ev;
       },
       .no_placebo = batchings},
      {.spec = {.id = "bucketing_lowers_pad_gradient", .kind = ClaimKind::Paper,
                .statement = "... and lower PAD labels' share of the gradient: the same ratio for the gradient is below 1",
                .side = Compare::Below, .threshold = 1.0,
                .source = "the course; 1 ('lower' at all) was chosen after a run in which the loss's 2x did not carry over to a trained model's "
                          "gradient (92% -> 66%), as docs/labs/padding.md says",
                .control_targets = false, .min_effect = 0.1,
                .min_effect_reason = "a share 10% lower: the threshold is no change (1), and a smaller change is not one a trainer would bucket for",
                .pilot_sd = 0.0506, .pilot_n = 5},
       .per_seed = [](const V& v) { return bucketed_over_random(v, &PadShare::grad_share); },
       .evidence = [](const G&, const auto&) {
         return std::string("bucketed / random PAD share of the gradient, the larger of untrained and trained, per seed");
       },
       .no_placebo = batchings},
  };
}

}  // namespace

Lab padding_lab() {
  return make_lab(Experiment<Settings, Context, PaddingRun>{
      .info = {.name = "padding",
               .title = "padding masks and ignore_index",
               .reference = "the course: PAD must not change what a sentence computes",
               .question = "Does a sentence compute the same alone and padded in a batch, with and without the padding masks? How much of the "
                           "loss and gradient do PAD labels carry without ignore_index, with random and with length-bucketed batches?",
               .default_seeds = 5,
               .ablation = "both padding masks in every arm",
               .null = {"padded", 32},
               .null_description = "an initialised model without the padding masks, its own sentence padded to the middle of --lengths",
               .placebo_pools = kPools},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

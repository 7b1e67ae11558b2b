// Lab `kvcache`: what the KV cache changes in decoding, and what it does not.
//
// A decoder that writes one token a step could recompute its whole prefix every step; the cache
// keeps each layer's keys and values of the positions already decoded, so a step projects only the
// newest position and attends over the stored ones. Nothing else changes: cached decoding must
// produce the recomputed decoding's logits. Not bit for bit: the two reach each number through
// different products (one row against t rows, gradflow's own attend_one against the fused op), and
// OpenBLAS promises no summation order, so in float32 they agree to rounding (docs/testing.md,
// "Results across OpenBLAS kernels") and in float64 to ~1e-15, where a different greedy token
// would need two logits equal to that precision.
//
// Per seed (the seed draws the model and the source sentences), three arms:
//  - float32 and float64: cached against recomputed greedy decoding on one prefix (the largest logit
//    difference and the tokens; the same through the library's train::translate_batch), each
//    sentence decoded alone against its row of a padded batch, and the cache's bytes against the
//    formula 2 x layers x kv_heads x d_k x bytes per token;
//  - timing: one decoding step at position t, cached and recomputed (alternating at each t, one
//    measurement: the cache is filled once and rewound), over a sweep of t, float32: the fitted
//    exponent of each (time ~ t^a) and their ratio at the longest t.
// The control is the ablation: the cache disabled in both timing arms (both recompute).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lab/common.h"
#include "lab/kvcache.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

constexpr const char* kCachedColor = "#1f77b4";
constexpr const char* kRecomputedColor = "#d62728";

struct Settings {
  int64_t symbols = 16, min_len = 4, max_len = 12, rows = 8, steps = 24, d_model = 64, heads = 4, kv_heads = 0, layers = 2;
  std::vector<int64_t> lengths{32, 64, 128, 256, 512};
  int64_t reps = 5;
};

Fields<Settings> fields() {
  using S = Settings;
  return {{"symbols", &S::symbols, "symbols of the source sentences"},
          {"min-len", &S::min_len, "shortest source"},
          {"max-len", &S::max_len, "longest source"},
          {"rows", &S::rows, "sentences decoded together (the batch)"},
          {"steps", &S::steps, "greedy steps compared, cached against recomputed"},
          {"d-model", &S::d_model, "model width (FFN 4x)"},
          {"heads", &S::heads, "attention heads"},
          {"kv-heads", &S::kv_heads, "key/value heads (0: as many as heads)"},
          {"layers", &S::layers, "encoder and decoder layers each"},
          {"lengths", &S::lengths, "positions t at which one step is timed"},
          {"reps", &S::reps, "timed runs of each step (the fastest counts)"}};
}

void validate(const Settings& s) {
  GF_CHECK(s.reps >= 1 && s.steps >= 1 && s.rows >= 1, "lab kvcache: --reps, --steps and --rows must be positive, got {}, {}, {}", s.reps, s.steps,
           s.rows);
  const std::vector<int64_t>& l = s.lengths;
  GF_CHECK(l.size() >= 2 && l.front() >= 1 && std::adjacent_find(l.begin(), l.end(), std::greater_equal<>()) == l.end(),
           "lab kvcache: --lengths needs two or more increasing positive positions, got '{}'", fmt::join(l, ","));
}

// A run: the exact checks of one dtype's model (float32, float64), or the timing.
struct Measured {
  DType dtype = DType::Float32;
  Exactness exact;
  CacheCheck bytes;
  StepTimes timing;
  bool timed = false;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (m.timed) {
    j = {{"cached_seconds", m.timing.cached}, {"recomputed_seconds", m.timing.recomputed}, {"slope_cached", m.timing.slope_cached},
         {"slope_recomputed", m.timing.slope_recomputed}};
    return;
  }
  const Exactness& e = m.exact;
  j = {{"cached_vs_recomputed", e.cached_diff}, {"alone_vs_batch", e.alone_diff},
       {"tokens_differing", e.cached_tokens + e.alone_tokens + e.library_tokens}, {"bytes_per_token_formula", m.bytes.formula},
       {"bytes_per_token_measured", m.bytes.self}};
}

void introduce(const Settings& s, Report& r) {
  r.say(fmt::format("Post-LN translator, d_model {}, {} heads ({} key/value heads), {}+{} layers, FFN {}, at its initialisation (the seed draws",
                    s.d_model, s.heads, s.kv_heads > 0 ? s.kv_heads : s.heads, s.layers, s.layers, 4 * s.d_model));
  r.say(fmt::format("it and {} source sentences of {}-{} symbols out of {}); greedy decoding of {} steps, never stopping at <eos>.", s.rows, s.min_len,
                    s.max_len, s.symbols, s.steps));
  if (r.ablation_mode()) r.say("Here the timing's cached arm recomputes the prefix too; the exact checks run as in the lab.");
}

std::vector<ArmSpec> arms(const Settings&) { return {{"float32", {}}, {"float64", {}}, {"timing", {}}}; }

// The seed's sources and model (its initialisation) in `dtype`, in eval mode.
std::pair<Sources, std::unique_ptr<nn::Seq2SeqTransformer>> setup(const Settings& s, uint64_t seed, DType dtype) {
  IdData data = synthetic_task("copy", s.symbols, s.min_len, s.max_len, 1, s.rows, seed);
  GF_CHECK(static_cast<int64_t>(data.test.size()) == s.rows, "lab kvcache: only {} distinct sources of lengths {}-{} over {} symbols, {} asked",
           data.test.size(), s.min_len, s.max_len, s.symbols, s.rows);
  std::vector<size_t> all(data.test.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const train::Batch b = train::collate(data.test, all);
  Sources u{Tensor::from_vector(b.src, {b.rows, b.src_len}), {}};  // (rows, S)
  for (const auto& p : data.test) u.lengths.push_back(static_cast<int64_t>(p.src.size()));
  nn::Seq2SeqOptions o = small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false);
  o.layer.kv_heads = s.kv_heads;
  o.max_len = std::max(s.lengths.back(), s.steps) + 1;
  auto model = std::make_unique<nn::Seq2SeqTransformer>(o, seed);
  model->to(dtype);
  model->eval();
  return {std::move(u), std::move(model)};
}

Measured measure(const Settings& s, NoContext&, const RunKey& k) {
  Measured m;
  m.dtype = k.cond.arm == "float64" ? DType::Float64 : DType::Float32;
  const auto [u, model] = setup(s, k.seed, m.dtype);
  if (k.cond.arm == "timing") {
    m.timing = time_steps(*model, u.src, s.lengths, s.reps, s.symbols, k.seed, /*recompute_both=*/k.ablate), m.timed = true;
    return m;
  }
  m.exact = exactness(*model, u, s.steps);
  m.bytes = check_cache_bytes(*model, u.src, s.lengths);
  return m;
}

const char* const kDtypes[] = {"float32", "float64"};

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3g}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

void describe_exact(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section("cached against recomputed greedy decoding, and each sentence alone against its row of a padded batch");
  Table t("exactness", {"seed", "dtype", "cached vs recomputed: max |dlogit| / max |logit|", "tokens differing", "alone vs batch: max |dlogit| / max |logit|",
                        "tokens differing", "translate_batch cached vs not: tokens differing"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* d : kDtypes) {
      const Exactness& e = g.at(d, 0, i).exact;
      t.row({static_cast<int64_t>(r.seed(i)), d, e.cached_diff, e.cached_tokens, e.alone_diff, e.alone_tokens, e.library_tokens});
    }
  r.print(t);
  r.say("Recomputed decoding is fed the cached decoding's tokens, so both score one prefix; 'tokens differing' counts steps whose");
  r.say("argmax differs. A sentence alone has no padding; in the batch its source is padded to the longest and its cross-attention");
  r.say("skips the padded keys. The two ways reach each logit through different products, so they agree to rounding, not to the bit.");
  r.section("the cache's bytes against 2 x layers x kv_heads x d_k x bytes, per token");
  Table b("cache bytes", {"dtype", "layers", "kv heads", "d_k", "formula (bytes/token)", "self-attention buffers / (rows x positions)",
                          "cross-attention / (rows x source positions)", "DecodeStats self", "DecodeStats cross", "largest |measured - formula|"});
  for (const char* d : kDtypes) {
    const CacheCheck& c = g.at(d, 0, 0).bytes;
    int64_t worst = 0;
    for (const Measured* m : g.of(d)) worst = std::max(worst, m->bytes.worst);
    b.row({d, s.layers, s.kv_heads > 0 ? s.kv_heads : s.heads, s.d_model / s.heads, c.formula, c.self, c.cross, c.library, c.library_cross, worst});
  }
  r.print(b);
  r.say(fmt::format("Buffers started for {} rows at every capacity of the sweep ({}); the largest difference is over every total and seed.", s.rows,
                    fmt::join(s.lengths, ", ")));
}

// Per seed, per length: f of the seed's timing.
std::vector<Spread> timing_spread(const Grid<Measured>& g, const Settings& s, double (*f)(const StepTimes&, size_t)) {
  std::vector<std::vector<double>> rows;
  for (const Measured* m : g.of("timing")) {
    rows.emplace_back();
    for (size_t k = 0; k < s.lengths.size(); ++k) rows.back().push_back(f(m->timing, k));
  }
  return spread_per_column(rows);
}

void describe_timing(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("time of one decoding step at position t, {} rows, float32 (the fastest of {} runs; mean [min, max] over seeds)", s.rows,
                        s.reps));
  Table t("step time", {"t", "cached (ms)", "min", "max", "recomputed (ms)", "min", "max", "recomputed / cached"});
  const auto c = timing_spread(g, s, [](const StepTimes& x, size_t k) { return 1e3 * x.cached[k]; });
  const auto q = timing_spread(g, s, [](const StepTimes& x, size_t k) { return 1e3 * x.recomputed[k]; });
  const auto rt = timing_spread(g, s, [](const StepTimes& x, size_t k) { return x.recomputed[k] / x.cached[k]; });
  for (size_t k = 0; k < s.lengths.size(); ++k)
    t.row({s.lengths[k], c[k].mean, c[k].min, c[k].max, q[k].mean, q[k].min, q[k].max, q[k].mean / c[k].mean});
  r.print(t);
  std::vector<double> sc, sr;
  for (const Measured* m : g.of("timing")) sc.push_back(m->timing.slope_cached), sr.push_back(m->timing.slope_recomputed);
  r.say(fmt::format("exponent a in time ~ t^a (t 95% interval over seeds): cached {}, recomputed {}", with_interval(sc), with_interval(sr)));
  r.say("A recomputed step runs every product on t rows (and attention on t x t scores); a cached one on one row (attention on 1 x t).");
  r.say("Per step: cached a + b t, recomputed a' t + b' t^2 -- exponents one apart whether the projections (small t) or attention (large t) dominate.");
  std::vector<double> x(s.lengths.begin(), s.lengths.end());
  ChartSeries lin{"~ t (slope 1)", x, {}, {}, {}, true, "#7f7f7f"}, sq{"~ t^2 (slope 2)", x, {}, {}, {}, true, "#bbbbbb"};
  for (double v : x) lin.y.push_back(q.front().mean * v / x.front()), sq.y.push_back(q.front().mean * v * v / (x.front() * x.front()));
  r.add_panel(Chart{"one decoding step at position t (band: seeds min..max)", "position t", "ms", true, true,
                    {band_series(r.ablation_mode() ? "\"cached\" (recomputes: control)" : "cached", x, c, kCachedColor),
                     band_series("recomputed", x, q, kRecomputedColor), lin, sq},
                    x, Chart::Corner::TopLeft});
  ChartSeries ideal{"t (one row against t)", x, x, {}, {}, true, "#7f7f7f"};
  r.add_panel(Chart{"recomputed / cached time per step", "position t", "ratio", true, true, {band_series("ratio", x, rt, "#2ca02c"), ideal}, x,
                    Chart::Corner::TopLeft});
}

void describe_figure(const Settings& s, const Grid<Measured>& g, Report& r) {
  std::vector<ChartSeries> diffs, bytes;
  std::vector<double> x(s.lengths.begin(), s.lengths.end());
  for (int k = 0; k < 2; ++k) {
    const Measured& m = g.at(kDtypes[k], 0, 0);
    const char* color = k ? "#9467bd" : "#ff7f0e";
    ChartSeries d{fmt::format("{} (seed {})", kDtypes[k], r.seed(0)), {}, {}, {}, {}, false, color};
    for (size_t t = 0; t < m.exact.per_step.size(); ++t) d.x.push_back(static_cast<double>(t + 1)), d.y.push_back(m.exact.per_step[t]);
    diffs.push_back(d);
    // Bytes against positions: the formula's line through the measured totals.
    ChartSeries measured{fmt::format("measured, {}", kDtypes[k]), x, {}, {}, {}, false, color};
    ChartSeries formula{fmt::format("formula, {}", kDtypes[k]), x, {}, {}, {}, true, "#7f7f7f"};
    for (size_t j = 0; j < x.size(); ++j) {
      measured.y.push_back(static_cast<double>(m.bytes.self_totals[j]) / 1024.0);
      formula.y.push_back(static_cast<double>(m.bytes.formula) * static_cast<double>(s.rows) * x[j] / 1024.0);
    }
    bytes.push_back(measured), bytes.push_back(formula);
  }
  r.add_panel(Chart{"largest |logit difference| per step, cached vs recomputed", "decoding step", "max |dlogit| (a gap: exactly 0)", false, true, diffs,
                    {}, Chart::Corner::BottomRight});
  r.add_panel(Chart{fmt::format("self-attention cache of {} rows", s.rows), "positions held", "KiB", true, true, bytes, x, Chart::Corner::TopLeft});
}

void describe(const Settings& s, const NoContext&, const Grid<Measured>& g, Report& r) {
  describe_exact(s, g, r);
  describe_timing(s, g, r);
  describe_figure(s, g, r);
}

// The exact checks over every seed: a sum of differing tokens, or the largest difference.
double tokens_f64(const Grid<Measured>& g) {
  int64_t n = 0;
  for (const Measured* m : g.of("float64")) n += m->exact.cached_tokens + m->exact.alone_tokens + m->exact.library_tokens;
  return static_cast<double>(n);
}
double worst_logits(const Grid<Measured>& g, const char* dtype) {
  double w = 0;
  for (const Measured* m : g.of(dtype)) w = std::max({w, m->exact.cached_diff, m->exact.alone_diff});
  return w;
}
double worst_bytes(const Grid<Measured>& g) {
  int64_t w = 0;
  for (const char* d : kDtypes)
    for (const Measured* m : g.of(d)) w = std::max(w, m->bytes.worst);
  return static_cast<double>(w);
}

std::vector<ClaimDef<Measured>> claims(const Settings&) {
  using V = SeedView<Measured>;
  using G = Grid<Measured>;
  return {
      {.spec = {.id = "exponent_gap", .kind = ClaimKind::Paper,
                .statement = "a decoding step's time grows with its position t about one power of t faster recomputed than cached: the fitted "
                             "exponent a (time ~ t^a over the sweep of t) of the recomputed step minus the cached step's",
                .side = Compare::Above, .threshold = 0.5,
                .source = "Shazeer 2019, Section 2.4: with the cache a step does Theta(d^2) work in the projections and Theta(t d) in attention; "
                          "recomputing redoes every earlier position, Theta(t d^2) + Theta(t^2 d). Exponents 0 against 1 where the projections "
                          "dominate, 1 against 2 where attention does: a gap of 1 either way; 0.5 leaves half of it to the fixed costs of a step",
                .control_targets = true, .min_effect = 0.25,
                .min_effect_reason = "half the way from the threshold (0.5) to the paper's gap of one power of t", .pilot_sd = 0.0258, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("timing").timing.slope_recomputed - v("timing").timing.slope_cached; },
       .evidence = [](const G&, const std::vector<double>& x) { return fmt::format("recomputed minus cached exponent per seed: {:.2f}", fmt::join(x, ", ")); }},
      {.spec = {.id = "speedup_longest", .kind = ClaimKind::Paper,
                .statement = "at the longest position of the sweep a recomputed step takes more than 10 times as long as a cached one",
                .side = Compare::Above, .threshold = 10,
                .source = "a recomputed step at position t runs every product on t rows, a cached one on one row (Shazeer 2019, Section 2.4): "
                          "ideally about t (512 at the default sweep's end); 10 leaves a factor of 50 for the cached step's fixed costs "
                          "(dispatching some 40 small operations)",
                .control_targets = true, .min_effect = 4.5, .min_effect_reason = "half the threshold's distance from no speed-up (a ratio of 1)",
                .pilot_sd = 14.4, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("timing").timing.recomputed.back() / v("timing").timing.cached.back(); },
       .evidence = [](const G&, const std::vector<double>& x) {
         return fmt::format("recomputed / cached at the longest t per seed: {:.1f}", fmt::join(x, ", "));
       }},
      {.spec = {.id = "tokens_f64", .kind = ClaimKind::Check,
                .statement = "in float64 greedy decoding picks the same tokens cached as recomputed, alone as in a padded batch, and through "
                             "translate_batch with and without the cache (the count of tokens that differ)",
                .side = Compare::Below, .threshold = 0.5,
                .source = "both ways compute the same function; float64 rounding (~1e-15 relative) could flip an argmax only where two logits are "
                          "that close (docs/testing.md, Results across OpenBLAS kernels)",
                .control_targets = false},
       .joint = tokens_f64,
       .evidence = [](const G& g, const auto&) {
         return fmt::format("{} differing tokens over {} seeds (cached vs recomputed, alone vs batch, translate_batch)", tokens_f64(g), g.seeds());
       }},
      {.spec = {.id = "logits_f64", .kind = ClaimKind::Check,
                .statement = "in float64 the logits agree to rounding: the largest difference, cached against recomputed and alone against in the "
                             "batch, over the largest logit",
                .side = Compare::Below, .threshold = 1e-10,
                .source = "tests/rounding.h's bound: some 33 products in sequence, of length at most 256, each off by at most 2 x 256 x 2^-53 = "
                          "5.7e-14 of its summed magnitudes: 1.9e-12, with room 50 for magnitudes above the logits'",
                .control_targets = false},
       .joint = [](const G& g) { return worst_logits(g, "float64"); },
       .evidence = [](const G& g, const auto&) { return fmt::format("largest relative logit difference {:.3g}", worst_logits(g, "float64")); }},
      {.spec = {.id = "logits_f32", .kind = ClaimKind::Check,
                .statement = "in float32 the logits agree to rounding (not to the bit: one row and t rows go through different BLAS calls): the "
                             "same relative difference",
                .side = Compare::Below, .threshold = 1e-3,
                .source = "the same bound in float32: 33 x 2 x 256 x 2^-24 = 1.0e-3 of the summed magnitudes (tests/rounding.h)",
                .control_targets = false},
       .joint = [](const G& g) { return worst_logits(g, "float32"); },
       .evidence = [](const G& g, const auto&) { return fmt::format("largest relative logit difference {:.3g}", worst_logits(g, "float32")); }},
      {.spec = {.id = "cache_bytes", .kind = ClaimKind::Check,
                .statement = "the cache holds 2 x layers x kv_heads x d_k x (bytes per value) per token and row: the largest |measured - formula| "
                             "in bytes, over the cache's buffers and decoding's DecodeStats",
                .side = Compare::Below, .threshold = 0.5,
                .source = "K and V are (rows, kv_heads, positions, d_k) in every layer (nn/kv_cache.h); the size Pope et al. 2022 give for the "
                          "KV cache",
                .control_targets = false},
       .joint = worst_bytes,
       .evidence = [](const G& g, const auto&) { return fmt::format("largest |measured - formula| {} bytes", worst_bytes(g)); }},
  };
}

}  // namespace

Lab kvcache_lab() {
  return make_lab(Experiment<Settings, NoContext, Measured>{
      .info = {.name = "kvcache",
               .title = "the KV cache: the same logits, linear instead of quadratic growth, and its bytes",
               .reference = "Shazeer 2019, arXiv:1911.02150 (incremental decoding, Section 2.4); Pope et al. 2022, arXiv:2211.05102 (the KV "
                            "cache's size)",
               .question = "Does decoding with a KV cache compute what recomputing the prefix computes, for a sentence alone and in a padded "
                           "batch; how does the time of a step grow with its position either way; and does the cache hold 2 x layers x "
                           "kv_heads x d_k values per token?",
               .default_seeds = 5,
               .ablation = "the KV cache disabled in both timing arms (both recompute the prefix)",
               .control_is_ablation = true},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = [](const Settings& s, Report& r) { introduce(s, r); return NoContext{}; },
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

// Lab `gqa`: grouped-query attention (Ainslie et al. 2023) against multi-head attention.
//
// With kv_heads < heads, keys and values are projected to kv_heads heads only and each group of
// G = heads / kv_heads query heads shares one: the KV cache shrinks by G, and so do the K/V
// projections. Ainslie et al. convert a multi-head checkpoint (each group's key and value heads
// mean-pooled into one) and uptrain it for a small share of the original steps; the grouped model
// then comes close to the multi-head model's quality at near multi-query speed (their Table 1);
// multi-query attention (kv_heads 1, Shazeer 2019) loses more.
//
// Here one arm, G, at every group size of --groups (1, 2, 4, 8 with 8 query heads: heads / G
// key/value heads). Per seed (the seed draws the synthetic task's data, the weights and the batch
// order): a multi-head translator trained --steps steps, shared by every G, converted to G and
// uptrained --uptrain steps on the same batches (G = 1 simply continues); the held-out quality (the
// dose-response: accuracy against log2 G, per seed), the KV cache's bytes per token, and the
// gradient a shared key/value head receives. That gradient is a sum: the expansion of a grouped
// model into a multi-head one with each key/value head copied to its group's query heads computes
// the same function, and each copy's gradient is one query head's part, so the shared head's
// gradient is their sum (an exact check), and its size against one part's measures how the group's
// query heads pull it (sqrt(G) when their parts are uncorrelated, G when they all agree). --scratch
// trains every arm from scratch instead.
// With --data DIR (lab/real_data.h) the task is that real translation task (the same data for every
// seed; the seed draws the weights and the batch order), and each arm's greedy BLEU on the validation
// split is reported beside its accuracy, as Ainslie et al. report BLEU on WMT (reported, not claimed).
// The placebo's null is one group size (the middle level), each run on its own seed, data and
// checkpoint, in every level's place: the quality trend's true value is then 0.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "lab/gqa.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

using S = GqaSettings;
using V = SeedView<GqaArm>;
using G = Grid<GqaArm>;

Fields<S> fields() {
  Fields<S> f = Fields<S>::nest(&S::task, task_fields());
  f.add({{"d-model", &S::d_model, "model width (FFN 4x)"},
         {"heads", &S::heads, "query heads"},
         {"groups", &S::groups, "the arms: query heads per key/value head G (4 or more, increasing, from 1,2 to --heads)"},
         {"layers", &S::layers, "encoder and decoder layers each"},
         {"steps", &S::steps, "training steps of the multi-head checkpoint"},
         {"uptrain", &S::uptrain, "steps of every arm after the conversion"},
         {"uptrain-lr", &S::uptrain_lr, "Adam learning rate after the conversion (a fresh optimizer, whose first steps are large)"},
         {"scratch", &S::scratch, "train every arm from scratch for steps + uptrain steps instead"},
         {"lr", &S::lr, "Adam learning rate (10% linear warm-up)"},
         {"max-tokens", &S::max_tokens, "padded tokens per batch"}});
  // --data: a real translation task in place of the synthetic one (lab/real_data.h)
  return f.add(Fields<S>::nest(&S::real, real_data_fields()));
}

void validate(const S& s) {
  GF_CHECK(s.steps >= 1 && s.uptrain >= 1, "lab gqa: --steps and --uptrain must be positive, got {} and {}", s.steps, s.uptrain);
  GF_CHECK(s.heads >= 1 && s.d_model % s.heads == 0, "lab gqa: --heads must divide --d-model, got {} for {}", s.heads, s.d_model);
  check_groups(s.groups, s.heads);
}

struct Context {
  std::shared_ptr<const RealData> real;                 // --data
  std::optional<uint64_t> seed;                         // whose data and checkpoint these are: every G of a seed starts from them
  std::shared_ptr<const IdData> data;                   // with --data: the real task, the same for every seed
  std::shared_ptr<const nn::Seq2SeqTransformer> start;  // the multi-head checkpoint (none with --scratch)
};

Context prepare(const S& s, Report& r) {
  Context c;
  if (s.real.given()) {
    c.real = std::make_shared<const RealData>(real_data(s.real, r));
    IdData d = c.real->ids;
    if (d.test.size() > static_cast<size_t>(s.task.eval)) d.test.resize(static_cast<size_t>(s.task.eval));
    c.data = std::make_shared<const IdData>(std::move(d));
    r.say(fmt::format("the real task above: {} held-out test pairs; Post-LN, d_model {}, {} query heads, {}+{} layers;", c.data->test.size(),
                      s.d_model, s.heads, s.layers, s.layers));
  } else {
    const TaskSettings& t = s.task;
    r.say(fmt::format("task {} over {} symbols, lengths {}-{}, {} training and {} held-out sequences; Post-LN, d_model {}, {} query heads, {}+{} layers;",
                      t.task, t.symbols, t.min_len, t.max_len, t.train, t.eval, s.d_model, s.heads, s.layers, s.layers));
  }
  if (s.scratch)
    r.say(fmt::format("Every arm trained from scratch for {} steps of Adam at lr {} (10% warm-up), {} tokens a batch, the same batches.",
                      s.steps + s.uptrain, s.lr, s.max_tokens));
  else
    r.say(fmt::format("Ainslie et al.'s recipe: a multi-head model trained {} steps (Adam, lr {}, 10% warm-up, {} tokens a batch), converted by "
                      "mean-pooling each group's key/value heads, then every arm uptrained {} steps on the same batches (a fresh Adam at lr {}, "
                      "10% warm-up).", s.steps, s.lr, s.max_tokens, s.uptrain, s.uptrain_lr));
  return c;
}

std::vector<ArmSpec> arms(const S& s) { return {{"G", std::vector<double>(s.groups.begin(), s.groups.end())}}; }

// A placebo pool's run (its own seed: its own data and checkpoint) stops at the held-out scores its claim reads.
GqaArm measure(const S& s, Context& c, const RunKey& k) {
  if (c.seed != k.seed) {
    if (!c.real) c.data = std::make_shared<const IdData>(s.task.make(k.seed));
    c.start = s.scratch ? nullptr : gqa_checkpoint(s, *c.data, k.seed);
    c.seed = k.seed;
  }
  return train_gqa_arm(s, *c.data, c.real.get(), s.heads / static_cast<int64_t>(k.cond.level), k.pool, k.seed, c.start.get());
}

const char* kArmColors[] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"};
constexpr size_t kColors = sizeof(kArmColors) / sizeof(kArmColors[0]);

std::string arm_name(const S& s, int64_t kv) {
  if (kv == s.heads) return fmt::format("multi-head ({} kv)", kv);
  if (kv == 1) return "multi-query (1 kv)";
  return fmt::format("grouped ({} kv)", kv);
}

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3f}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

// One group size's statistic, per seed; and its difference from the multi-head arm's (G = 1).
std::vector<double> per_seed(const G& g, int64_t G_, double (*f)(const GqaArm&)) {
  std::vector<double> v;
  for (const GqaArm* a : g.of("G", static_cast<double>(G_))) v.push_back(f(*a));
  return v;
}
std::vector<double> minus_multihead(const G& g, int64_t G_, double (*f)(const GqaArm&)) {
  std::vector<double> v;
  for (int i = 0; i < g.seeds(); ++i) v.push_back(f(g.at("G", static_cast<double>(G_), i)) - f(g.at("G", 1, i)));
  return v;
}
const GqaArm& first_seed(const G& g, int64_t G_) { return g.at("G", static_cast<double>(G_), 0); }

void describe_quality(const S& s, const Context& c, const G& g, Report& r) {
  r.section("held-out quality after the same steps on the same batches (mean [t 95% interval] over seeds)");
  Table q("quality", {"arm", "kv heads built", "parameters", s.scratch ? "-" : "accuracy just converted", "teacher-forced token accuracy",
                      "teacher-forced NLL", "free-running token accuracy", "free-running exact", "accuracy - multi-head's"});
  for (int64_t G_ : s.groups) {
    const GqaArm& a = first_seed(g, G_);
    q.row({arm_name(s, a.kv), a.kv_built, a.params,
           s.scratch ? std::string("-") : with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.converted.accuracy; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.tf.accuracy; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.tf.nll; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.fr.tokens; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.fr.exact; })),
           G_ > 1 ? with_interval(minus_multihead(g, G_, [](const GqaArm& x) { return x.tf.accuracy; }), "{:+.3f}") : std::string("-")});
  }
  r.print(q);
  if (c.real) {
    Table b("bleu", {"arm", fmt::format("greedy BLEU, first {} validation pairs", std::min<size_t>(static_cast<size_t>(s.task.eval), c.real->ids.valid.size())),
                     "BLEU - multi-head's"});
    for (int64_t G_ : s.groups)
      b.row({arm_name(s, first_seed(g, G_).kv), with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.bleu; }), "{:.2f}"),
             G_ > 1 ? with_interval(minus_multihead(g, G_, [](const GqaArm& x) { return x.bleu; }), "{:+.2f}") : std::string("-")});
    r.print(b);
    r.say("Token accuracy is position by position against the reference, a strict measure for real sentences; BLEU (sacreBLEU 13a) is reported, "
          "not claimed.");
  }
  int64_t stopped = 0;
  for (const GqaArm* a : g.all()) stopped += a->diverged;
  if (stopped) r.say(fmt::format("{} of the {} runs diverged (a non-finite loss) and stopped early.", stopped, g.all().size()));
  if (!s.scratch)
    r.say(fmt::format("Each seed's multi-head checkpoint ({} steps) pooled to each arm's key/value heads (the mean of a group's heads), then "
                      "{} more steps for every arm (the multi-head arm continues as it is).", s.steps, s.uptrain));
}

void describe_heads(const S& s, const G& g, Report& r) {
  r.section("the KV cache per target token (decoding's DecodeStats) against 2 x layers x kv_heads x d_k x 4 bytes");
  Table c("cache", {"arm", "kv heads built", "formula (bytes/token)", "measured self-attention", "measured cross-attention (per source token)",
                    "share of multi-head's"});
  for (int64_t G_ : s.groups) {
    const GqaArm& a = first_seed(g, G_);
    c.row({arm_name(s, a.kv), a.kv_built, a.formula, a.bytes_per_token, a.cross_bytes,
           static_cast<double>(a.bytes_per_token) / static_cast<double>(first_seed(g, 1).bytes_per_token)});
  }
  r.print(c);
  r.section("a shared key/value head's gradient against one query head's part of it (one batch, float64; mean [t 95%] over seeds)");
  Table t("shared head", {"arm", "G (query heads per kv head)", "init: |g_shared| / mean |g_part|", "init: cosine between parts",
                          "trained: |g_shared| / mean |g_part|", "trained: cosine", "largest |g_shared - sum of parts| / |g_shared|"});
  for (int64_t G_ : s.groups) {
    double worst = 0;
    for (const GqaArm* a : g.of("G", static_cast<double>(G_))) worst = std::max({worst, a->init.sum_difference, a->trained.sum_difference});
    const GqaArm& a = first_seed(g, G_);
    t.row({arm_name(s, a.kv), s.heads / a.kv_built, with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.init.ratio; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.init.cosine; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.trained.ratio; })),
           with_interval(per_seed(g, G_, [](const GqaArm& x) { return x.trained.cosine; })), worst});
  }
  r.print(t);
  r.say("g_part: the gradient of one query head's copy of the key/value head in the multi-head expansion (the same function);");
  r.say("G parts that are uncorrelated add to sqrt(G) times one part; parts that agree, to G times.");
}

void describe_figure(const S& s, const G& g, Report& r) {
  // Training loss, mean over seeds, as a moving average.
  std::vector<ChartSeries> curves;
  const int64_t length = s.scratch ? s.steps + s.uptrain : s.uptrain;
  const size_t window = static_cast<size_t>(std::max<int64_t>(1, length / 20));
  for (size_t k = 0; k < s.groups.size(); ++k) {
    std::vector<std::vector<double>> l;
    for (const GqaArm* a : g.of("G", static_cast<double>(s.groups[k]))) {
      auto v = a->losses;
      v.resize(static_cast<size_t>(length), NAN);
      l.push_back(v);
    }
    const auto m = means(spread_per_column(l));
    ChartSeries c{arm_name(s, first_seed(g, s.groups[k]).kv), {}, {}, {}, {}, false, kArmColors[k % kColors]};
    for (size_t i = window - 1; i < m.size(); ++i) {
      double a = 0;
      for (size_t j = 0; j < window; ++j) a += m[i - j] / static_cast<double>(window);
      c.x.push_back(static_cast<double>(i + 1)), c.y.push_back(a);
    }
    curves.push_back(c);
  }
  r.add_panel(Chart{fmt::format("{} loss ({}-step average, mean of seeds)", s.scratch ? "training" : "uptraining", window),
                    s.scratch ? "step" : "step after the conversion", "cross-entropy", false, true, curves, {}, Chart::Corner::TopRight});
  std::vector<double> x, gx;
  for (int64_t G_ : s.groups) x.push_back(static_cast<double>(first_seed(g, G_).kv)), gx.push_back(static_cast<double>(s.heads / first_seed(g, G_).kv_built));
  auto column = [&](double (*f)(const GqaArm&)) {
    std::vector<std::vector<double>> rows(static_cast<size_t>(g.seeds()));
    for (int i = 0; i < g.seeds(); ++i)
      for (int64_t G_ : s.groups) rows[static_cast<size_t>(i)].push_back(f(g.at("G", static_cast<double>(G_), i)));
    return spread_per_column(rows);
  };
  r.add_panel(Chart{"held-out accuracy after the same steps (band: seeds)", "key/value heads", "accuracy", true, false,
                    {band_series("teacher-forced tokens", x, column([](const GqaArm& a) { return a.tf.accuracy; }), "#1f77b4"),
                     band_series("free-running tokens", x, column([](const GqaArm& a) { return a.fr.tokens; }), "#ff7f0e"),
                     band_series("free-running exact", x, column([](const GqaArm& a) { return a.fr.exact; }), "#2ca02c", true)},
                    x, Chart::Corner::BottomLeft});
  ChartSeries sq{"sqrt(G): uncorrelated parts", gx, {}, {}, {}, true, "#7f7f7f"}, lin{"G: parts that agree", gx, gx, {}, {}, true, "#bbbbbb"};
  for (double v : gx) sq.y.push_back(std::sqrt(v));
  r.add_panel(Chart{"shared kv head's gradient / one query head's part (band: seeds)", "G = heads / kv heads", "ratio", true, true,
                    {band_series("at initialisation", gx, column([](const GqaArm& a) { return a.init.ratio; }), "#9467bd"),
                     band_series("trained", gx, column([](const GqaArm& a) { return a.trained.ratio; }), "#8c564b"), sq, lin},
                    gx, Chart::Corner::TopLeft});
  ChartSeries measured{"measured (DecodeStats)", x, {}, {}, {}, false, "#1f77b4"}, formula{"2 x layers x kv x d_k x 4", x, {}, {}, {}, true, "#7f7f7f"};
  for (int64_t G_ : s.groups)
    measured.y.push_back(static_cast<double>(first_seed(g, G_).bytes_per_token)), formula.y.push_back(static_cast<double>(first_seed(g, G_).formula));
  r.add_panel(Chart{"self-attention KV cache per target token", "key/value heads", "bytes", true, true, {measured, formula}, x, Chart::Corner::TopLeft});
}

void describe(const S& s, const Context& c, const G& g, Report& r) {
  describe_quality(s, c, g, r);
  describe_heads(s, g, r);
  describe_figure(s, g, r);
}

// The exact checks over every run of every seed.
double worst_sum(const G& g) {
  double w = 0;
  for (const GqaArm* a : g.all()) w = std::max({w, a->init.sum_difference, a->trained.sum_difference, a->init.loss_difference, a->trained.loss_difference});
  return w;
}
double worst_bytes(const G& g) {
  int64_t w = 0;
  for (const GqaArm* a : g.all()) w = std::max({w, std::abs(a->bytes_per_token - a->formula), std::abs(a->cross_bytes - a->formula)});
  return static_cast<double>(w);
}

std::vector<ClaimDef<GqaArm>> claims(const S& s) {
  const double mqa = static_cast<double>(s.groups.back());
  const Condition middle{"G", static_cast<double>(s.groups[s.groups.size() / 2])};
  const int64_t heads = s.heads;
  const std::vector<int64_t> groups = s.groups;
  auto ratio_line = [heads](double G_, std::string what) {
    return [heads, G_, what](const G& g, const std::vector<double>& x) {
      return fmt::format("{} (G {}): |g_shared| / mean |g_part| per seed at initialisation: {:.2f}", what, heads / g.at("G", G_, 0).kv_built,
                         fmt::join(x, ", "));
    };
  };
  return {
      {.spec = {.id = "gqa_quality_trend", .kind = ClaimKind::Paper,
                .statement = "quality falls as more query heads share a key/value head: over G = 1, 2, 4, 8 query heads per key/value head (--groups), "
                             "each converted from the multi-head checkpoint and uptrained as long as the multi-head model trains on, the "
                             "least-squares slope of held-out teacher-forced token accuracy per doubling of G is below -0.01",
                .side = Compare::Below, .threshold = -0.01,
                .source = "Ainslie et al. 2023, Table 1 (quality falls from multi-head through GQA-8 to multi-query: 47.2, 47.1, 46.6 average at "
                          "XXL). Their fall is a fraction of a point over six doublings at 64 heads; -0.01 (one accuracy point per doubling) is "
                          "the smallest fall this lab cares about, so a placebo's zero trend cannot pass. Written before the first run at these "
                          "levels, knowing the three-arm version's numbers (4 heads: -1.9 points at G 2, -17.5 at G 4)",
                .control_targets = true, .min_effect = 0.005, .min_effect_reason = "half the threshold's distance from no trend (0)",
                .pilot_sd = 0.028, .pilot_n = 5},
       .trend = TrendDef<GqaArm>{"G", "G", [](const GqaArm& a) { return a.tf.accuracy; }, TrendKind::LogSlope,
                                 "G = query heads per key/value head (log)", "held-out teacher-forced token accuracy", true, "#d62728"},
       .evidence = [groups](const G&, const std::vector<double>& x) {
         return fmt::format("slope of teacher-forced token accuracy per doubling of G over G = {}, per seed: {:+.4f}", fmt::join(groups, ", "),
                            fmt::join(x, ", "));
       },
       .null = middle},
      {.spec = {.id = "gqa_near_mha", .kind = ClaimKind::Paper,
                .statement = "grouped-query attention with heads/2 key/value heads, converted from the multi-head checkpoint and uptrained as long "
                             "as the multi-head model trains on, stays near its quality: held-out teacher-forced token accuracy, grouped minus "
                             "multi-head",
                .side = Compare::Above, .threshold = -0.05,
                .source = "Ainslie et al. 2023, abstract and Table 1: uptrained GQA reaches quality close to multi-head attention (within a fraction "
                          "of a point of its average score), multi-query loses more. Here at a tiny size, so 5 accuracy points is a loose reading "
                          "of 'close'",
                .control_targets = false, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.025,
                .min_effect_reason = "half the way from the threshold (-0.05) to the paper's 'close' (0)", .pilot_sd = 0.00862, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("G", 2).tf.accuracy - v("G", 1).tf.accuracy; },
       .evidence = [heads](const G&, const std::vector<double>& x) {
         return fmt::format("teacher-forced token accuracy, {} kv heads minus {}, per seed: {:+.3f}", heads / 2, heads, fmt::join(x, ", "));
       },
       .no_placebo = "a claim of no large loss (above a negative threshold): a placebo's zero difference is what it claims"},
      {.spec = {.id = "shared_grad_g2", .kind = ClaimKind::Check,
                .statement = "a key/value head shared by G = 2 query heads gets more gradient than one query head's part of it: |g_shared| / mean "
                             "|g_part| at initialisation",
                .side = Compare::Above, .threshold = 1.2,
                .source = "the shared head's gradient is the sum of its G query heads' parts (the group_sum check); at initialisation the query "
                          "heads' weights are independent, so their parts add like uncorrelated vectors, to sqrt(2) = 1.41 times one of equal "
                          "size; 1.2 allows some anticorrelation. A check, not evidence: arithmetic on independent random vectors, required of "
                          "every seed (issue 35)",
                .control_targets = false},
       .per_seed = [](const V& v) { return v("G", 2).init.ratio; },
       .evidence = ratio_line(2, fmt::format("{} kv heads", heads / 2))},
      {.spec = {.id = "shared_grad_mqa", .kind = ClaimKind::Check,
                .statement = "with one key/value head for all heads (multi-query, G = heads = 8 by default) the same ratio",
                .side = Compare::Above, .threshold = 1.6,
                .source = "as shared_grad_g2: sqrt(G) for uncorrelated parts of equal size (2 at G 4, 2.83 at G 8); 1.6 allows some "
                          "anticorrelation at any G from 4. A check, not evidence: arithmetic on independent random vectors, required of every "
                          "seed (issue 35)",
                .control_targets = false},
       .per_seed = [mqa](const V& v) { return v("G", mqa).init.ratio; },
       .evidence = ratio_line(mqa, "1 kv head")},
      {.spec = {.id = "group_sum", .kind = ClaimKind::Check,
                .statement = "the grouped model and its multi-head expansion (each key/value head copied to its query heads) give the same loss, "
                             "and a shared head's gradient is the sum of its copies' (largest relative difference, float64)",
                .side = Compare::Below, .threshold = 1e-10,
                .source = "the expansion computes the same function; the chain rule sums the copies' gradients; only float64 rounding (~1e-15) "
                          "separates them",
                .control_targets = false},
       .joint = worst_sum,
       .evidence = [](const G& g, const auto&) {
         return fmt::format("largest relative difference (losses, and shared gradient against the sum of its parts) {:.3g}", worst_sum(g));
       }},
      {.spec = {.id = "cache_bytes", .kind = ClaimKind::Check,
                .statement = "decoding's KV cache per token (DecodeStats, self- and cross-attention) is 2 x layers x kv_heads x d_k x 4 bytes for "
                             "every arm: the largest |measured - formula| in bytes",
                .side = Compare::Below, .threshold = 0.5,
                .source = "K and V are (rows, kv_heads, positions, d_k) in every layer: the cache shrinks by G = heads / kv_heads (Ainslie et al. "
                          "2023, Section 2.2)",
                .control_targets = false},
       .joint = worst_bytes,
       .evidence = [](const G& g, const auto&) { return fmt::format("largest |measured - formula| {} bytes", worst_bytes(g)); }},
  };
}

}  // namespace

Lab gqa_lab() {
  return make_lab(Experiment<S, Context, GqaArm>{
      .info = {.name = "gqa",
               .title = "grouped-query attention: quality, cache bytes, and the shared head's gradient",
               .reference = "Ainslie et al. 2023, arXiv:2305.13245 (Sections 2.1-2.2, Table 1); Shazeer 2019, arXiv:1911.02150 (multi-query)",
               .question = "A multi-head checkpoint converted to G = 1, 2, 4, 8 query heads per key/value head and uptrained as long as the "
                           "multi-head model trains on: how does quality fall with G, does grouped-query attention (G = 2) stay near multi-head "
                           "quality while its cache shrinks by G, and how does a shared key/value head's gradient compare with one query head's "
                           "part of it?",
               .default_seeds = 5,
               .null = {"G", 4},
               .null_description = "the middle group size of --groups (G = 4 by default), with its own data and checkpoint"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

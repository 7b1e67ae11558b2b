// Lab `depth`: what depth does to a Transformer at initialisation.
//
// (a) Amplification (Liu et al. 2020, "Admin", arXiv:2004.08249, Theorem 2): a small relative
//     change of every layer's weights changes the output of an N-layer Post-LN Transformer by
//     Var[F(x, W) - F(x, W*)] = O(N), of a Pre-LN one by O(log N): Post-LN's output depends
//     heavily on every residual branch, which amplifies parameter updates.
// (b) Rank collapse (Dong et al. 2021, arXiv:2103.03404): pure attention, without skip connections
//     or MLPs, loses rank doubly exponentially with depth: every token's representation converges
//     to the same vector. Skip connections prevent it.
// (c) Vanishing query/key gradients (Noci et al. 2022, arXiv:2206.03126, section 3): where the
//     tokens have collapsed, the gradient of the queries' and keys' weights vanishes while that
//     of the values' does not.
//
// Here: arms Post-LN and Pre-LN, whose levels are the depths N of a translator (layers per stack)
// on one batch of the built-in corpus, the same for every seed, each run the rms relative output
// change over --draws random weight changes (a); arms "no skip" and "skip", a stack of
// attention-only layers in float64 without or with skip connections (b, c). The measurements are in
// lab/parts/depth_measures.cpp (lab/depth.h).
#include <fmt/format.h>

#include <cmath>

#include "lab/common.h"
#include "lab/depth.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

struct Settings {
  int64_t pairs = 500, d_model = 64, heads = 4, ff = 256, max_tokens = 512;
  std::vector<int64_t> depths{1, 2, 4, 8, 16, 32};
  double eps = 0.01;
  int64_t draws = 3;
  int64_t attn_layers = 12, attn_d_model = 64, attn_heads = 4, tokens = 16, attn_batch = 8;
};

Fields<Settings> fields() {
  using S = Settings;
  return {{"pairs", &S::pairs, "built-in corpus pairs for (a)"},
          {"d-model", &S::d_model, "(a) model width"},
          {"heads", &S::heads, "(a) attention heads"},
          {"ff", &S::ff, "(a) FFN width"},
          {"max-tokens", &S::max_tokens, "(a) tokens in the batch"},
          {"depths", &S::depths, "(a) layers per stack: the dose-response's levels (4 or more, increasing)"},
          {"eps", &S::eps, "(a) relative size of the weight change"},
          {"draws", &S::draws, "(a) random weight changes per model"},
          {"attn-layers", &S::attn_layers, "(b, c) attention-only layers"},
          {"attn-d-model", &S::attn_d_model, "(b, c) width"},
          {"attn-heads", &S::attn_heads, "(b, c) heads"},
          {"tokens", &S::tokens, "(b, c) tokens per sequence"},
          {"attn-batch", &S::attn_batch, "(b, c) sequences"}};
}

void validate(const Settings& s) {
  const std::string text = fmt::format("{}", fmt::join(s.depths, ","));
  for (size_t k = 0; k < s.depths.size(); ++k) {
    GF_CHECK(s.depths[k] >= 1, "lab depth: --depths expects positive integers separated by commas, got '{}'", text);
    GF_CHECK(k == 0 || s.depths[k] > s.depths[k - 1], "lab depth: --depths must increase, got '{}'", text);
  }
  GF_CHECK(s.depths.size() >= 4, "lab depth: --depths needs 4 or more depths for the dose-response, got '{}'", text);
  GF_CHECK(s.draws >= 1, "lab depth: --draws must be at least 1, got {}", s.draws);
}

// The batch every translator of (a) is measured on.
struct Context {
  IdData data;
  train::Batch batch;
};

Context prepare(const Settings& s, Output&) {
  Context c{builtin_corpus(s.pairs, 1), {}};
  c.batch = batches(c.data.train, s.max_tokens, 1).front();
  return c;
}

// One run: (a) a translator's rms relative output change, or (b, c) an attention-only stack.
struct Measured {
  double change = NAN;
  AttentionStack stack;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (m.stack.res.empty()) j = {{"relative_change", m.change}};
  else j = {{"res", m.stack.res}, {"q_over_v", m.stack.q_over_v}, {"k_over_v", m.stack.k_over_v}};
}

std::vector<double> levels(const Settings& s) { return {s.depths.begin(), s.depths.end()}; }

std::vector<ArmSpec> arms(const Settings& s) { return {{"Post-LN", levels(s)}, {"Pre-LN", levels(s)}, {"no skip", {}}, {"skip", {}}}; }

// The rms over --draws random directions of the relative output change of an N-layer model.
double rms_change(const Settings& s, const Context& c, int64_t N, bool pre_ln, uint64_t seed) {
  nn::Seq2SeqTransformer model(small_model(c.data, s.d_model, s.heads, N, s.ff, pre_ln), seed);
  model.eval();
  double sq = 0;
  for (int64_t k = 0; k < s.draws; ++k) {
    const double ch = relative_output_change(model, c.batch, s.eps, seed * 7919 + static_cast<uint64_t>(k));
    sq += ch * ch / static_cast<double>(s.draws);
  }
  return std::sqrt(sq);
}

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  const std::string& arm = k.cond.arm;
  if (arm == "Post-LN" || arm == "Pre-LN") return {rms_change(s, c, static_cast<int64_t>(k.cond.level), arm == "Pre-LN", k.seed), {}};
  return {NAN, attention_stack(s.attn_layers, arm == "skip", s.attn_d_model, s.attn_heads, s.tokens, s.attn_batch, k.seed * 104729 + 17)};
}

// ---------------------------------------------------------------- statistics

using V = SeedView<Measured>;
const char* kPostColor = "#d62728";
const char* kPreColor = "#1f77b4";
const char* const kLn[] = {"Post-LN", "Pre-LN"};

// sum_{i <= N} 1/i for each N of `depths` (Admin's Pre-LN sum, ~ ln N + 0.58).
std::vector<double> harmonic_numbers(const std::vector<int64_t>& depths) {
  std::vector<double> out;
  for (int64_t N : depths) {
    double h = 0;
    for (int64_t i = 1; i <= N; ++i) h += 1.0 / static_cast<double>(i);
    out.push_back(h);
  }
  return out;
}

// Admin's Theorem 2: Var[dF] ~ sum_i beta_i^2 with beta_i^2 ~ 1 (Post-LN: O(N)) or ~ 1/i (Pre-LN:
// sum_{i <= N} 1/i, O(log N)). Over these depths those laws have log-log slopes 1 and log_law_slope;
// a seed's slope is read against their midpoint.
double log_law_slope(const Settings& s) { return loglog_slope(levels(s), harmonic_numbers(s.depths)); }
double midpoint(const Settings& s) { return 0.5 * (1 + log_law_slope(s)); }

// The dose-response on depth, one seed: log2 of the squared change at each depth, and its slope on
// log2(N) (the exponent of a power law in N; depth multiplies: the levels are doublings).
std::vector<double> log_sq_change(const V& v, const std::string& arm, const Settings& s) {
  std::vector<double> lg;
  for (double N : levels(s)) lg.push_back(std::log2(v(arm, N).change * v(arm, N).change));
  return lg;
}
double depth_slope(const V& v, const std::string& arm, const Settings& s) { return trend(levels(s), log_sq_change(v, arm, s), TrendKind::LogSlope); }

// sqrt((|gW_Q|^2 + |gW_K|^2) / 2) / |gW_V| of layer l.
double qk_over_v(const AttentionStack& a, size_t l) {
  return std::sqrt(0.5 * (a.q_over_v[l] * a.q_over_v[l] + a.k_over_v[l] * a.k_over_v[l]));
}
// (c) is read at the deepest layer whose input (no skips) is still far from rank 1: res above 1e-6,
// far above float64's rounding floor of about 1e-16. Layer l's input is res[l].
constexpr double kFloorRes = 1e-6;
size_t vanish_layer(const AttentionStack& no_skip) {
  size_t layer = 0;
  for (size_t l = 0; l < no_skip.q_over_v.size(); ++l)
    if (no_skip.res[l] > kFloorRes) layer = l;
  return layer;
}

std::vector<double> each_seed(const Grid<Measured>& g, const std::function<double(const V&)>& f) {
  std::vector<double> out;
  for (int i = 0; i < g.seeds(); ++i) out.push_back(f(g.seed(i)));
  return out;
}

// ---------------------------------------------------------------- tables and panels

void describe_amplification(const Settings& s, const Context& c, const Grid<Measured>& g, Report& r) {
  const std::vector<double> x = levels(s);
  r.section(fmt::format("(a) |F(x, W + dW) - F(x, W)| / |F(x, W)| with each stack parameter moved by {} x |W| (rms over {} draws; mean [min, max] over seeds)",
                        s.eps, s.draws));
  r.say(fmt::format("translator on one batch of the built-in corpus ({} sentences), d_model {}, {} heads, FFN {}; N layers in each stack; F: the logits",
                    c.batch.rows, s.d_model, s.heads, s.ff));
  std::vector<Spread> change[2];
  double slope_sq[2];
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> rows(static_cast<size_t>(g.seeds()));
    for (int i = 0; i < g.seeds(); ++i)
      for (double N : x) rows[static_cast<size_t>(i)].push_back(g.at(kLn[pre], N, i).change);
    change[pre] = spread_per_column(rows);
    std::vector<double> sq;
    for (const auto& v : change[pre]) sq.push_back(v.mean * v.mean);
    slope_sq[pre] = loglog_slope(x, sq);
  }
  Table t("amplification", {"N", "Post-LN", "Post-LN min", "Post-LN max", "Pre-LN", "Pre-LN min", "Pre-LN max", "Post/Pre"});
  for (size_t k = 0; k < x.size(); ++k)
    t.row({s.depths[k], change[0][k].mean, change[0][k].min, change[0][k].max, change[1][k].mean, change[1][k].min, change[1][k].max,
           change[0][k].mean / change[1][k].mean});
  r.print(t);
  r.say(fmt::format("log-log slope of the squared change (Admin's Var) on N: Post-LN {:.3f} (Theorem 2: 1, O(N)), Pre-LN {:.3f} (O(log N))",
                    slope_sq[0], slope_sq[1]));
  std::vector<Spread> sq[2];
  for (int pre = 0; pre < 2; ++pre)
    for (const auto& v : change[pre]) sq[pre].push_back({v.mean * v.mean, 0, v.min * v.min, v.max * v.max});
  ChartSeries lin{"~ N", x, {}, {}, {}, true, kPostColor};
  ChartSeries lg{"~ sum 1/i (log N)", x, {}, {}, {}, true, kPreColor};
  const std::vector<double> h = harmonic_numbers(s.depths);
  for (size_t k = 0; k < x.size(); ++k) {
    lin.y.push_back(sq[0].back().mean * x[k] / x.back());
    lg.y.push_back(sq[1].back().mean * h[k] / h.back());
  }
  r.add_panel(Chart{fmt::format("(a) output change, weights moved by {}", s.eps), "layers N", "|dF|^2 / |F|^2 (band: seeds)", true, true,
                    {band_series("Post-LN", x, sq[0], kPostColor), band_series("Pre-LN", x, sq[1], kPreColor), lin, lg}, x});
  auto& j = r.data()["amplification"];
  j["depths"] = s.depths;
  j["eps"] = s.eps;
  for (int pre = 0; pre < 2; ++pre) j[kLn[pre]] = {{"relative_change_mean", means(change[pre])}, {"slope_squared", slope_sq[pre]}};
}

void describe_collapse(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("(b) rank collapse and (c) query/key against value gradients through {} attention-only layers (d_model {}, {} heads, {} tokens, {} sequences, float64)",
                        s.attn_layers, s.attn_d_model, s.attn_heads, s.tokens, s.attn_batch));
  r.say("res: |X - 1 x^T| / |X| of the layer's output (layer 0: the input), mean [min, max] over seeds; QK/V: sqrt((|gW_Q|^2 + |gW_K|^2) / 2) / |gW_V|");
  r.say("of that layer's in_proj_weight for the loss <X_L, R>, R ~ N(0, 1)");
  std::vector<Spread> res[2], qk[2], q[2], k[2];  // [skip] per layer, over seeds
  for (int skip = 0; skip < 2; ++skip) {
    std::vector<std::vector<double>> rs, qks, qs, ks;
    for (const Measured* m : g.of(skip ? "skip" : "no skip")) {
      rs.push_back(m->stack.res), qs.push_back(m->stack.q_over_v), ks.push_back(m->stack.k_over_v);
      qks.emplace_back();
      for (size_t l = 0; l < m->stack.q_over_v.size(); ++l) qks.back().push_back(qk_over_v(m->stack, l));
    }
    res[skip] = spread_per_column(rs), qk[skip] = spread_per_column(qks), q[skip] = spread_per_column(qs), k[skip] = spread_per_column(ks);
  }
  Table t("collapse", {"layer", "res no skip", "min", "max", "res skip", "min", "max", "QK/V no skip", "Q/V no skip", "K/V no skip", "QK/V skip"});
  for (int64_t l = 0; l <= s.attn_layers; ++l) {
    auto at = [&](const std::vector<Spread>& v) { return l > 0 ? Cell(v[static_cast<size_t>(l - 1)].mean) : Cell("-"); };
    const size_t u = static_cast<size_t>(l);
    t.row({l, res[0][u].mean, res[0][u].min, res[0][u].max, res[1][u].mean, res[1][u].min, res[1][u].max, at(qk[0]), at(q[0]), at(k[0]), at(qk[1])});
  }
  r.print(t);
  std::vector<double> x0, x1;
  for (int64_t l = 0; l <= s.attn_layers; ++l) x0.push_back(static_cast<double>(l));
  for (int64_t l = 1; l <= s.attn_layers; ++l) x1.push_back(static_cast<double>(l));
  r.add_panel(Chart{"(b) distance from rank 1, attention only", "layer", "res(X) (band: seeds)", false, true,
                    {band_series("no skip", x0, res[0], kPostColor), band_series("with skip", x0, res[1], kPreColor)}, x0, Chart::Corner::TopRight});
  ChartSeries input{"input's res, no skip", x1, {}, {}, {}, true, kPostColor};
  for (size_t l = 0; l + 1 < res[0].size(); ++l) input.y.push_back(res[0][l].mean);  // each layer's input
  r.add_panel(Chart{"(c) query/key against value gradients", "layer", "|g_QK| / |g_V| (band: seeds)", false, true,
                    {band_series("no skip", x1, qk[0], kPostColor), band_series("with skip", x1, qk[1], kPreColor), input}, x1,
                    Chart::Corner::BottomLeft});
  auto& j = r.data()["attention_only"];
  j["layers"] = s.attn_layers;
  for (int skip = 0; skip < 2; ++skip)
    j[skip ? "skip" : "no_skip"] = {{"res_mean", means(res[skip])}, {"qk_over_v_mean", means(qk[skip])}, {"q_over_v_mean", means(q[skip])},
                                    {"k_over_v_mean", means(k[skip])}};
}

// The two dose-responses on depth (their slopes are what the amplification claims read), and the
// comparison the lab does not claim.
void describe_trends(const Settings& s, const Grid<Measured>& g, Report& r) {
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> lg;
    for (int i = 0; i < g.seeds(); ++i) lg.push_back(log_sq_change(g.seed(i), kLn[pre], s));
    r.dose_response({fmt::format("depth, {}", kLn[pre]), "layers N", fmt::format("log2 |dF|^2 / |F|^2, {}", kLn[pre]), levels(s), lg,
                     TrendKind::LogSlope, true, pre ? kPreColor : kPostColor});
  }
  // Not a claim (see docs/labs.md's change log): whether Post-LN's slope is nearer O(N) than
  // O(log N); at 5 seeds its interval straddles the midpoint.
  const Interval iv = t_interval(each_seed(g, [&](const V& v) { return depth_slope(v, "Post-LN", s) - midpoint(s); }));
  r.say(fmt::format("not claimed: Post-LN's slope minus the midpoint, {:.3f} [{:.3f}, {:.3f}] (t 95%): O(N) against O(log N) is not settled at "
                    "this many seeds", iv.mean, iv.lo, iv.hi));
}

void describe(const Settings& s, const Context& c, const Grid<Measured>& g, Report& r) {
  describe_amplification(s, c, g, r);
  describe_collapse(s, g, r);
  describe_trends(s, g, r);
}

// ---------------------------------------------------------------- claims

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  const std::string one_arm = "one arm against a threshold, no contrast between arms";
  return {
      {.spec = {.id = "postln_amplifies_more", .kind = ClaimKind::Paper,
                .statement = "(a) Post-LN amplifies a weight change more with depth than Pre-LN: the log-log slope of the squared output change on N, "
                             "Post-LN minus Pre-LN, is above 0",
                .side = Compare::Above, .threshold = 0.0,
                .source = "Liu et al. 2020 (Admin), Theorem 2: Var of the output change O(N) for Post-LN, O(log N) for Pre-LN; 0: the sign",
                .control_targets = true, .min_effect = 0.3,
                .min_effect_reason = "half of Theorem 2's difference over depths 1-32: the linear law's slope (1) minus the log law's (0.40) is 0.60",
                .pilot_sd = 0.146, .pilot_n = 5},
       .per_seed = [s](const V& v) { return depth_slope(v, "Post-LN", s) - depth_slope(v, "Pre-LN", s); },
       .evidence = [s](const Grid<Measured>& g, const std::vector<double>&) {
         return fmt::format("slope of the squared change per seed, Post-LN {:.3f}; Pre-LN {:.3f}",
                            fmt::join(each_seed(g, [&](const V& v) { return depth_slope(v, "Post-LN", s); }), ", "),
                            fmt::join(each_seed(g, [&](const V& v) { return depth_slope(v, "Pre-LN", s); }), ", "));
       }},
      {.spec = {.id = "preln_nearer_log", .kind = ClaimKind::Paper,
                .statement = "(a) Pre-LN's squared output change grows only as O(log N): its log-log slope on N is nearer the log law's (sum of 1/i "
                             "over the same depths) than the linear law's (1): slope minus their midpoint is below 0",
                .side = Compare::Below, .threshold = 0.0,
                .source = "Liu et al. 2020 (Admin), Theorem 2; the midpoint between the two laws is the decision boundary (the lab's first version's)",
                .control_targets = false, .min_effect = 0.15,
                .min_effect_reason = "half the way from the midpoint (the threshold) to the log law's slope, 0.30 below it", .pilot_sd = 0.07,
                .pilot_n = 5},
       .per_seed = [s](const V& v) { return depth_slope(v, "Pre-LN", s) - midpoint(s); },
       .evidence = [s](const Grid<Measured>&, const std::vector<double>&) {
         return fmt::format("Pre-LN slope - midpoint per seed; O(N): slope 1; O(log N) (sum of 1/i) over these depths: {:.3f}; midpoint {:.3f}",
                            log_law_slope(s), midpoint(s));
       },
       .no_placebo = "one arm's trend against the midpoint between two laws, no contrast between arms"},
      {.spec = {.id = "collapse_without_skips", .kind = ClaimKind::Paper,
                .statement = "(b) pure attention without skip connections collapses the tokens to rank 1: log10 of res after the last layer over "
                             "the input's is below -2",
                .side = Compare::Below, .threshold = -2.0,
                .source = "Dong et al. 2021, Theorem 2.2 (convergence to rank 1, doubly exponential in depth); -2: below 1% of the input's, the "
                          "lab's threshold since its first version",
                .control_targets = true, .min_effect = 1.0, .min_effect_reason = "half the threshold's distance from no collapse (log10 ratio 0)",
                .pilot_sd = 0.0242, .pilot_n = 5},
       .per_seed = [](const V& v) { return std::log10(v("no skip").stack.res.back() / v("no skip").stack.res.front()); },
       .evidence = [](const Grid<Measured>&, const std::vector<double>& x) {
         return fmt::format("log10(res after the last layer / res of the input) without skips, per seed: {:.3g}", fmt::join(x, ", "));
       },
       .no_placebo = one_arm},
      {.spec = {.id = "skips_prevent_collapse", .kind = ClaimKind::Paper,
                .statement = "(b) with skip connections the tokens do not collapse: res after the last layer over the input's is above 0.3",
                .side = Compare::Above, .threshold = 0.3,
                .source = "Dong et al. 2021, section 3 (skip connections prevent the collapse); 0.3: the lab's threshold since its first version",
                .control_targets = false, .min_effect = 0.15, .min_effect_reason = "half the threshold's distance from full collapse (0)",
                .pilot_sd = 0.0087, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("skip").stack.res.back() / v("skip").stack.res.front(); },
       .evidence = [](const Grid<Measured>&, const std::vector<double>& x) {
         return fmt::format("res after the last layer / res of the input with skips, per seed: {:.3g}", fmt::join(x, ", "));
       },
       .no_placebo = one_arm},
      {.spec = {.id = "qk_gradients_vanish", .kind = ClaimKind::Paper,
                .statement = "(c) as the tokens collapse the query/key gradients vanish against the value gradients: at the deepest layer whose "
                             "input's res is above 1e-6, log10 of QK/V without skips over QK/V with skips is below -1",
                .side = Compare::Below, .threshold = -1.0,
                .source = "Noci et al. 2022, section 3 (Theorem 3.2: the gradients of the queries' and keys' weights vanish with the tokens' "
                          "spread). Read above res 1e-6 so that no number is at float64's rounding floor; -1: a tenth, the lab's earlier factor",
                .control_targets = true, .min_effect = 0.5,
                .min_effect_reason = "half the threshold's distance from no difference (log10 ratio 0)", .pilot_sd = 0.134, .pilot_n = 5},
       .per_seed = [](const V& v) {
         const AttentionStack &none = v("no skip").stack, &skip = v("skip").stack;
         const size_t l = vanish_layer(none);
         return std::log10(qk_over_v(none, l) / qk_over_v(skip, l));
       },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         std::vector<std::string> at;
         for (int i = 0; i < g.seeds(); ++i) {
           const AttentionStack &none = g.at("no skip", 0, i).stack, &skip = g.at("skip", 0, i).stack;
           const size_t l = vanish_layer(none);
           at.push_back(fmt::format("layer {} (input res {:.2g}): {:.3g} against {:.3g}", l + 1, none.res[l], qk_over_v(none, l), qk_over_v(skip, l)));
         }
         return fmt::format("QK/V without against with skips, per seed: {}", fmt::join(at, "; "));
       },
       .null = Condition{"skip", 0}},
  };
}

}  // namespace

Lab depth_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "depth",
               .title = "amplification and rank collapse with depth",
               .reference = "Liu et al. 2020, arXiv:2004.08249 (Admin, Theorem 2); Dong et al. 2021, arXiv:2103.03404; Noci et al. 2022, "
                            "arXiv:2206.03126",
               .question = "How much does a small change of the weights move the output of a deep Post-LN or Pre-LN Transformer, and how fast "
                           "do tokens become alike through attention-only layers, with and without skip connections?",
               .default_seeds = 6,
               .null = {"Pre-LN", 1},
               .null_description = "Pre-LN with one layer per stack in (a)'s conditions (qk_gradients_vanish: the attention stack with skips)"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

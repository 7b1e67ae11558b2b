// Lab `precision`: what bfloat16 does to gradient flow, and why mixed precision keeps three things
// in float32 (Micikevicius et al. 2018, arXiv:1710.03740; Kalamkar et al. 2019, arXiv:1905.12322).
//
// 1. Master weights. bfloat16 keeps 8 significant bits: a stored weight w moves only when its update
//    is at least about half its spacing, 2^-9 |w| (2^-8 to 2^-9 by where w sits in its binade). Adam's
//    updates are about the learning rate in size, so late in training, and for weights near 1 (the
//    LayerNorm gains) from the start, the updates of weights stored in bfloat16 round away and those
//    weights stop learning. The update/weight ratio per module, as `train --grad-stats` records it,
//    says which modules stall first. Two arms from the same start on the same batches: weights
//    stored in bfloat16 (every Adam step rounded back to bfloat16; arm stored-bf16), and a float32
//    master copy that Adam updates while each forward pass uses its bfloat16 rounding (mixed
//    precision; arm f32-master).
// 2. Range. float16's smallest subnormal is 2^-24 (a value below 2^-25 rounds to 0), bfloat16's
//    smallest normal is float32's 2^-126: the gradients of a trained model, the loss's gradient with
//    respect to the logits above all (a probability over the token count), reach below 2^-25, which is
//    why float16 training scales the loss and bfloat16 training does not. Read from the f32-master
//    arm's last step.
// 3. Reductions. A softmax's sum over L keys, accumulated in bfloat16, drops every term below half
//    an ulp of the running sum (2^-9 of it): at long length most of the terms. gradflow's bf16 runs the
//    score products in bfloat16 (float32 sums) and the softmax in float32. Arm softmax, whose levels
//    are the lengths L: arithmetic on random scores.
//
// The measurements are in lab/parts/precision_measures.cpp (lab/precision.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "lab/precision.h"
#include "lab/runner.h"
#include "train/loop/grad_stats.h"

namespace gf::lab {
namespace {

const char* const kStored = "stored-bf16";
const char* const kMaster = "f32-master";
const char* const kSoftmax = "softmax";
const std::string kStoredName = "bfloat16 weights";

struct Settings {
  int64_t pairs = 3000;
  BF16Training train;
  std::vector<int64_t> lengths{16, 64, 256, 1024};
  int64_t head_dim = 64, rows = 64;
  double score_sd = 2;
};

Fields<Settings> fields() {
  using S = Settings;
  using T = BF16Training;
  const Fields<T> training = {{"d-model", &T::d_model, "model width (2 heads, feed-forward 2x)"},
                              {"layers", &T::layers, "encoder and decoder layers each"},
                              {"steps", &T::steps, "Adam steps per arm"},
                              {"lr", &T::lr, "peak learning rate"},
                              {"warmup", &T::warmup, "warm-up steps, then 1/sqrt(step) decay (the trainer's schedule)"},
                              {"max-tokens", &T::max_tokens, "tokens per batch"},
                              {"eval-pairs", &T::eval_pairs, "held-out pairs for the NLL"}};
  Fields<S> f = {{"pairs", &S::pairs, "pairs of the built-in corpus (90% train)"}};
  f.add(Fields<S>::nest(&S::train, training));
  return f.add({{"lengths", &S::lengths, "softmax lengths (keys)"},
                {"head-dim", &S::head_dim, "d_k of the softmax section"},
                {"rows", &S::rows, "query rows per length"},
                {"score-sd", &S::score_sd, "standard deviation of the softmax section's scores"}});
}

void validate(const Settings& s) {
  const std::string text = fmt::format("{}", fmt::join(s.lengths, ","));
  for (size_t k = 0; k < s.lengths.size(); ++k) {
    GF_CHECK(s.lengths[k] >= 1, "lab precision: --lengths expects positive integers separated by commas, got '{}'", text);
    GF_CHECK(k == 0 || s.lengths[k] > s.lengths[k - 1], "lab precision: --lengths must increase, got '{}'", text);
  }
  GF_CHECK(s.lengths.size() >= 2, "lab precision: --lengths needs at least two values, got '{}'", text);
  GF_CHECK(s.train.steps >= 1, "lab precision: --steps must be at least 1, got {}", s.train.steps);
}

// One run: a training arm, or the softmax's errors at one length.
struct Measured {
  BF16Arm arm;
  SoftmaxErrors softmax;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (m.arm.losses.empty()) {
    j = {{"products", m.softmax.products}, {"all_bf16", m.softmax.all_bf16}};
    return;
  }
  std::vector<double> lost, ratio;
  for (const GroupStats& g : m.arm.groups) lost.push_back(g.lost_share()), ratio.push_back(g.ratio());
  j = {{"losses", m.arm.losses}, {"nll", m.arm.nll}, {"lost", m.arm.lost_share}, {"groups", m.arm.group_names}, {"group_lost", lost},
       {"group_update_weight_ratio", ratio}};
}

struct Context {
  IdData data;  // the built-in corpus, the same for every seed
};

Context prepare(const Settings& s, Output&) { return {builtin_corpus(s.pairs, 1)}; }

std::vector<ArmSpec> arms(const Settings& s) { return {{kStored, {}}, {kMaster, {}}, {kSoftmax, {s.lengths.begin(), s.lengths.end()}}}; }

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  if (k.cond.arm == kSoftmax) return {{}, softmax_errors(static_cast<int64_t>(k.cond.level), s.head_dim, s.rows, s.score_sd, k.seed)};
  const bool master = k.cond.arm == kMaster;
  return {train_bf16_arm(c.data, s.train, k.seed, master, master), {}};
}

// ---------------------------------------------------------------- tables and panels

std::vector<double> levels(const Settings& s) { return {s.lengths.begin(), s.lengths.end()}; }

// Every gradient of a master run's last step: the logits' and every parameter's.
std::vector<Tensor> all_grads(const BF16Arm& a) {
  std::vector<Tensor> all{a.logit_grad};
  for (const auto& [n, g] : a.param_grads) all.push_back(g);
  return all;
}

double tail_mean(const std::vector<double>& v) {
  const size_t n = std::min<size_t>(20, v.size());
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) / static_cast<double>(n);
}

void describe_master(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section(fmt::format("1. master weights: {} Adam steps, lr {} (warm-up {}, then 1/sqrt(step)); second half of training", s.train.steps,
                        s.train.lr, s.train.warmup));
  Table t1("master_weights", {"seed", "arm", "final loss (mean of last 20)", "held-out NLL", "updates lost to rounding"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* arm : {kStored, kMaster}) {
      const BF16Arm& a = g.at(arm, 0, i).arm;
      t1.row({static_cast<int64_t>(r.seed(i)), arm == kStored ? kStoredName : std::string("float32 master"), tail_mean(a.losses), a.nll, a.lost_share});
    }
  r.print(t1);
  const std::vector<std::string>& names = g.at(kMaster, 0, 0).arm.group_names;
  const size_t G = names.size();
  std::vector<double> ratio(G), lost(G), lost_master(G);
  const double n = static_cast<double>(g.seeds());
  for (size_t k = 0; k < G; ++k) {
    for (int i = 0; i < g.seeds(); ++i) {
      const BF16Arm &stored = g.at(kStored, 0, i).arm, &master = g.at(kMaster, 0, i).arm;
      ratio[k] += master.groups[k].ratio(), lost[k] += stored.groups[k].lost_share(), lost_master[k] += master.groups[k].lost_share();
    }
    ratio[k] /= n, lost[k] /= n, lost_master[k] /= n;
  }
  std::vector<size_t> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ratio[a] < ratio[b]; });
  Table t2("per_module", {"module group", "update/weight ratio", "updates lost, " + kStoredName, "updates lost, float32 master"});
  for (size_t k : order) t2.row({names[k], ratio[k], lost[k], lost_master[k]});
  r.print(t2);
  r.say(fmt::format("update/weight ratio: |p_after - p_before| / |p_before| of the float32 update, per step, as `train --grad-stats` "
                    "records it (mean over the second half and the seeds); an update below {:.2g} (2^-9) of its weight rounds away in "
                    "bfloat16.",
                    kBf16HalfSpacing));
  Chart loss{"training loss (mean over seeds; band: min..max)", "step", "loss", false, true, {}, {}, Chart::Corner::TopRight};
  std::vector<double> steps_x;
  for (int64_t k = 1; k <= s.train.steps; ++k) steps_x.push_back(static_cast<double>(k));
  for (const char* arm : {kStored, kMaster}) {
    std::vector<std::vector<double>> per_seed;
    for (const Measured* m : g.of(arm)) per_seed.push_back(m->arm.losses);
    loss.series.push_back(band_series(arm == kStored ? kStoredName : "float32 master", steps_x, spread_per_column(per_seed)));
  }
  r.add_panel(loss);
  Chart stall{"updates lost against the update/weight ratio, per module group", "update/weight ratio", "share of updates lost", true, false, {},
              {}, Chart::Corner::TopRight};
  ChartSeries st{kStoredName, {}, {}, {}, {}, false, ""}, ms{"float32 master", {}, {}, {}, {}, true, ""};
  for (size_t k : order) st.x.push_back(ratio[k]), st.y.push_back(lost[k]), ms.x.push_back(ratio[k]), ms.y.push_back(lost_master[k]);
  stall.series = {st, ms, {"2^-9", {kBf16HalfSpacing, kBf16HalfSpacing}, {0.0, 1.0}, {}, {}, true, "#888888"}};
  r.add_panel(stall);
}

void describe_range(const Grid<Measured>& g, Report& r) {
  r.section("2. range: the master arm's gradients at its last step, shares of the nonzero entries");
  Table t("range", {"tensor", "nonzero entries", "max |g|", "< 2^-25 (float16: 0)", "< 2^-14 (float16 subnormal)", "bfloat16: 0",
                    "loss scale for float16"});
  const BF16Arm& a = g.at(kMaster, 0, 0).arm;
  std::map<std::string, std::vector<Tensor>> by_group;
  std::vector<std::string> group_order;
  for (const auto& [n, grad] : a.param_grads) {
    const std::string grp = train::group_of(n);
    if (!by_group.count(grp)) group_order.push_back(grp);
    by_group[grp].push_back(grad);
  }
  std::vector<std::vector<double>> shares;
  std::vector<std::string> rows;
  auto row = [&](const std::string& name, const std::vector<Tensor>& parts) {
    const Range rg = range_of(parts);
    t.row({name, rg.nonzero, rg.max_abs, rg.fp16_zero, rg.fp16_subnormal, rg.bf16_zero, fmt::format("2^{}", loss_scale_exponent(parts))});
    rows.push_back(name);
    shares.push_back({rg.fp16_zero, rg.fp16_subnormal, rg.bf16_zero});
  };
  row("d loss / d logits", {a.logit_grad});
  for (const auto& grp : group_order) row(grp, by_group[grp]);
  r.print(t);
  r.say(fmt::format("seed {}'s; the loss is a mean over the batch's tokens, so d loss / d logits is (softmax - one-hot) / tokens. Loss "
                    "scale: the power of two that leaves fewer than 0.1% of the entries below 2^-25.",
                    r.seed(0)));
  r.add_panel(ValueMap{"gradient entries below each format's range (seed " + std::to_string(r.seed(0)) + ")", "", "", rows,
                       {"float16: 0", "float16 subnormal", "bfloat16: 0"}, shares, false, "share of nonzero entries", 0.0, 1.0});
}

void describe_softmax(const Settings& s, const Grid<Measured>& g, Report& r) {
  r.section("3. softmax over L keys: total variation distance from the exact weights (mean over query rows)");
  Table t("softmax_vs_length", {"L", "bf16 products, float32 softmax (gradflow)", "bfloat16 throughout (running sum in bfloat16)"});
  std::vector<double> products, all;
  for (double L : levels(s)) {
    double a = 0, b = 0;
    for (const Measured* m : g.of(kSoftmax, L)) a += m->softmax.products, b += m->softmax.all_bf16;
    a /= static_cast<double>(g.seeds()), b /= static_cast<double>(g.seeds());
    t.row({static_cast<int64_t>(L), a, b});
    products.push_back(a), all.push_back(b);
  }
  r.print(t);
  r.say(fmt::format("q, k ~ N(0, 1) with d_k {}, scores scaled to standard deviation {}; mean over {} rows and {} seeds.", s.head_dim, s.score_sd,
                    s.rows, g.seeds()));
  const std::vector<double> x = levels(s);
  r.add_panel(Chart{"softmax error against length (mean over seeds)", "keys L", "total variation distance", true, true,
                    {{"bf16 products, float32 softmax", x, products, {}, {}, false, ""}, {"bfloat16 throughout", x, all, {}, {}, false, ""}}, x,
                    Chart::Corner::TopLeft});
}

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  describe_master(s, g, r);
  describe_range(g, r);
  describe_softmax(s, g, r);
}

// ---------------------------------------------------------------- claims

using V = SeedView<Measured>;

// The softmax's error at the longest length over that at the shortest, one seed.
double growth(const V& v, const Settings& s, double SoftmaxErrors::*which) {
  return v(kSoftmax, levels(s).back()).softmax.*which / (v(kSoftmax, levels(s).front()).softmax.*which);
}

std::string per_seed_text(const std::string& what, const std::vector<double>& x) { return fmt::format("{}, per seed: {:.3g}", what, fmt::join(x, ", ")); }

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  const std::string one_arm = "one arm's statistic against its threshold, no contrast between arms";
  const std::string arithmetic = "arithmetic on random scores, no arms";
  const std::string lengths = fmt::format("error at L {} over L {}", s.lengths.back(), s.lengths.front());
  return {
      {.spec = {.id = "updates_round_away", .kind = ClaimKind::Paper,
                .statement = "with the weights stored in bfloat16 (no float32 master copy), a share above 0.25 of the nonzero Adam updates of the "
                             "second half of training round away: the stored weight does not change",
                .side = Compare::Above, .threshold = 0.25,
                .source = "Micikevicius et al. 2018, section 3.1 (an update below the weight's half spacing is lost: 2^-11 in float16, 2^-9 in "
                          "bfloat16's 8 bits); Adam's steps are about the learning rate; 0.25: the lab's threshold",
                .control_targets = true, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.125,
                .min_effect_reason = "half the threshold's distance from no update lost (0)", .pilot_sd = 0.00515, .pilot_n = 5},
       .per_seed = [](const V& v) { return v(kStored).arm.lost_share; },
       .evidence = [](const Grid<Measured>&, const std::vector<double>& x) { return per_seed_text("share of nonzero updates lost in the second half", x); },
       .no_placebo = one_arm},
      {.spec = {.id = "stall_follows_ratio", .kind = ClaimKind::Paper,
                .statement = "modules stall in the order of their update/weight ratio (`train --grad-stats`): Spearman's correlation across module "
                             "groups between that ratio and the share of their updates lost is below -0.5",
                .side = Compare::Below, .threshold = -0.5,
                .source = "Micikevicius et al. 2018, section 3.1: whether an update survives depends on its size relative to the weight's; -0.5: a "
                          "clear negative rank correlation, the lab's threshold",
                .control_targets = true, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.25,
                .min_effect_reason = "half the threshold's distance from no correlation (0)", .pilot_sd = 0.0577, .pilot_n = 5},
       .per_seed = [](const V& v) {
         std::vector<double> ratio, lost;
         for (size_t k = 0; k < v(kMaster).arm.groups.size(); ++k)
           ratio.push_back(v(kMaster).arm.groups[k].ratio()), lost.push_back(v(kStored).arm.groups[k].lost_share());
         return spearman(ratio, lost);
       },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>& x) {
         return per_seed_text(fmt::format("Spearman (update/weight ratio, share lost) across {} groups", g.at(kMaster, 0, 0).arm.groups.size()), x);
       },
       .no_placebo = "a rank correlation across module groups of two quantities, not a contrast between arms: the float32-master run gives each "
                     "group's update/weight ratio, the stored run its share lost. The derived placebo has none: with the master run in both "
                     "places no update is lost (the correlation is undefined), and with the stored run in both the groups keep their order "
                     "from seed to seed; only shuffling the groups would make a null"},
      {.spec = {.id = "master_weights_needed", .kind = ClaimKind::Paper,
                .statement = "bfloat16-stored weights learn less: their held-out NLL ends more than 0.05 nats above the float32-master run's (same "
                             "start, same batches), seed by seed",
                .side = Compare::Above, .threshold = 0.05,
                .source = "Micikevicius et al. 2018, section 3.1 and Figure 2a (without a float32 master copy training falls behind); Kalamkar et "
                          "al. 2019 keep float32 master weights for bfloat16; 0.05 nats: the lab's threshold",
                .control_targets = true, .min_effect = 0.025, .min_effect_reason = "half the threshold's distance from no difference (0 nats)",
                .pilot_sd = 0.0104, .pilot_n = 5},
       .per_seed = [](const V& v) { return v(kStored).arm.nll - v(kMaster).arm.nll; },
       .evidence = [](const Grid<Measured>&, const std::vector<double>& x) { return per_seed_text("held-out NLL, stored minus master", x); }},
      {.spec = {.id = "fp16_would_underflow", .kind = ClaimKind::Paper,
                .statement = "without loss scaling float16 would round to 0 a share above 0.01 of the nonzero entries of the loss's gradient with "
                             "respect to the logits (below 2^-25)",
                .side = Compare::Above, .threshold = 0.01,
                .source = "Micikevicius et al. 2018, section 3.2 and Figure 3 (gradients below float16's range become zeros: the reason for loss "
                          "scaling); 0.01: the lab's threshold",
                .control_targets = false, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.005,
                .min_effect_reason = "half the threshold's distance from no entry lost (0)", .pilot_sd = 0.0693, .pilot_n = 5},
       .per_seed = [](const V& v) { return range_of({v(kMaster).arm.logit_grad}).fp16_zero; },
       .evidence = [](const Grid<Measured>&, const std::vector<double>& x) { return per_seed_text("share of d loss / d logits below 2^-25", x); },
       .no_placebo = one_arm},
      {.spec = {.id = "bf16_keeps_range", .kind = ClaimKind::Check,
                .statement = "bfloat16 keeps float32's exponent range: a share below 1e-6 of the nonzero gradient entries (logits and every "
                             "parameter) rounds to 0",
                .side = Compare::Below, .threshold = 1e-6,
                .source = "Kalamkar et al. 2019, section 2 (bfloat16 has float32's 8-bit exponent: no loss scaling); its smallest normal is "
                          "float32's 2^-126: an exact property of the format, so a check; the largest share over the seeds",
                .control_targets = false},
       .joint = [](const Grid<Measured>& g) {
         std::vector<double> share;
         for (const Measured* m : g.of(kMaster)) share.push_back(range_of(all_grads(m->arm)).bf16_zero);
         return *std::max_element(share.begin(), share.end());
       },
       .evidence = [](const Grid<Measured>& g, const std::vector<double>&) {
         std::vector<double> share;
         for (const Measured* m : g.of(kMaster)) share.push_back(range_of(all_grads(m->arm)).bf16_zero);
         return per_seed_text("share of nonzero gradient entries (logits and parameters) that round to 0 in bfloat16", share);
       }},
      {.spec = {.id = "bf16_softmax_sum_degrades", .kind = ClaimKind::Paper,
                .statement = "a softmax whose exponentials and running sum are bfloat16 errs more at long length: its total variation distance "
                             "from the exact weights at the longest length is above 4x that at the shortest",
                .side = Compare::Above, .threshold = 4.0,
                .source = "Micikevicius et al. 2018, section 3.3 (large reductions, softmax's among them, in float32): a running sum drops every "
                          "term below half its spacing, 2^-9 of the sum; 4x: the lab's threshold",
                .control_targets = false, .min_effect = 1.5, .min_effect_reason = "half the threshold's distance from no growth (a ratio of 1)",
                .pilot_sd = 2.57, .pilot_n = 5},
       .per_seed = [s](const V& v) { return growth(v, s, &SoftmaxErrors::all_bf16); },
       .evidence = [lengths](const Grid<Measured>&, const std::vector<double>& x) { return per_seed_text(lengths + ", bfloat16 throughout", x); },
       .no_placebo = arithmetic},
      {.spec = {.id = "fp32_softmax_holds", .kind = ClaimKind::Paper,
                .statement = "with the scores from bfloat16 products and the softmax in float32 (gradflow's --precision bf16), the error does not "
                             "grow with length: the same ratio is below 2",
                .side = Compare::Below, .threshold = 2.0,
                .source = "each score is rounded from its own d_k products, independent of L, and the float32 sum keeps the small terms "
                          "(Micikevicius et al. 2018, section 3.3); 2: the lab's threshold",
                .control_targets = false, .min_effect = 0.5,
                .min_effect_reason = "half the way from the threshold (2) to no growth (1), which the claim expects", .pilot_sd = 0.0813,
                .pilot_n = 5},
       .per_seed = [s](const V& v) { return growth(v, s, &SoftmaxErrors::products); },
       .evidence = [lengths](const Grid<Measured>&, const std::vector<double>& x) {
         return per_seed_text(lengths + ", bf16 products and float32 softmax", x);
       },
       .no_placebo = arithmetic},
  };
}

}  // namespace

Lab precision_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "precision",
               .title = "what bfloat16 does to gradient flow",
               .reference = "Micikevicius et al. 2018, arXiv:1710.03740 (sections 3.1-3.3); Kalamkar et al. 2019, arXiv:1905.12322",
               .question = "Why does mixed-precision training keep float32 master weights, and why does bfloat16 need no loss scaling while "
                           "float16 does? Which modules stall first when weights are stored in bfloat16, and what does a bfloat16 softmax do at "
                           "long length?",
               .default_seeds = 5,
               .null = {kMaster, 0},
               .null_description = "the float32-master run"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

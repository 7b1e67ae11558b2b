// Lab `precision`: what bfloat16 does to gradient flow, and why mixed precision keeps three things
// in float32 (Micikevicius et al. 2018, arXiv:1710.03740; Kalamkar et al. 2019, arXiv:1905.12322).
//
// 1. Master weights. bfloat16 keeps 8 significant bits: a stored weight w moves only when its update
//    is at least about half its spacing, 2^-9 |w| (2^-8 to 2^-9 by where w sits in its binade). Adam's
//    updates are about the learning rate in size, so late in training, and for weights near 1 (the
//    LayerNorm gains) from the start, the updates of weights stored in bfloat16 round away and those
//    weights stop learning. The update/weight ratio per module, as `train --grad-stats` records it,
//    says which modules stall first. Two arms from the same start on the same batches: weights
//    stored in bfloat16 (every Adam step rounded back to bfloat16), and a float32 master copy that
//    Adam updates while each forward pass uses its bfloat16 rounding (mixed precision). Control: a
//    float32 master copy in both arms.
// 2. Range. float16's smallest subnormal is 2^-24 (a value below 2^-25 rounds to 0), bfloat16's
//    smallest normal is float32's 2^-126: the gradients of a trained model, the loss's gradient with
//    respect to the logits above all (a probability over the token count), reach below 2^-25, which is
//    why float16 training scales the loss and bfloat16 training does not.
// 3. Reductions. A softmax's sum over L keys, accumulated in bfloat16, drops every term below half
//    an ulp of the running sum (2^-9 of it): at long length most of the terms. gradflow's bf16 runs the
//    score products in bfloat16 (float32 sums) and the softmax in float32.
//
// Everything here rounds with the scalar bfloat16(float) of tensor/dtype.h: the lab runs on any CPU,
// AVX512-BF16 or not.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "optim/adam.h"
#include "train/run/batch_loss.h"
#include "train/loop/grad_stats.h"

namespace gf::lab {
namespace {

constexpr double kFp16Zero = 0x1p-25;       // below this float16 rounds to 0 (half its smallest subnormal 2^-24)
constexpr double kFp16Normal = 0x1p-14;     // float16's smallest normal: below it, fewer significant bits
constexpr double kBf16Normal = 0x1p-126;    // bfloat16's (and float32's) smallest normal; AVX512-BF16 flushes below
constexpr double kBf16HalfSpacing = 0x1p-9;  // an update below this share of a weight is lost to rounding (at worst 2^-8)

float bf16_value(float x) { return static_cast<float>(bfloat16(x)); }

// Rounds a float32 tensor's values to bfloat16 in place (their storage stays float32).
void round_to_bf16_(const Tensor& t) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = bf16_value(p[i]);
}

// ---------------------------------------------------------------- 1. master weights

struct GroupStats {
  double lost = 0, moved = 0;  // updates lost to rounding, and nonzero updates (second half of training)
  double ratio_sum = 0;        // sum over those steps of |update| / |weight|
  int64_t steps = 0;
  double lost_share() const { return moved > 0 ? lost / moved : 0.0; }
  double ratio() const { return steps > 0 ? ratio_sum / static_cast<double>(steps) : 0.0; }
};

struct Arm {
  std::vector<double> losses;             // per step
  std::vector<GroupStats> groups;         // per grad_groups() group
  double lost_share = 0;                  // over every weight, second half
  double nll = 0;                         // held-out, teacher-forced
};

struct Trained {
  Arm stored, master;                     // bf16-stored weights, float32 master
  std::vector<std::string> group_names;
  Tensor logit_grad;                      // the master arm's last step: d loss / d logits (N, V)
  std::vector<std::pair<std::string, Tensor>> param_grads;  // and every parameter's gradient then
};

// One arm: Adam on the built-in corpus with the trainer's schedule. master: a float32 copy is what
// Adam updates; every forward pass uses its bfloat16 rounding. Otherwise the weights themselves are
// bfloat16 values: each step's result is rounded back, and an update that does not change the
// rounded weight is lost.
Arm train_arm(const IdData& data, Report& r, uint64_t seed, bool master, Trained* keep_grads) {
  const int64_t D = r.integer("d-model"), steps = r.integer("steps");
  nn::Seq2SeqTransformer model(small_model(data, D, 2, r.integer("layers"), 2 * D, false), seed);
  const auto named = model.named_parameters();
  std::vector<Variable> params;
  for (const auto& [n, p] : named) params.push_back(p);
  const std::vector<train::GradGroup> groups = train::grad_groups(named);
  std::vector<Tensor> master_copy;
  for (const auto& p : params) {
    if (master) master_copy.push_back(p.data().clone());
    round_to_bf16_(p.data());  // both arms start from the same bfloat16 weights
  }
  optim::Adam adam(named, {.lr = r.real("lr"), .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  const std::vector<train::Batch> plan = batches(data.train, r.integer("max-tokens"), seed);
  Arm arm;
  arm.groups.resize(groups.size());
  model.train();
  for (int64_t step = 1; step <= steps; ++step) {
    if (master)
      for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]), round_to_bf16_(params[i].data());
    const train::Batch& b = plan[static_cast<size_t>(step - 1) % plan.size()];
    train::BatchTensors t = train::to_tensors(b);
    Variable loss, logits;
    if (keep_grads && step == steps) {  // the last step through the unfused loss, to read d loss / d logits
      logits = model.forward(t.src, t.tgt_in);  // (B, T, V)
      logits.retain_grad();
      loss = cross_entropy(reshape(logits, {-1, logits.size(2)}), t.labels, train::Vocab::kPad, 0.0);
    } else {
      loss = train::batch_loss(model, t, 0.0);
    }
    adam.zero_grad();
    loss.backward();
    if (keep_grads && step == steps) {
      keep_grads->logit_grad = logits.grad().clone();
      for (const auto& [n, p] : named) keep_grads->param_grads.push_back({n, p.grad().clone()});
    }
    arm.losses.push_back(loss.item());
    if (master)
      for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]);  // Adam updates the float32 copy
    std::vector<Tensor> before;
    for (const auto& p : params) before.push_back(p.data().clone());
    optim::scheduled_update(adam, params, 1.0, r.real("lr"), step - 1, r.integer("warmup"));
    const bool counted = step > steps / 2;
    for (size_t g = 0; g < groups.size(); ++g) {
      double moved = 0, lost = 0, du = 0, w = 0;
      for (const auto& piece : groups[g].pieces) {
        const float* a = before[piece.param].data<float>();
        float* p = params[piece.param].data().data<float>();
        for (int64_t e = piece.begin; e < piece.end; ++e) {
          const float intended = p[e];                         // Adam's float32 result
          const float stored = master ? intended : bf16_value(intended);
          if (intended != a[e]) moved += 1, lost += stored == a[e];
          du += (static_cast<double>(intended) - a[e]) * (static_cast<double>(intended) - a[e]), w += static_cast<double>(a[e]) * a[e];
          p[e] = stored;
        }
      }
      if (counted) {
        GroupStats& s = arm.groups[g];
        s.moved += moved, s.lost += lost, s.steps += 1;
        s.ratio_sum += w > 0 ? std::sqrt(du / w) : 0.0;
      }
    }
    if (master)
      for (size_t i = 0; i < params.size(); ++i) master_copy[i].copy_(params[i].data());
  }
  double lost = 0, moved = 0;
  for (const GroupStats& s : arm.groups) lost += s.lost, moved += s.moved;
  arm.lost_share = moved > 0 ? lost / moved : 0.0;
  if (master)
    for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]), round_to_bf16_(params[i].data());
  model.eval();
  arm.nll = teacher_forced(model, data.test, static_cast<size_t>(r.integer("eval-pairs"))).nll;
  if (keep_grads && keep_grads->group_names.empty())
    for (const auto& g : groups) keep_grads->group_names.push_back(g.name);
  return arm;
}

// ---------------------------------------------------------------- 2. range

struct Range {
  double fp16_zero = 0, fp16_subnormal = 0, bf16_zero = 0;  // shares of the nonzero entries
  double max_abs = 0;
  int64_t nonzero = 0;
};

Range range_of(const std::vector<Tensor>& parts) {
  Range r;
  double zero16 = 0, sub16 = 0, zero_b = 0;
  for (const Tensor& t : parts) {
    const Tensor c = t.contiguous();
    const float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      const double a = std::abs(static_cast<double>(p[i]));
      if (a == 0) continue;
      ++r.nonzero;
      zero16 += a < kFp16Zero, sub16 += a < kFp16Normal, zero_b += bf16_value(p[i]) == 0.0f;
      r.max_abs = std::max(r.max_abs, a);
    }
  }
  if (r.nonzero > 0) {
    const double n = static_cast<double>(r.nonzero);
    r.fp16_zero = zero16 / n, r.fp16_subnormal = sub16 / n, r.bf16_zero = zero_b / n;
  }
  return r;
}

// The smallest power of two by which the loss must be scaled for fewer than 0.1% of the entries to
// round to 0 in float16: scaling moves the whole range up (Micikevicius et al. 2018, section 3.2).
int loss_scale_exponent(const std::vector<Tensor>& parts) {
  std::vector<double> a;
  for (const Tensor& t : parts) {
    const Tensor c = t.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i)
      if (const double v = std::abs(static_cast<double>(c.data<float>()[i])); v > 0) a.push_back(v);
  }
  if (a.empty()) return 0;
  std::sort(a.begin(), a.end());
  const double q = a[static_cast<size_t>(0.001 * static_cast<double>(a.size()))];  // the 0.1% quantile
  return std::max(0, static_cast<int>(std::ceil(std::log2(kFp16Zero / q))));
}

// ---------------------------------------------------------------- 3. softmax against length

struct SoftmaxErrors {
  double products = 0;  // gradflow's bf16: scores from bfloat16 q and k, summed and softmaxed in float32
  double all_bf16 = 0;  // scores, exponentials and the running sum in bfloat16
};

// Mean over `rows` query rows of the total variation distance between the softmax weights and the
// exact ones, for L keys; q, k ~ N(0, 1) of d_k features, scores scaled to standard deviation
// `score_sd` (how peaked trained attention is).
SoftmaxErrors softmax_errors(int64_t L, int64_t dk, int64_t rows, double score_sd, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(L));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(L * dk));
  for (float& x : k) x = normal(rng);
  const double scale = score_sd / std::sqrt(static_cast<double>(dk));
  SoftmaxErrors e;
  std::vector<double> exact(static_cast<size_t>(L)), s1(static_cast<size_t>(L)), s2(static_cast<size_t>(L));
  std::vector<float> q(static_cast<size_t>(dk));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : q) x = normal(rng);
    for (int64_t j = 0; j < L; ++j) {
      double d = 0, d_bf16 = 0;
      for (int64_t c = 0; c < dk; ++c) {
        d += static_cast<double>(q[c]) * k[j * dk + c];
        d_bf16 += static_cast<double>(bf16_value(q[c])) * bf16_value(k[j * dk + c]);
      }
      exact[j] = d * scale;
      s1[j] = static_cast<float>(static_cast<float>(d_bf16) * static_cast<float>(scale));  // float32 scores of bf16 products
      s2[j] = bf16_value(static_cast<float>(s1[j]));                                          // rounded to bfloat16 as well
    }
    const std::vector<double> p_exact = softmax_exact(exact.data(), L), p1 = softmax_exact(s1.data(), L);
    // bfloat16 throughout: each exponential rounded, the running sum rounded after every add.
    const float m2 = static_cast<float>(*std::max_element(s2.begin(), s2.end()));
    std::vector<float> ex(static_cast<size_t>(L));
    float sum = 0;
    for (int64_t j = 0; j < L; ++j) {
      ex[j] = bf16_value(std::exp(static_cast<float>(s2[j]) - m2));
      sum = bf16_value(sum + ex[j]);
    }
    double tv1 = 0, tv2 = 0;
    for (int64_t j = 0; j < L; ++j) {
      tv1 += std::abs(static_cast<double>(static_cast<float>(p1[j])) - p_exact[j]);
      tv2 += std::abs(static_cast<double>(bf16_value(ex[j] / sum)) - p_exact[j]);
    }
    e.products += 0.5 * tv1 / static_cast<double>(rows), e.all_bf16 += 0.5 * tv2 / static_cast<double>(rows);
  }
  return e;
}

// ---------------------------------------------------------------- the lab

// --control: the placebo. A pool of float32-master runs, each on its own seed (initialisation and
// batches); the one contrast between arms, held-out NLL, between two groups of them.
void placebo(Report& r, const IdData& data) {
  const int n = r.placebo_pool();
  r.say(fmt::format("PLACEBO: {} runs with a float32 master copy, seeds {}-{}; the contrast compares two groups of them, unpaired.", n, r.seed(0),
                    r.seed(n - 1)));
  std::vector<Arm> pool;
  Table t("the pool: float32 master", {"seed", "held-out NLL", "updates lost to rounding"});
  for (int i = 0; i < n; ++i) {
    pool.push_back(train_arm(data, r, r.seed(i), true, nullptr));
    t.row({static_cast<int64_t>(r.seed(i)), pool.back().nll, pool.back().lost_share});
  }
  r.print(t);
  r.placebo("master_weights_needed", [&](int a, int b) { return pool[b].nll - pool[a].nll; }, "master run a in the master's place, b in the stored arm's");
  const std::string single = "one arm's statistic against its threshold, no contrast between arms";
  for (const char* id : {"updates_round_away", "stall_follows_ratio", "fp16_would_underflow"}) r.no_placebo(id, single);
  for (const char* id : {"bf16_softmax_sum_degrades", "fp32_softmax_holds"}) r.no_placebo(id, "arithmetic on random scores, no arms");
}

void run(Report& r) {
  const IdData data = builtin_corpus(r.integer("pairs"), 1);
  if (r.placebo_mode()) return placebo(r, data);
  const int64_t steps = r.integer("steps");
  std::vector<Trained> runs;
  for (int i = 0; i < r.seeds(); ++i) {
    Trained t;
    t.stored = train_arm(data, r, r.seed(i), false, nullptr);
    t.master = train_arm(data, r, r.seed(i), true, &t);
    runs.push_back(std::move(t));
  }
  const std::vector<std::string>& names = runs[0].group_names;
  const size_t G = names.size();
  const std::string stored_name = "bfloat16 weights";

  r.section(fmt::format("1. master weights: {} Adam steps, lr {} (warm-up {}, then 1/sqrt(step)); second half of training", steps, r.real("lr"),
                        r.integer("warmup")));
  Table t1("master_weights", {"seed", "arm", "final loss (mean of last 20)", "held-out NLL", "updates lost to rounding"});
  auto tail_mean = [](const std::vector<double>& v) {
    const size_t n = std::min<size_t>(20, v.size());
    return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) / static_cast<double>(n);
  };
  for (int i = 0; i < r.seeds(); ++i)
    for (const Arm* a : {&runs[i].stored, &runs[i].master})
      t1.row({static_cast<int64_t>(r.seed(i)), a == &runs[i].stored ? stored_name : std::string("float32 master"), tail_mean(a->losses),
              a->nll, a->lost_share});
  r.print(t1);
  Table t2("per_module", {"module group", "update/weight ratio", "updates lost, " + stored_name, "updates lost, float32 master"});
  std::vector<double> ratio(G), lost(G), lost_master(G);
  for (size_t g = 0; g < G; ++g) {
    for (const Trained& t : runs)
      ratio[g] += t.master.groups[g].ratio(), lost[g] += t.stored.groups[g].lost_share(), lost_master[g] += t.master.groups[g].lost_share();
    ratio[g] /= static_cast<double>(runs.size()), lost[g] /= static_cast<double>(runs.size()), lost_master[g] /= static_cast<double>(runs.size());
  }
  std::vector<size_t> order(G);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ratio[a] < ratio[b]; });
  for (size_t g : order) t2.row({names[g], ratio[g], lost[g], lost_master[g]});
  r.print(t2);
  r.say(fmt::format("update/weight ratio: |p_after - p_before| / |p_before| of the float32 update, per step, as `train --grad-stats` "
                    "records it (mean over the second half and the seeds); an update below {:.2g} (2^-9) of its weight rounds away in "
                    "bfloat16.",
                    kBf16HalfSpacing));

  r.section("2. range: the master arm's gradients at its last step, shares of the nonzero entries");
  Table t3("range", {"tensor", "nonzero entries", "max |g|", "< 2^-25 (float16: 0)", "< 2^-14 (float16 subnormal)", "bfloat16: 0",
                     "loss scale for float16"});
  std::vector<double> logit_zero16, bf16_zero_any;
  std::map<std::string, std::vector<Tensor>> by_group;
  std::vector<std::string> group_order;
  for (const auto& [n, g] : runs[0].param_grads) {
    const std::string grp = train::group_of(n);
    if (!by_group.count(grp)) group_order.push_back(grp);
    by_group[grp].push_back(g);
  }
  std::vector<std::vector<double>> range_map;
  std::vector<std::string> range_rows;
  auto range_row = [&](const std::string& name, const std::vector<Tensor>& parts) {
    const Range rg = range_of(parts);
    t3.row({name, rg.nonzero, rg.max_abs, rg.fp16_zero, rg.fp16_subnormal, rg.bf16_zero, fmt::format("2^{}", loss_scale_exponent(parts))});
    range_rows.push_back(name);
    range_map.push_back({rg.fp16_zero, rg.fp16_subnormal, rg.bf16_zero});
  };
  range_row("d loss / d logits", {runs[0].logit_grad});
  for (const auto& grp : group_order) range_row(grp, by_group[grp]);
  r.print(t3);
  for (const Trained& t : runs) {
    logit_zero16.push_back(range_of({t.logit_grad}).fp16_zero);
    std::vector<Tensor> all{t.logit_grad};
    for (const auto& [n, g] : t.param_grads) all.push_back(g);
    bf16_zero_any.push_back(range_of(all).bf16_zero);
  }
  r.say(fmt::format("seed {}'s; the loss is a mean over the batch's tokens, so d loss / d logits is (softmax - one-hot) / tokens. Loss "
                    "scale: the power of two that leaves fewer than 0.1% of the entries below 2^-25.",
                    r.seed(0)));

  r.section("3. softmax over L keys: total variation distance from the exact weights (mean over query rows)");
  const std::vector<int64_t> lengths = parse_increasing_ints(r.text("lengths"), "lab precision: --lengths");
  Table t4("softmax_vs_length", {"L", "bf16 products, float32 softmax (gradflow)", "bfloat16 throughout (running sum in bfloat16)"});
  std::vector<std::vector<SoftmaxErrors>> errs(static_cast<size_t>(r.seeds()));
  for (int i = 0; i < r.seeds(); ++i)
    for (int64_t L : lengths) errs[i].push_back(softmax_errors(L, r.integer("head-dim"), r.integer("rows"), r.real("score-sd"), r.seed(i)));
  std::vector<double> x, mean_products, mean_all;
  for (size_t li = 0; li < lengths.size(); ++li) {
    double a = 0, b = 0;
    for (const auto& e : errs) a += e[li].products, b += e[li].all_bf16;
    a /= static_cast<double>(errs.size()), b /= static_cast<double>(errs.size());
    t4.row({lengths[li], a, b});
    x.push_back(static_cast<double>(lengths[li])), mean_products.push_back(a), mean_all.push_back(b);
  }
  r.print(t4);
  r.say(fmt::format("q, k ~ N(0, 1) with d_k {}, scores scaled to standard deviation {}; mean over {} rows and {} seeds.",
                    r.integer("head-dim"), r.real("score-sd"), r.integer("rows"), r.seeds()));

  // ---- figure
  {
    Chart c{"training loss (mean over seeds; band: min..max)", "step", "loss", false, true, {}, {}, Chart::Corner::TopRight};
    std::vector<double> steps_x;
    for (int64_t s = 1; s <= steps; ++s) steps_x.push_back(static_cast<double>(s));
    for (bool stored : {true, false}) {
      std::vector<std::vector<double>> per_seed;
      for (const Trained& t : runs) per_seed.push_back(stored ? t.stored.losses : t.master.losses);
      c.series.push_back(band_series(stored ? stored_name : "float32 master", steps_x, spread_per_column(per_seed)));
    }
    r.add_panel(c);
  }
  {
    Chart c{"updates lost against the update/weight ratio, per module group", "update/weight ratio", "share of updates lost", true, false, {},
            {}, Chart::Corner::TopRight};
    ChartSeries s{stored_name, {}, {}, {}, {}, false, ""}, m{"float32 master", {}, {}, {}, {}, true, ""};
    for (size_t g : order) s.x.push_back(ratio[g]), s.y.push_back(lost[g]), m.x.push_back(ratio[g]), m.y.push_back(lost_master[g]);
    c.series.push_back(s);
    c.series.push_back(m);
    c.series.push_back({"2^-9", {kBf16HalfSpacing, kBf16HalfSpacing}, {0.0, 1.0}, {}, {}, true, "#888888"});
    r.add_panel(c);
  }
  r.add_panel(ValueMap{"gradient entries below each format's range (seed " + std::to_string(r.seed(0)) + ")", "", "", range_rows,
                       {"float16: 0", "float16 subnormal", "bfloat16: 0"}, range_map, false, "share of nonzero entries", 0.0, 1.0});
  {
    Chart c{"softmax error against length (mean over seeds)", "keys L", "total variation distance", true, true, {}, x, Chart::Corner::TopLeft};
    c.series.push_back({"bf16 products, float32 softmax", x, mean_products, {}, {}, false, ""});
    c.series.push_back({"bfloat16 throughout", x, mean_all, {}, {}, false, ""});
    r.add_panel(c);
  }

  // ---- raw numbers
  auto& d = r.data();
  d["groups"] = names;
  d["update_weight_ratio"] = ratio, d["lost_stored"] = lost, d["lost_master"] = lost_master;
  for (int i = 0; i < r.seeds(); ++i)
    d["runs"].push_back({{"seed", r.seed(i)}, {"stored_losses", runs[i].stored.losses}, {"master_losses", runs[i].master.losses},
                         {"stored_nll", runs[i].stored.nll}, {"master_nll", runs[i].master.nll}, {"stored_lost", runs[i].stored.lost_share},
                         {"master_lost", runs[i].master.lost_share}});
  d["lengths"] = lengths, d["softmax_products"] = mean_products, d["softmax_bf16"] = mean_all;

  // ---- claims
  std::vector<double> lost_stored, nll_gap, rho, products_growth, bf16_growth;
  for (int i = 0; i < r.seeds(); ++i) {
    const Trained& t = runs[i];
    lost_stored.push_back(t.stored.lost_share);
    nll_gap.push_back(t.stored.nll - t.master.nll);
    std::vector<double> rr, ll;
    for (size_t g = 0; g < G; ++g) rr.push_back(t.master.groups[g].ratio()), ll.push_back(t.stored.groups[g].lost_share());
    rho.push_back(spearman(rr, ll));
    products_growth.push_back(errs[i].back().products / errs[i].front().products);
    bf16_growth.push_back(errs[i].back().all_bf16 / errs[i].front().all_bf16);
  }
  r.paper("updates_round_away", lost_stored, fmt::format("share of nonzero updates lost in the second half, per seed: {:.3g}", fmt::join(lost_stored, ", ")));
  r.paper("stall_follows_ratio", rho, fmt::format("Spearman (update/weight ratio, share lost) across {} groups, per seed: {:.3g}", G, fmt::join(rho, ", ")));
  r.paper("master_weights_needed", nll_gap, fmt::format("held-out NLL, stored minus master, per seed: {:.3g}", fmt::join(nll_gap, ", ")));
  r.paper("fp16_would_underflow", logit_zero16, fmt::format("share of d loss / d logits below 2^-25, per seed: {:.3g}", fmt::join(logit_zero16, ", ")));
  r.check("bf16_keeps_range", *std::max_element(bf16_zero_any.begin(), bf16_zero_any.end()),
          fmt::format("share of nonzero gradient entries (logits and parameters) that round to 0 in bfloat16, per seed: {:.3g}", fmt::join(bf16_zero_any, ", ")));
  r.paper("bf16_softmax_sum_degrades", bf16_growth,
          fmt::format("error at L {} over L {}, bfloat16 throughout, per seed: {:.3g}", lengths.back(), lengths.front(), fmt::join(bf16_growth, ", ")));
  r.paper("fp32_softmax_holds", products_growth,
          fmt::format("error at L {} over L {}, bf16 products and float32 softmax, per seed: {:.3g}", lengths.back(), lengths.front(),
                      fmt::join(products_growth, ", ")));
}

}  // namespace

Lab precision_lab() {
  Lab l;
  l.name = "precision";
  l.title = "what bfloat16 does to gradient flow";
  l.reference = "Micikevicius et al. 2018, arXiv:1710.03740 (sections 3.1-3.3); Kalamkar et al. 2019, arXiv:1905.12322";
  l.question = "Why does mixed-precision training keep float32 master weights, and why does bfloat16 need no loss scaling while "
               "float16 does? Which modules stall first when weights are stored in bfloat16, and what does a bfloat16 softmax do at "
               "long length?";
  l.control = "placebo: two groups of seeds of the float32-master run";
  l.placebo = true;
  l.default_seeds = 5;
  l.options = {{"pairs", Option::Int, "3000", "pairs of the built-in corpus (90% train)"},
               {"d-model", Option::Int, "32", "model width (2 heads, feed-forward 2x)"},
               {"layers", Option::Int, "1", "encoder and decoder layers each"},
               {"steps", Option::Int, "300", "Adam steps per arm"},
               {"lr", Option::Real, "0.003", "peak learning rate"},
               {"warmup", Option::Int, "50", "warm-up steps, then 1/sqrt(step) decay (the trainer's schedule)"},
               {"max-tokens", Option::Int, "1024", "tokens per batch"},
               {"eval-pairs", Option::Int, "200", "held-out pairs for the NLL"},
               {"lengths", Option::Text, "16,64,256,1024", "softmax lengths (keys)"},
               {"head-dim", Option::Int, "64", "d_k of the softmax section"},
               {"rows", Option::Int, "64", "query rows per length"},
               {"score-sd", Option::Real, "2", "standard deviation of the softmax section's scores"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

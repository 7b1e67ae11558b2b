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
#include "lab/depth.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "nn/multihead_attention.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

double rank1_residual(const Tensor& x) {
  GF_CHECK(x.ndim() == 3, "rank1_residual: expects (B, n, D), got {}", shape_str(x.shape()));
  const Tensor c = x.to(DType::Float64).contiguous();  // (B, n, D)
  const int64_t B = c.size(0), n = c.size(1), D = c.size(2);
  const double* p = c.data<double>();
  double total = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double* xb = p + b * n * D;
    std::vector<double> mean_row(static_cast<size_t>(D), 0.0);  // (D)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < D; ++j) mean_row[j] += xb[i * D + j] / static_cast<double>(n);
    double dev = 0, all = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < D; ++j) {
        const double v = xb[i * D + j];
        dev += (v - mean_row[j]) * (v - mean_row[j]);
        all += v * v;
      }
    total += all > 0 ? std::sqrt(dev / all) : 0.0;
  }
  return total / static_cast<double>(B);
}

double relative_output_change(nn::Seq2SeqTransformer& model, const train::Batch& batch, double eps, uint64_t seed) {
  NoGradGuard ng;
  const train::BatchTensors t = train::to_tensors(batch);
  const Tensor before = model.forward(t.src, t.tgt_in).data().clone();  // (B, T, V)
  Generator gen(seed);
  std::vector<std::pair<Tensor, Tensor>> saved;  // (parameter, its original values)
  for (auto& [name, p] : model.named_parameters()) {
    if (name.rfind("transformer.", 0) != 0) continue;
    Tensor w = p.data();  // the parameter's shape; shares its storage
    saved.emplace_back(w, w.clone());
    const Tensor u = kernels::randn(w.shape(), gen, DType::Float64);  // w's shape: a random direction
    const double scale = eps * l2_norm(w) / l2_norm(u);
    for (int64_t i = 0; i < w.numel(); ++i) w.flat_set(i, w.flat_get(i) + scale * u.flat_get(i));
  }
  const Tensor after = model.forward(t.src, t.tgt_in).data();  // (B, T, V)
  for (auto& [w, original] : saved) w.copy_(original);
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < before.numel(); ++i) {
    const double a = before.flat_get(i), b = after.flat_get(i);
    diff += (b - a) * (b - a), norm += a * a;
  }
  return std::sqrt(diff / norm);
}

AttentionStack attention_stack(int64_t layers, bool skip, int64_t d_model, int64_t heads, int64_t tokens, int64_t batch, uint64_t seed) {
  GF_CHECK(layers >= 1, "attention_stack: layers must be positive, got {}", layers);
  Generator gen(seed);
  std::vector<std::shared_ptr<nn::MultiheadAttention>> stack;
  for (int64_t l = 0; l < layers; ++l) {
    stack.push_back(std::make_shared<nn::MultiheadAttention>(d_model, heads, 0.0, true, gen));
    stack.back()->to(DType::Float64);  // res falls below float32's resolution within a few layers
  }
  Variable x(kernels::randn({batch, tokens, d_model}, gen, DType::Float64));  // (B, n, D): X_0
  const Tensor r = kernels::randn({batch, tokens, d_model}, gen, DType::Float64);  // (B, n, D): d loss / d X_L
  AttentionStack out;
  out.res.push_back(rank1_residual(x.data()));
  for (const auto& sa : stack) {
    Variable y = sa->forward(x, x, x).output;  // (B, n, D)
    x = skip ? x + y : y;                      // (B, n, D)
    out.res.push_back(rank1_residual(x.data()));
  }
  Variable loss = sum(x * Variable(r));  // ()
  loss.backward();
  for (const auto& sa : stack) {
    const Tensor g = sa->in_proj_weight.grad();  // (3D, D): rows Q, then K, then V
    const double gq = l2_norm(g.narrow(0, 0, d_model)), gk = l2_norm(g.narrow(0, d_model, d_model));
    const double gv = l2_norm(g.narrow(0, 2 * d_model, d_model));
    out.q_over_v.push_back(gq / gv);
    out.k_over_v.push_back(gk / gv);
  }
  return out;
}

namespace {

const char* ln_name(bool pre_ln) { return pre_ln ? "Pre-LN" : "Post-LN"; }
const char* kPostColor = "#d62728";
const char* kPreColor = "#1f77b4";

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

// ---- (a) amplification ----
struct Amplification {
  std::vector<Spread> change[2];           // [pre_ln] per depth: relative output change, over seeds
  double slope_sq[2];                      // [pre_ln] log-log slope of the mean squared change on N
  std::vector<std::vector<double>> seed_change[2];  // [pre_ln] per seed, per depth: the relative output change
};

// Prints (a)'s table, draws its panel, keeps its numbers.
void report_amplification(Report& r, const std::vector<int64_t>& depths, int64_t sentences, const Amplification& a) {
  const int64_t d = r.integer("d-model"), heads = r.integer("heads"), ff = r.integer("ff"), draws = r.integer("draws");
  const double eps = r.real("eps");
  std::vector<double> x;
  for (int64_t N : depths) x.push_back(static_cast<double>(N));
  r.section(fmt::format("(a) |F(x, W + dW) - F(x, W)| / |F(x, W)| with each stack parameter moved by {} x |W| (rms over {} draws; mean [min, max] over seeds)",
                        eps, draws));
  r.say(fmt::format("translator on one batch of the built-in corpus ({} sentences), d_model {}, {} heads, FFN {}; N layers in each stack; F: the logits",
                    sentences, d, heads, ff));
  Table t("amplification", {"N", "Post-LN", "Post-LN min", "Post-LN max", "Pre-LN", "Pre-LN min", "Pre-LN max", "Post/Pre"});
  for (size_t k = 0; k < depths.size(); ++k)
    t.row({depths[k], a.change[0][k].mean, a.change[0][k].min, a.change[0][k].max, a.change[1][k].mean, a.change[1][k].min,
           a.change[1][k].max, a.change[0][k].mean / a.change[1][k].mean});
  r.print(t);
  r.say(fmt::format("log-log slope of the squared change (Admin's Var) on N: Post-LN {:.3f} (Theorem 2: 1, O(N)), Pre-LN {:.3f} (O(log N))",
                    a.slope_sq[0], a.slope_sq[1]));
  std::vector<Spread> sq[2];
  for (int pre = 0; pre < 2; ++pre)
    for (const auto& s : a.change[pre]) sq[pre].push_back({s.mean * s.mean, 0, s.min * s.min, s.max * s.max});
  ChartSeries lin{"~ N", x, {}, {}, {}, true, kPostColor};
  ChartSeries lg{"~ sum 1/i (log N)", x, {}, {}, {}, true, kPreColor};
  const std::vector<double> h = harmonic_numbers(depths);
  for (size_t k = 0; k < x.size(); ++k) {
    lin.y.push_back(sq[0].back().mean * x[k] / x.back());
    lg.y.push_back(sq[1].back().mean * h[k] / h.back());
  }
  r.add_panel(Chart{fmt::format("(a) output change, weights moved by {}", eps), "layers N", "|dF|^2 / |F|^2 (band: seeds)", true,
                    true, {band_series("Post-LN", x, sq[0], kPostColor), band_series("Pre-LN", x, sq[1], kPreColor), lin, lg}, x});
  auto& j = r.data()["amplification"];
  j["depths"] = depths;
  j["eps"] = eps;
  for (int pre = 0; pre < 2; ++pre) j[ln_name(pre)] = {{"relative_change_mean", means(a.change[pre])}, {"slope_squared", a.slope_sq[pre]}};
}

// The rms over `draws` random directions of the relative output change of an N-layer model.
double rms_change(const IdData& data, const train::Batch& batch, Report& r, int64_t N, bool pre_ln, int i) {
  nn::Seq2SeqTransformer model(small_model(data, r.integer("d-model"), r.integer("heads"), N, r.integer("ff"), pre_ln), r.seed(i));
  model.eval();
  const int64_t draws = r.integer("draws");
  double sq = 0;
  for (int64_t k = 0; k < draws; ++k) {
    const double c = relative_output_change(model, batch, r.real("eps"), r.seed(i) * 7919 + static_cast<uint64_t>(k));
    sq += c * c / static_cast<double>(draws);
  }
  return std::sqrt(sq);
}

Amplification amplification(Report& r, const std::vector<int64_t>& depths) {
  const IdData data = builtin_corpus(r.integer("pairs"), 1);
  const train::Batch batch = batches(data.train, r.integer("max-tokens"), 1).front();
  Amplification a;
  std::vector<double> x;
  for (int64_t N : depths) x.push_back(static_cast<double>(N));
  std::vector<std::vector<double>> per_seed[2];
  for (int pre = 1; pre >= 0; --pre) {
    per_seed[pre].resize(static_cast<size_t>(r.seeds()));
    for (int64_t N : depths)
      for (int i = 0; i < r.seeds(); ++i) per_seed[pre][i].push_back(rms_change(data, batch, r, N, pre, i));
    a.change[pre] = spread_per_column(per_seed[pre]);
    std::vector<double> sq;
    for (const auto& s : a.change[pre]) sq.push_back(s.mean * s.mean);
    a.slope_sq[pre] = loglog_slope(x, sq);
    a.seed_change[pre] = per_seed[pre];
  }
  report_amplification(r, depths, batch.rows, a);
  return a;
}

// ---- (b) and (c): attention-only stacks ----
struct Collapse {
  std::vector<std::vector<double>> seed_res[2], seed_qk[2];  // [skip] per seed, per layer (res: 0..L, qk: 1..L)
  std::vector<Spread> res[2];     // [skip] per layer 0..L, over seeds
  std::vector<Spread> qk[2];      // [skip] per layer 1..L: sqrt((|gQ|^2 + |gK|^2) / 2) / |gV|
  std::vector<Spread> q[2], k[2];
};

// Prints (b) and (c)'s table, draws their panels, keeps their numbers.
void report_collapse(Report& r, const Collapse& c) {
  const int64_t L = r.integer("attn-layers"), d = r.integer("attn-d-model"), heads = r.integer("attn-heads");
  const int64_t n = r.integer("tokens"), B = r.integer("attn-batch");
  r.section(fmt::format("(b) rank collapse and (c) query/key against value gradients through {} attention-only layers (d_model {}, {} heads, {} tokens, {} sequences, float64)",
                        L, d, heads, n, B));
  r.say("res: |X - 1 x^T| / |X| of the layer's output (layer 0: the input), mean [min, max] over seeds; QK/V: sqrt((|gW_Q|^2 + |gW_K|^2) / 2) / |gW_V|");
  r.say("of that layer's in_proj_weight for the loss <X_L, R>, R ~ N(0, 1)");
  Table t("collapse", {"layer", "res no skip", "min", "max", "res skip", "min", "max", "QK/V no skip", "Q/V no skip", "K/V no skip", "QK/V skip"});
  for (int64_t l = 0; l <= L; ++l) {
    const bool has_grad = l > 0;
    t.row({l, c.res[0][l].mean, c.res[0][l].min, c.res[0][l].max, c.res[1][l].mean, c.res[1][l].min, c.res[1][l].max,
           has_grad ? Cell(c.qk[0][l - 1].mean) : Cell("-"), has_grad ? Cell(c.q[0][l - 1].mean) : Cell("-"),
           has_grad ? Cell(c.k[0][l - 1].mean) : Cell("-"), has_grad ? Cell(c.qk[1][l - 1].mean) : Cell("-")});
  }
  r.print(t);
  std::vector<double> x0, x1;
  for (int64_t l = 0; l <= L; ++l) x0.push_back(static_cast<double>(l));
  for (int64_t l = 1; l <= L; ++l) x1.push_back(static_cast<double>(l));
  r.add_panel(Chart{"(b) distance from rank 1, attention only", "layer", "res(X) (band: seeds)", false, true,
                    {band_series("no skip", x0, c.res[0], kPostColor), band_series("with skip", x0, c.res[1], kPreColor)}, x0,
                    Chart::Corner::TopRight});
  std::vector<Spread> res_in(c.res[0].begin(), c.res[0].end() - 1);  // each layer's input
  ChartSeries input{"input's res, no skip", x1, {}, {}, {}, true, kPostColor};
  for (const auto& v : res_in) input.y.push_back(v.mean);
  r.add_panel(Chart{"(c) query/key against value gradients", "layer", "|g_QK| / |g_V| (band: seeds)", false, true,
                    {band_series("no skip", x1, c.qk[0], kPostColor), band_series("with skip", x1, c.qk[1], kPreColor), input}, x1,
                    Chart::Corner::BottomLeft});
  auto& j = r.data()["attention_only"];
  j["layers"] = L;
  for (int skip = 0; skip < 2; ++skip)
    j[skip ? "skip" : "no_skip"] = {{"res_mean", means(c.res[skip])}, {"qk_over_v_mean", means(c.qk[skip])}, {"q_over_v_mean", means(c.q[skip])},
                                    {"k_over_v_mean", means(c.k[skip])}};
}

Collapse collapse(Report& r) {
  const int64_t L = r.integer("attn-layers"), d = r.integer("attn-d-model"), heads = r.integer("attn-heads");
  const int64_t n = r.integer("tokens"), B = r.integer("attn-batch");
  Collapse c;
  for (int skip = 0; skip < 2; ++skip) {
    std::vector<std::vector<double>> res, qk, q, k;
    for (int i = 0; i < r.seeds(); ++i) {
      AttentionStack s = attention_stack(L, skip, d, heads, n, B, r.seed(i) * 104729 + 17);
      res.push_back(s.res), q.push_back(s.q_over_v), k.push_back(s.k_over_v);
      std::vector<double> both;
      for (size_t l = 0; l < s.q_over_v.size(); ++l) both.push_back(std::sqrt(0.5 * (s.q_over_v[l] * s.q_over_v[l] + s.k_over_v[l] * s.k_over_v[l])));
      qk.push_back(both);
    }
    c.res[skip] = spread_per_column(res), c.qk[skip] = spread_per_column(qk), c.q[skip] = spread_per_column(q), c.k[skip] = spread_per_column(k);
    c.seed_res[skip] = res, c.seed_qk[skip] = qk;
  }
  report_collapse(r, c);
  return c;
}


// The claims (lab/claims.cpp's rows for depth), each from per-seed statistics.
void check_claims(Report& r, const std::vector<int64_t>& depths, const Amplification& a, const Collapse& c) {
  // Admin's Theorem 2: Var[dF] ~ sum_i beta_i^2 with beta_i^2 ~ 1 (Post-LN: O(N)) or ~ 1/i (Pre-LN:
  // sum_{i <= N} 1/i, O(log N)). Over these depths those laws have log-log slopes 1 and s_log; a
  // seed's slope is read against their midpoint.
  std::vector<double> x;
  for (int64_t N : depths) x.push_back(static_cast<double>(N));
  const double s_log = loglog_slope(x, harmonic_numbers(depths)), mid = 0.5 * (1 + s_log);
  // The dose-response on depth: per seed, the slope of log2 of the squared change on log2(N), the
  // exponent of a power law in N (depth multiplies: the levels are doublings).
  std::vector<double> slope[2];
  for (int pre = 0; pre < 2; ++pre) {
    std::vector<std::vector<double>> lg;
    for (const auto& seed : a.seed_change[pre]) {
      lg.emplace_back();
      for (double c : seed) lg.back().push_back(std::log2(c * c));
    }
    slope[pre] = r.dose_response({pre ? "depth, Pre-LN" : "depth, Post-LN", "layers N", fmt::format("log2 |dF|^2 / |F|^2, {}", ln_name(pre)), x, lg,
                                  TrendKind::LogSlope, true, pre ? kPreColor : kPostColor});
  }
  std::vector<double> more, post_mid, pre_mid;
  for (size_t i = 0; i < slope[0].size(); ++i) {
    more.push_back(slope[0][i] - slope[1][i]);
    post_mid.push_back(slope[0][i] - mid);
    pre_mid.push_back(slope[1][i] - mid);
  }
  const std::string laws = fmt::format("O(N): slope 1; O(log N) (sum of 1/i) over these depths: {:.3f}; midpoint {:.3f}", s_log, mid);
  r.paper("postln_amplifies_more", more,
          fmt::format("slope of the squared change per seed, Post-LN {:.3f}; Pre-LN {:.3f}", fmt::join(slope[0], ", "), fmt::join(slope[1], ", ")));
  // Not a claim (see docs/labs.md's change log): whether Post-LN's slope is nearer O(N) than
  // O(log N); at 5 seeds its interval straddles the midpoint.
  r.say(fmt::format("not claimed: Post-LN's slope minus the midpoint, {} (t 95%): O(N) against O(log N) is not settled at this many seeds",
                    [&] {
                      const Interval iv = t_interval(post_mid);
                      return fmt::format("{:.3f} [{:.3f}, {:.3f}]", iv.mean, iv.lo, iv.hi);
                    }()));
  r.paper("preln_nearer_log", pre_mid, fmt::format("Pre-LN slope - midpoint per seed; {}", laws));
  // (b): the last layer's res against the input's, per seed.
  std::vector<double> collapse, kept;
  for (int skip = 0; skip < 2; ++skip)
    for (const auto& res : c.seed_res[skip]) (skip ? kept : collapse).push_back(skip ? res.back() / res.front() : std::log10(res.back() / res.front()));
  r.paper("collapse_without_skips", collapse, fmt::format("log10(res after the last layer / res of the input) without skips, per seed: {:.3g}",
                                                          fmt::join(collapse, ", ")));
  r.paper("skips_prevent_collapse", kept, fmt::format("res after the last layer / res of the input with skips, per seed: {:.3g}", fmt::join(kept, ", ")));
  // (c): at the deepest layer whose input (no skips) is still far from rank 1 (res above 1e-6, far
  // above float64's rounding floor of about 1e-16), QK/V without skips against QK/V with them.
  constexpr double kFloorRes = 1e-6;
  std::vector<double> vanish;
  std::vector<std::string> at;
  for (size_t i = 0; i < c.seed_res[0].size(); ++i) {
    size_t layer = 0;  // index into qk: layer l's input is res[l]
    for (size_t l = 0; l < c.seed_qk[0][i].size(); ++l)
      if (c.seed_res[0][i][l] > kFloorRes) layer = l;
    vanish.push_back(std::log10(c.seed_qk[0][i][layer] / c.seed_qk[1][i][layer]));
    at.push_back(fmt::format("layer {} (input res {:.2g}): {:.3g} against {:.3g}", layer + 1, c.seed_res[0][i][layer], c.seed_qk[0][i][layer],
                             c.seed_qk[1][i][layer]));
  }
  r.paper("qk_gradients_vanish", vanish, fmt::format("QK/V without against with skips, per seed: {}", fmt::join(at, "; ")));
}

// --control: the placebo. A pool of Pre-LN models and of attention stacks with skips, each on its
// own seed; the two contrasts between arms (Post-LN against Pre-LN, without against with skips)
// between two groups of them. The other claims hold one arm against a threshold.
void placebo(Report& r, const std::vector<int64_t>& depths) {
  const int n = r.placebo_pool();
  const int64_t L = r.integer("attn-layers");
  r.say(fmt::format("PLACEBO: {} Pre-LN models and {} attention stacks with skips on seeds {}-{}; each contrast compares two groups of them, "
                    "unpaired.", n, n, r.seed(0), r.seed(n - 1)));
  const IdData data = builtin_corpus(r.integer("pairs"), 1);
  const train::Batch batch = batches(data.train, r.integer("max-tokens"), 1).front();
  std::vector<double> x, slope, qk;
  for (int64_t N : depths) x.push_back(static_cast<double>(N));
  Table t("the pool", {"seed", "Pre-LN: slope of the squared change", "with skips: QK/V at the last layer"});
  for (int i = 0; i < n; ++i) {
    std::vector<double> lg;
    for (int64_t N : depths) lg.push_back(std::log2(std::pow(rms_change(data, batch, r, N, true, i), 2)));
    slope.push_back(trend(x, lg, TrendKind::LogSlope));
    const AttentionStack s = attention_stack(L, true, r.integer("attn-d-model"), r.integer("attn-heads"), r.integer("tokens"),
                                             r.integer("attn-batch"), r.seed(i) * 104729 + 17);
    qk.push_back(std::sqrt(0.5 * (s.q_over_v.back() * s.q_over_v.back() + s.k_over_v.back() * s.k_over_v.back())));
    t.row({static_cast<int64_t>(r.seed(i)), slope.back(), qk.back()});
  }
  r.print(t);
  r.placebo("postln_amplifies_more", [&](int a, int b) { return slope[b] - slope[a]; }, "Pre-LN model a as Pre-LN, b as Post-LN");
  const std::string one_arm = "one arm against a threshold, no contrast between arms";
  for (const char* id : {"preln_nearer_log", "collapse_without_skips", "skips_prevent_collapse"}) r.no_placebo(id, one_arm);
  r.placebo("qk_gradients_vanish", [&](int a, int b) { return std::log10(qk[b] / qk[a]); },
            "stack a with skips as 'with skips', b as 'without' (its last layer)");
}

void run(Report& r) {
  const std::vector<int64_t> depths = parse_increasing_ints(r.text("depths"), "lab depth: --depths");
  GF_CHECK(depths.size() >= 4, "lab depth: --depths needs 4 or more depths for the dose-response, got '{}'", r.text("depths"));
  if (r.placebo_mode()) return placebo(r, depths);
  const Amplification a = amplification(r, depths);
  const Collapse c = collapse(r);
  check_claims(r, depths, a, c);
}

}  // namespace

Lab depth_lab() {
  Lab l;
  l.name = "depth";
  l.title = "amplification and rank collapse with depth";
  l.reference = "Liu et al. 2020, arXiv:2004.08249 (Admin, Theorem 2); Dong et al. 2021, arXiv:2103.03404; Noci et al. 2022, arXiv:2206.03126";
  l.question = "How much does a small change of the weights move the output of a deep Post-LN or Pre-LN Transformer, and how fast do "
               "tokens become alike through attention-only layers, with and without skip connections?";
  l.control = "placebo: two groups of seeds of the Pre-LN model (a) and of the stack with skips (b, c)";
  l.placebo = true;
  l.default_seeds = 6;
  l.options = {{"pairs", Option::Int, "500", "built-in corpus pairs for (a)"},
               {"d-model", Option::Int, "64", "(a) model width"},
               {"heads", Option::Int, "4", "(a) attention heads"},
               {"ff", Option::Int, "256", "(a) FFN width"},
               {"max-tokens", Option::Int, "512", "(a) tokens in the batch"},
               {"depths", Option::Text, "1,2,4,8,16,32", "(a) layers per stack: the dose-response's levels (4 or more, increasing)"},
               {"eps", Option::Real, "0.01", "(a) relative size of the weight change"},
               {"draws", Option::Int, "3", "(a) random weight changes per model"},
               {"attn-layers", Option::Int, "12", "(b, c) attention-only layers"},
               {"attn-d-model", Option::Int, "64", "(b, c) width"},
               {"attn-heads", Option::Int, "4", "(b, c) heads"},
               {"tokens", Option::Int, "16", "(b, c) tokens per sequence"},
               {"attn-batch", Option::Int, "8", "(b, c) sequences"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

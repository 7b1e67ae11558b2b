// Lab `scale`: why attention divides the scores by sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).
//
// The paper: "for large values of d_k, the dot products grow large in magnitude, pushing the
// softmax function into regions where it has extremely small gradients"; if q and k have
// independent components of mean 0 and variance 1, q . k has mean 0 and variance d_k.
//
// Here: q and k drawn N(0, 1) for d_k from 8 to 512; for the unscaled scores q . k and the scaled
// ones q . k / sqrt(d_k), the variance of the scores, the softmax's largest probability and
// entropy, the size of the softmax Jacobian, and the gradient that backward carries through a
// whole attention, softmax(Q K^T * scale) V, to the queries.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "tensor/kernels/random.h"

namespace gf::lab {
namespace {

struct Measure {
  double score_var = 0;     // variance of the (scaled or unscaled) scores
  double max_prob = 0;      // mean over rows of the largest softmax probability
  double entropy = 0;       // mean over rows of the softmax entropy, in nats
  double saturated = 0;     // share of rows whose largest probability exceeds 0.99
  double jacobian = 0;      // median over rows of || diag(p) - p p^T ||_F
  double grad = 0;          // median over rows of |d loss / d scores| / |d loss / d p|, by backward
  double grad_mean = 0;     // mean over rows of the same
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One batch: B sequences of L queries against S keys of width dk, float64.
Measure measure(int64_t dk, bool scaled, int64_t B, int64_t L, int64_t S, uint64_t seed) {
  Generator gen(seed);
  Variable q(kernels::randn({B, L, dk}, gen, DType::Float64), true);   // (B, L, dk)
  Variable k(kernels::randn({B, S, dk}, gen, DType::Float64));         // (B, S, dk)
  Variable v(kernels::randn({B, S, dk}, gen, DType::Float64));         // (B, S, dk)
  Tensor upstream = kernels::randn({B, L, dk}, gen, DType::Float64);   // (B, L, dk): d loss / d output
  const double scale = scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0;

  Variable scores = matmul(q, transpose(k, -2, -1)) * scale;  // (B, L, S)
  scores.retain_grad();
  Variable p = softmax(scores);                               // (B, L, S)
  Variable out = matmul(p, v);                                // (B, L, dk)
  Variable loss = sum(out * Variable(upstream));              // (): <out, upstream>
  loss.backward();

  Measure m;
  const Tensor s = scores.data(), w = p.data();
  double ss = 0, mean = 0;
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) mean += s.flat_get(i);
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) ss += (s.flat_get(i) - mean) * (s.flat_get(i) - mean);
  m.score_var = ss / static_cast<double>(n - 1);

  const double* pw = w.contiguous().data<double>();
  const int64_t rows = B * L;
  std::vector<double> jac, ratio;
  // What the softmax passes back: the gradient at its input (the scores) against that at its output.
  const Tensor gs = scores.grad().contiguous();                                        // (B, L, S)
  const Tensor gp = matmul(Variable(upstream), transpose(v, -2, -1)).data().contiguous();  // (B, L, S): d loss / d p
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = pw + r * S;
    double mx = 0, h = 0, s2 = 0, s3 = 0;
    for (int64_t j = 0; j < S; ++j) {
      mx = std::max(mx, row[j]);
      if (row[j] > 0) h -= row[j] * std::log(row[j]);
      s2 += row[j] * row[j];
      s3 += row[j] * row[j] * row[j];
    }
    m.max_prob += mx;
    m.entropy += h;
    m.saturated += mx > 0.99;
    // || diag(p) - p p^T ||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2
    jac.push_back(std::sqrt(std::max(0.0, s2 - 2 * s3 + s2 * s2)));
    double a = 0, b = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double x = gs.data<double>()[r * S + j], y = gp.data<double>()[r * S + j];
      a += x * x, b += y * y;
    }
    ratio.push_back(std::sqrt(a / b));
  }
  m.max_prob /= rows, m.entropy /= rows, m.saturated /= rows;
  m.jacobian = median(jac);
  m.grad = median(ratio);
  m.grad_mean = spread(ratio).mean;
  return m;
}

void run(Report& r) {
  const int64_t B = r.integer("batch"), L = r.integer("queries"), S = r.integer("keys");
  const std::vector<int64_t> dks = {8, 16, 32, 64, 128, 256, 512};
  r.say(fmt::format("q, k, v ~ N(0, 1); {} sequences of {} queries x {} keys per d_k, {} seeds; float64", B, L, S, r.seeds()));

  struct Row {
    int64_t dk;
    Measure un, sc;  // means over seeds
    Spread grad_un, grad_sc;
  };
  std::vector<Row> rows;
  for (int64_t dk : dks) {
    Row row{dk, {}, {}, {}, {}};
    std::vector<double> gu, gs;
    for (int i = 0; i < r.seeds(); ++i) {
      for (bool scaled : {false, true}) {
        Measure m = measure(dk, scaled, B, L, S, r.seed(i) * 7919 + static_cast<uint64_t>(dk));
        Measure& acc = scaled ? row.sc : row.un;
        acc.score_var += m.score_var / r.seeds(), acc.max_prob += m.max_prob / r.seeds(), acc.entropy += m.entropy / r.seeds();
        acc.saturated += m.saturated / r.seeds(), acc.jacobian += m.jacobian / r.seeds();
        acc.grad += m.grad / r.seeds(), acc.grad_mean += m.grad_mean / r.seeds();
        (scaled ? gs : gu).push_back(m.grad);
      }
    }
    row.grad_un = spread(gu), row.grad_sc = spread(gs);
    rows.push_back(row);
  }

  r.section("scores q . k: unscaled against scaled by 1/sqrt(d_k) (means over seeds)");
  Table t("scale", {"d_k", "var unscaled", "var scaled", "max p unscaled", "max p scaled", "H unscaled", "H scaled", "saturated unscaled",
                    "|J| unscaled", "|J| scaled", "grad unscaled", "grad scaled", "mean grad unscaled"});
  for (const auto& x : rows)
    t.row({x.dk, x.un.score_var, x.sc.score_var, x.un.max_prob, x.sc.max_prob, x.un.entropy, x.sc.entropy, x.un.saturated, x.un.jacobian,
           x.sc.jacobian, x.un.grad, x.sc.grad, x.un.grad_mean});
  r.print(t);
  r.say(fmt::format("H: mean softmax entropy in nats (uniform over {} keys: {:.3f}); |J|: median over rows of the Frobenius norm", S,
                    std::log(static_cast<double>(S))));
  r.say("of the softmax Jacobian diag(p) - p p^T; saturated: share of rows whose largest probability exceeds 0.99;");
  r.say("grad: median over rows of |d loss / d scores| / |d loss / d p| in softmax(Q K^T s) V, measured by backward (the");
  r.say("mean over rows: last column; it falls more slowly, carried by the rows that have not saturated).");

  // ---- raw numbers and figure ----
  std::vector<double> x, var_un, var_sc, mp_un, mp_sc, h_un, h_sc, j_un, j_sc, gq_un, gq_sc, lo_un, hi_un, lo_sc, hi_sc, gm_un;
  for (const auto& row : rows) {
    x.push_back(static_cast<double>(row.dk));
    var_un.push_back(row.un.score_var), var_sc.push_back(row.sc.score_var);
    mp_un.push_back(row.un.max_prob), mp_sc.push_back(row.sc.max_prob);
    h_un.push_back(row.un.entropy), h_sc.push_back(row.sc.entropy);
    j_un.push_back(row.un.jacobian), j_sc.push_back(row.sc.jacobian);
    gq_un.push_back(row.un.grad), gq_sc.push_back(row.sc.grad), gm_un.push_back(row.un.grad_mean);
    lo_un.push_back(row.grad_un.min), hi_un.push_back(row.grad_un.max);
    lo_sc.push_back(row.grad_sc.min), hi_sc.push_back(row.grad_sc.max);
  }
  auto& d = r.data();
  d["d_k"] = x;
  d["unscaled"] = {{"score_var", var_un}, {"max_prob", mp_un}, {"entropy", h_un}, {"jacobian_norm_median", j_un},
                   {"grad_ratio_median", gq_un}, {"grad_ratio_mean", gm_un}};
  d["scaled"] = {{"score_var", var_sc}, {"max_prob", mp_sc}, {"entropy", h_sc}, {"jacobian_norm_median", j_sc},
                 {"grad_ratio_median", gq_sc}};
  d["keys"] = S;
  r.add_panel(Chart{"variance of the scores", "d_k", "Var", true, true,
                    {{"unscaled q.k", x, var_un, {}, {}, false}, {"scaled q.k/sqrt(d_k)", x, var_sc, {}, {}, false}, {"d_k (the paper)", x, x, {}, {}, true}},
                    x});
  r.add_panel(Chart{"largest softmax probability", "d_k", "mean max p", true, false,
                    {{"unscaled", x, mp_un, {}, {}, false}, {"scaled", x, mp_sc, {}, {}, false}}, x});
  r.add_panel(Chart{"softmax entropy", "d_k", "nats", true, false, {{"unscaled", x, h_un, {}, {}, false}, {"scaled", x, h_sc, {}, {}, false}}, x});
  r.add_panel(Chart{"softmax Jacobian (median row)", "d_k", "|diag(p) - p p^T|", true, true,
                    {{"unscaled", x, j_un, {}, {}, false}, {"scaled", x, j_sc, {}, {}, false}}, x});
  r.add_panel(Chart{"gradient through the softmax, by backward (band: seeds)", "d_k", "|d scores| / |d p|", true, true,
                    {{"unscaled, median row", x, gq_un, lo_un, hi_un, false, "#1f77b4"},
                     {"unscaled, mean", x, gm_un, {}, {}, true, "#1f77b4"},
                     {"scaled, median row", x, gq_sc, lo_sc, hi_sc, false, "#d62728"}},
                    x});

  // ---- claims, from the numbers above ----
  const double slope = loglog_slope(x, var_un);
  r.claim("Var(q . k) grows as d_k (log-log slope 1)", std::abs(slope - 1) < 0.1,
          fmt::format("slope {:.3f}; Var {:.1f} at d_k 8, {:.1f} at d_k 512", slope, var_un.front(), var_un.back()));
  const double j_drop = j_un.back() / j_un.front(), g_drop = gq_un.back() / gq_un.front();
  r.claim("unscaled, the softmax saturates as d_k grows and its gradients vanish",
          rows.back().un.saturated > 0.5 && j_drop < 0.1 && g_drop < 0.1,
          fmt::format("from d_k 8 to 512: mean max p {:.3f} -> {:.3f}, {:.0f}% of rows saturated at 512, median |J| {:.3g} -> {:.3g} ({:.3f}x), gradient through the softmax {:.3g} -> {:.3g} ({:.3f}x)", mp_un.front(),
                      mp_un.back(), 100 * rows.back().un.saturated, j_un.front(), j_un.back(), j_drop, gq_un.front(), gq_un.back(), g_drop));
  auto flat = [](const std::vector<double>& v) {
    Spread s = spread(v);
    return s.max / s.min;
  };
  r.claim("scaled, the scores keep variance 1 and the softmax and its gradient stay the same at every d_k",
          flat(var_sc) < 1.15 && flat(mp_sc) < 1.15 && flat(j_sc) < 1.15 && flat(gq_sc) < 1.25,
          fmt::format("max/min over d_k: Var {:.3f}, max p {:.3f}, median |J| {:.3f}, gradient {:.3f}", flat(var_sc), flat(mp_sc), flat(j_sc), flat(gq_sc)));
}

}  // namespace

Lab scale_lab() {
  Lab l;
  l.name = "scale";
  l.title = "why attention scales the scores by 1/sqrt(d_k)";
  l.reference = "Vaswani et al. 2017, arXiv:1706.03762 (section 3.2.1)";
  l.question = "How do the scores, the softmax and its gradient change with d_k, with and without the scaling?";
  l.default_seeds = 5;
  l.options = {{"batch", Option::Int, "16", "sequences per d_k and seed"},
               {"queries", Option::Int, "32", "queries per sequence"},
               {"keys", Option::Int, "32", "keys per sequence"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

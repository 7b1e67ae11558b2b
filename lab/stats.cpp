#include "lab/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::lab {

const char* side_name(Compare s) { return s == Compare::Above ? "above" : "below"; }
const char* side_symbol(Compare s) { return s == Compare::Above ? ">" : "<"; }
bool on_side(Compare side, double threshold, double value) { return side == Compare::Above ? value > threshold : value < threshold; }

double t_quantile_975(int df) {
  GF_CHECK(df >= 1, "t_quantile_975: degrees of freedom must be at least 1, got {}", df);
  // t(0.975, df) for df 1..30, to 9 decimals (the Student t CDF integrated numerically).
  static const double table[30] = {12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
                                   2.306004135,  2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688,
                                   2.131449546,  2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845,
                                   2.073873068,  2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
                                   2.045229642,  2.042272456};
  if (df <= 30) return table[df - 1];
  // Beyond 30: the Cornish-Fisher expansion about the normal quantile (error below 1e-6 there).
  const double z = 1.959963984540054, v = df;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v);
}

Interval t_interval(const std::vector<double>& per_seed) {
  const int n = static_cast<int>(per_seed.size());
  GF_CHECK(n >= 2, "t_interval: an interval needs at least 2 values (seeds), got {}", n);
  Interval iv{NAN, NAN, NAN, n, "t 95%"};
  for (double x : per_seed)
    if (!std::isfinite(x)) return iv;
  double mean = 0, ss = 0;
  for (double x : per_seed) mean += x / n;
  for (double x : per_seed) ss += (x - mean) * (x - mean);
  const double half = t_quantile_975(n - 1) * std::sqrt(ss / (n - 1)) / std::sqrt(static_cast<double>(n));
  iv.mean = mean, iv.lo = mean - half, iv.hi = mean + half;
  return iv;
}

Interval bootstrap_interval(const std::vector<double>& values, uint64_t seed) {
  const size_t n = values.size();
  GF_CHECK(n >= 2, "bootstrap_interval: an interval needs at least 2 values, got {}", n);
  Interval iv{NAN, NAN, NAN, static_cast<int>(n), "bootstrap 95%"};
  for (double x : values)
    if (!std::isfinite(x)) return iv;
  double mean = 0;
  for (double x : values) mean += x / static_cast<double>(n);
  constexpr int kResamples = 10000;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> means(kResamples);
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += values[pick(rng)];
    m = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  // The q-quantile with linear interpolation between order statistics (numpy's default).
  auto quantile = [&](double q) {
    const double pos = q * (kResamples - 1);
    const size_t i = static_cast<size_t>(pos);
    const double f = pos - static_cast<double>(i);
    return i + 1 < means.size() ? means[i] * (1 - f) + means[i + 1] * f : means[i];
  };
  iv.mean = mean, iv.lo = quantile(0.025), iv.hi = quantile(0.975);
  return iv;
}

namespace {
// The regularised incomplete beta function I_x(a, b), by its continued fraction (modified Lentz),
// which converges fast for x < (a + 1) / (a + b + 2); the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
// covers the rest.
double beta_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::fabs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    for (int half = 0; half < 2; ++half) {
      const double num = half == 0 ? m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)) : -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1 + num * d;
      d = 1 / (std::fabs(d) < tiny ? tiny : d);
      c = 1 + num / c;
      if (std::fabs(c) < tiny) c = tiny;
      h *= c * d;
      if (half == 1 && std::fabs(c * d - 1) < 1e-15) return h;
    }
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, 1 - x) / b;
}
}  // namespace

double t_cdf(double t, int df) {
  GF_CHECK(df >= 1, "t_cdf: degrees of freedom must be at least 1, got {}", df);
  if (std::isnan(t)) return NAN;
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  const double v = df, tail = 0.5 * incomplete_beta(v / 2, 0.5, v / (v + t * t));  // P(T > |t|)
  return t > 0 ? 1 - tail : tail;
}

double t_quantile(double p, int df) {
  GF_CHECK(p > 0 && p < 1, "t_quantile: p must lie in (0, 1), got {}", p);
  if (p < 0.5) return -t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

Interval t_interval_at(const std::vector<double>& per_seed, double level, double range_lo, double range_hi) {
  const int n = static_cast<int>(per_seed.size());
  GF_CHECK(n >= 2, "t_interval: an interval needs at least 2 values (seeds), got {}", n);
  GF_CHECK(level > 0 && level < 1, "t_interval: the level must lie in (0, 1), got {}", level);
  Interval iv = t_interval(per_seed);
  iv.method = fmt::format("t {:.4g}%", 100 * level);
  if (!std::isfinite(iv.mean)) return iv;
  const double half95 = iv.hi - iv.mean, t = t_quantile(1 - (1 - level) / 2, n - 1);
  const double half = half95 / t_quantile_975(n - 1) * t;
  iv.lo = std::clamp(iv.mean - half, range_lo, range_hi);
  iv.hi = std::clamp(iv.mean + half, range_lo, range_hi);
  return iv;
}


const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Supported: return "supported";
    case Outcome::Contradicted: return "contradicted";
    case Outcome::Unsettled: return "unsettled";
  }
  return "?";
}


const char* trend_name(TrendKind k) {
  switch (k) {
    case TrendKind::Slope: return "slope";
    case TrendKind::LogSlope: return "slope per doubling";
    case TrendKind::Rank: return "Spearman rho";
  }
  return "?";
}

double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y) {
  GF_CHECK(x.size() == y.size(), "least_squares_slope: {} x values for {} y values", x.size(), y.size());
  GF_CHECK(x.size() >= 2, "least_squares_slope: a slope needs at least 2 points, got {}", x.size());
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return NAN;
    mx += x[i] / n, my += y[i] / n;
  }
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  return sxx > 0 ? sxy / sxx : NAN;
}

double trend(const std::vector<double>& levels, const std::vector<double>& stat, TrendKind kind) {
  GF_CHECK(levels.size() >= 4, "trend: a dose-response needs at least 4 levels, got {}", levels.size());
  GF_CHECK(levels.size() == stat.size(), "trend: {} levels for {} values of the statistic", levels.size(), stat.size());
  for (size_t i = 1; i < levels.size(); ++i)
    GF_CHECK(levels[i] > levels[i - 1], "trend: the levels must increase strictly, got {} after {}", levels[i], levels[i - 1]);
  switch (kind) {
    case TrendKind::Slope: return least_squares_slope(levels, stat);
    case TrendKind::LogSlope: {
      GF_CHECK(levels.front() > 0, "trend: a slope per doubling needs levels above 0, got {}", levels.front());
      std::vector<double> l2;
      for (double l : levels) l2.push_back(std::log2(l));
      return least_squares_slope(l2, stat);
    }
    case TrendKind::Rank:
      for (double v : stat)
        if (!std::isfinite(v)) return NAN;
      return spearman(levels, stat);
  }
  return NAN;
}


Spread spread(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

std::vector<Spread> spread_per_column(const std::vector<std::vector<double>>& rows) {
  GF_CHECK(!rows.empty(), "spread_per_column: no rows");
  std::vector<Spread> out;
  for (size_t k = 0; k < rows.front().size(); ++k) {
    std::vector<double> column;
    for (size_t i = 0; i < rows.size(); ++i) {
      GF_CHECK(rows[i].size() == rows.front().size(), "spread_per_column: row {} has {} values but row 0 has {}", i, rows[i].size(),
               rows.front().size());
      column.push_back(rows[i][k]);
    }
    out.push_back(spread(column));
  }
  return out;
}

std::vector<double> means(const std::vector<Spread>& s) {
  std::vector<double> m;
  for (const auto& v : s) m.push_back(v.mean);
  return m;
}


double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> lx, ly;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
    if (x[i] > 0 && y[i] > 0 && std::isfinite(x[i]) && std::isfinite(y[i])) lx.push_back(std::log(x[i])), ly.push_back(std::log(y[i]));
  if (lx.size() < 2) return NAN;
  const double mx = std::accumulate(lx.begin(), lx.end(), 0.0) / lx.size(), my = std::accumulate(ly.begin(), ly.end(), 0.0) / ly.size();
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < lx.size(); ++i) sxy += (lx[i] - mx) * (ly[i] - my), sxx += (lx[i] - mx) * (lx[i] - mx);
  return sxx > 0 ? sxy / sxx : NAN;
}

namespace {

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j);  // average rank of a tie
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return NAN;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double m = 0.5 * static_cast<double>(a.size() - 1);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) sab += (ra[i] - m) * (rb[i] - m), saa += (ra[i] - m) * (ra[i] - m), sbb += (rb[i] - m) * (rb[i] - m);
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return NAN;
  double concordant = 0, discordant = 0, tied_a = 0, tied_b = 0, pairs = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      pairs += 1;
      if (da == 0) tied_a += 1;
      if (db == 0) tied_b += 1;
      if (da * db > 0) concordant += 1;
      if (da * db < 0) discordant += 1;
    }
  const double denominator = std::sqrt((pairs - tied_a) * (pairs - tied_b));  // tau-b: ties on either side leave the pairs that rank
  return denominator > 0 ? (concordant - discordant) / denominator : NAN;
}

double sign_test_p(int64_t wins, int64_t n) {
  GF_CHECK(n >= 0 && wins >= 0 && wins <= n, "sign_test_p: need 0 <= wins <= n, got wins {}, n {}", wins, n);
  // In log space: C(n, i) and 2^n overflow a double once n passes about 1,000; their ratio does not.
  double p = 0;
  for (int64_t i = wins; i <= n; ++i)
    p += std::exp(std::lgamma(static_cast<double>(n + 1)) - std::lgamma(static_cast<double>(i + 1)) -
                  std::lgamma(static_cast<double>(n - i + 1)) - static_cast<double>(n) * std::log(2.0));
  return std::min(p, 1.0);
}


SidePValues side_p_values(Compare side, double threshold, const std::vector<double>& per_seed) {
  const int n = static_cast<int>(per_seed.size());
  GF_CHECK(n >= 2, "side_p_values: a test needs at least 2 values (seeds), got {}", n);
  for (double x : per_seed)
    if (!std::isfinite(x)) return {};
  double mean = 0, ss = 0;
  for (double x : per_seed) mean += x / n;
  for (double x : per_seed) ss += (x - mean) * (x - mean);
  const double se = std::sqrt(ss / (n - 1) / n);
  if (se == 0) {  // no spread: the mean alone decides
    const bool above = mean > threshold, below = mean < threshold;
    const bool claimed = side == Compare::Above ? above : below, other = side == Compare::Above ? below : above;
    return {claimed ? 0.0 : 1.0, other ? 0.0 : 1.0};
  }
  const double t = (mean - threshold) / se;  // large when the mean lies above the threshold
  const double p_above = 1 - t_cdf(t, n - 1), p_below = t_cdf(t, n - 1);
  return side == Compare::Above ? SidePValues{p_above, p_below} : SidePValues{p_below, p_above};
}

Outcome decide(Compare side, double threshold, const std::vector<double>& per_seed, double alpha) {
  const SidePValues p = side_p_values(side, threshold, per_seed);
  if (p.supported < alpha / 2) return Outcome::Supported;
  if (p.contradicted < alpha / 2) return Outcome::Contradicted;
  return Outcome::Unsettled;
}

int seeds_to_settle(double threshold, const std::vector<double>& per_seed, double alpha) {
  const Interval iv = t_interval_at(per_seed, 0.95, -INFINITY, INFINITY);
  const double effect = std::abs(iv.mean - threshold);
  const double sd = (iv.hi - iv.mean) / t_quantile_975(iv.n - 1) * std::sqrt(static_cast<double>(iv.n));
  if (!std::isfinite(effect) || !std::isfinite(sd) || effect == 0) return 0;
  int n = 2;
  while (n < 1000 && t_quantile(1 - alpha / 2, n - 1) * sd / std::sqrt(static_cast<double>(n)) >= effect) ++n;
  return n;
}

int seeds_needed(double min_effect, double sd, double alpha, double power) {
  if (!(min_effect > 0) || !std::isfinite(min_effect) || !(sd >= 0) || !std::isfinite(sd) || !(alpha > 0 && alpha < 1) ||
      !(power > 0 && power < 1))
    return 0;
  // t(0.5) is 0 exactly; the bisection would give it to 1e-12 only, which moves no n but is not 0.
  auto beyond = [&](int n) { return power == 0.5 ? 0.0 : t_quantile(power, n - 1); };
  int n = 2;
  while (n < 1000 && (t_quantile(1 - alpha / 2, n - 1) + beyond(n)) * sd / std::sqrt(static_cast<double>(n)) >= min_effect) ++n;
  return n;
}

double design_alpha(int paper_claims) {
  GF_CHECK(paper_claims >= 1, "design_alpha: a design needs at least 1 paper claim, got {}", paper_claims);
  return 0.05 / paper_claims;
}

}  // namespace gf::lab

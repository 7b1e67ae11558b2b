#pragma once
// The lab's statistics, as pure functions of numbers: intervals of a mean across seeds, Student's t,
// one-sided tests against a threshold, Holm's step-down, the seeds a design needs, trends over the
// levels of a factor, rank correlations and spreads. Nothing here knows of labs, claims or output;
// tests/test_lab_stats.cpp checks each against hand-computed values.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace gf::lab {

// The claimed side of a threshold (strictly).
enum class Compare { Above, Below };
const char* side_name(Compare s);    // "above", "below"
const char* side_symbol(Compare s);  // ">", "<"
// Whether `value` lies strictly on `side` of `threshold` (false for NaN).
bool on_side(Compare side, double threshold, double value);

// ---------------------------------------------------------------- intervals

// A 95% interval of a mean across seeds (seeds are the unit of replication).
struct Interval {
  // Constructors, not an aggregate, so that {1.2, 1.5, 1.4} means per-seed values where both fit.
  Interval() = default;
  Interval(double mean, double lo, double hi, int n, std::string method) : mean(mean), lo(lo), hi(hi), n(n), method(std::move(method)) {}
  double mean = 0, lo = 0, hi = 0;
  int n = 0;
  std::string method;  // "t 95%", "bootstrap 95%" or, for an exact check, "exact"
};
// Student t: mean +- t(0.975, n - 1) * sd / sqrt(n). Throws std::invalid_argument for n < 2.
// A non-finite value gives a NaN interval (which lies on no side of a threshold).
Interval t_interval(const std::vector<double>& per_seed);
// The mean +- t(1 - (1 - level) / 2, n - 1) * sd / sqrt(n) interval at a two-sided level, clipped
// to [range_lo, range_hi]. Throws std::invalid_argument for n < 2.
Interval t_interval_at(const std::vector<double>& per_seed, double level, double range_lo, double range_hi);
// Percentile bootstrap of the mean: 10,000 resamples with replacement drawn from `seed`, the
// 2.5% and 97.5% points of their means. Throws std::invalid_argument for n < 2.
Interval bootstrap_interval(const std::vector<double>& values, uint64_t seed);

// ---------------------------------------------------------------- Student's t

double t_quantile_975(int df);        // t(0.975, df), df >= 1
double t_cdf(double t, int df);       // P(T <= t), the regularised incomplete beta function
double t_quantile(double p, int df);  // the p-quantile (0 < p < 1), by bisection on t_cdf

// ---------------------------------------------------------------- tests against a threshold

enum class Outcome { Supported, Contradicted, Unsettled };
const char* outcome_name(Outcome o);  // "supported", "contradicted", "unsettled"

// The one-sided p-values of a t test of the per-seed mean against the threshold: for the claimed
// side (the evidence for "supported") and for the other side ("contradicted"). Zero spread decides
// by the mean alone (p 0 or 1); a non-finite value gives 1 and 1.
struct SidePValues {
  double supported = 1, contradicted = 1;
};
SidePValues side_p_values(Compare side, double threshold, const std::vector<double>& per_seed);
// The decision at a two-sided level alpha: supported when the claimed side's p is below alpha / 2,
// contradicted when the other side's is, unsettled otherwise.
Outcome decide(Compare side, double threshold, const std::vector<double>& per_seed, double alpha);

// Holm's step-down over m tests at a family-wise two-sided 5%: `p[k]` is test k's smaller
// one-sided p-value. Sorted by it, the j-th (0-based) is held to alpha 0.05 / (m - j) and the first
// that is not decided at its level stops the descent: it and every later one keep the stopping level
// and are unsettled. Returns each test's level, in the input's order, and whether it was stopped.
struct HolmLevel {
  double alpha = 0.05;
  bool stopped = false;  // after the descent stopped (unsettled whatever its p)
};
// `decided(k, alpha)`: whether test k is decided (supported or contradicted) at alpha; the caller's
// rule, so that a test with zero spread or no finite value is decided as decide() would.
template <class Decided>
std::vector<HolmLevel> holm(const std::vector<double>& p, Decided decided);

// ---------------------------------------------------------------- designs and power

// How many seeds an interval at two-sided level alpha needs to leave the threshold behind if the
// effect (mean - threshold) and spread stayed as measured: the smallest n with
// t(1 - alpha/2, n - 1) * sd / sqrt(n) < |mean - threshold|. 0 when the mean sits on the threshold or
// a value is not finite; capped at 1000.
int seeds_to_settle(double threshold, const std::vector<double>& per_seed, double alpha);
// The seeds that give a one-sided t test at level alpha / 2 the power `power` against a true effect of
// `min_effect` past the threshold, for a seed-to-seed sd `sd`: the smallest n >= 2 with
//   (t(1 - alpha/2, n - 1) + t(power, n - 1)) * sd / sqrt(n) <= min_effect
// (the usual approximation to the noncentral t). power 0.5 gives t(0.5) = 0: the n at which a mean
// that lands min_effect past the threshold just clears it. 2 for sd 0; 0 when min_effect is not
// above 0, alpha or power is out of (0, 1), or a number is not finite; capped at 1000.
int seeds_needed(double min_effect, double sd, double alpha, double power = 0.5);
// The level a lab's designs are held to: Holm's strictest, 0.05 / m for its m paper claims.
double design_alpha(int paper_claims);

// ---------------------------------------------------------------- trends over a factor's levels

// Slope: least squares on the level, for a factor that adds; LogSlope: on log2(level), per doubling,
// for a factor that multiplies; Rank: Spearman's rho, for a bounded or ordinal statistic.
enum class TrendKind { Slope, LogSlope, Rank };
const char* trend_name(TrendKind k);  // "slope", "slope per doubling", "Spearman rho"
// The least-squares slope of y on x. NaN when a value is not finite or x has no spread. Throws
// std::invalid_argument for fewer than 2 points or lengths that differ.
double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y);
// One seed's trend of `stat` (one value per level) against `levels`. Throws std::invalid_argument for
// fewer than 4 levels, lengths that differ, levels not strictly increasing, or LogSlope on a level <= 0.
double trend(const std::vector<double>& levels, const std::vector<double>& stat, TrendKind kind);
// Least-squares slope of log(y) on log(x) (points with x or y <= 0 are skipped); NaN below 2 points.
double loglog_slope(const std::vector<double>& x, const std::vector<double>& y);

// ---------------------------------------------------------------- correlations and spreads

// Spearman's rank correlation (average ranks for ties); NaN when either side is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);
// Kendall's tau-b; NaN when either side is constant.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);
// One-sided exact sign test: P(X >= wins), X ~ Binomial(n, 1/2).
double sign_test_p(int64_t wins, int64_t n);

struct Spread {
  double mean = 0, sd = 0, min = 0, max = 0;  // sd: sample standard deviation (0 for one value)
};
Spread spread(const std::vector<double>& v);
// One Spread per column: rows[run][k] -> the spread of column k over the runs. Throws
// std::invalid_argument for no rows or rows of different lengths.
std::vector<Spread> spread_per_column(const std::vector<std::vector<double>>& rows);
std::vector<double> means(const std::vector<Spread>& s);

// ---------------------------------------------------------------- template definitions

template <class Decided>
std::vector<HolmLevel> holm(const std::vector<double>& p, Decided decided) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  for (size_t k = 0; k < m; ++k) order[k] = k;
  for (size_t i = 1; i < m; ++i)  // a stable insertion sort: ties keep the input's order
    for (size_t j = i; j > 0 && p[order[j]] < p[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  std::vector<HolmLevel> out(m);
  bool stopped = false;
  double alpha = 0.05;
  for (size_t j = 0; j < m; ++j) {
    if (!stopped) alpha = 0.05 / static_cast<double>(m - j);
    out[order[j]] = {alpha, stopped};
    if (!stopped && !decided(order[j], alpha)) stopped = true;
  }
  return out;
}

}  // namespace gf::lab

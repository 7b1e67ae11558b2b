// The lab's statistics (lab/stats.h): pure functions of numbers, each against hand-computed values.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "lab/stats.h"

using namespace gf::lab;

TEST_CASE("t_quantile_975: Student t's 97.5% point, tabled to 30 degrees of freedom and expanded beyond") {
  // Values: the Student t CDF integrated numerically (scipy.stats.t.ppf(0.975, df) gives the same).
  CHECK(t_quantile_975(1) == doctest::Approx(12.706204736).epsilon(1e-9));
  CHECK(t_quantile_975(2) == doctest::Approx(4.302652730).epsilon(1e-9));
  CHECK(t_quantile_975(4) == doctest::Approx(2.776445105).epsilon(1e-9));
  CHECK(t_quantile_975(30) == doctest::Approx(2.042272456).epsilon(1e-9));
  CHECK(t_quantile_975(31) == doctest::Approx(2.039513446).epsilon(1e-6));
  CHECK(t_quantile_975(40) == doctest::Approx(2.021075390).epsilon(1e-6));
  CHECK(t_quantile_975(100) == doctest::Approx(1.983971519).epsilon(1e-6));
  CHECK(t_quantile_975(100000) == doctest::Approx(1.959987711).epsilon(1e-7));  // z + (z^3 + z) / (4 df) + ...
  CHECK_THROWS_AS(t_quantile_975(0), std::invalid_argument);
}


TEST_CASE("t_interval: mean +- t * sd / sqrt(n), against hand-computed values") {
  // 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5) = 0.70711, t(4) 2.776445 -> half width 1.963243.
  const Interval a = t_interval({1, 2, 3, 4, 5});
  CHECK(a.mean == doctest::Approx(3));
  CHECK(a.lo == doctest::Approx(1.0367568).epsilon(1e-7));
  CHECK(a.hi == doctest::Approx(4.9632432).epsilon(1e-7));
  CHECK(a.n == 5);
  CHECK(a.method == "t 95%");
  // {1, 3}: mean 2, sd sqrt(2), se 1, t(1) 12.706205.
  const Interval b = t_interval({1, 3});
  CHECK(b.lo == doctest::Approx(2 - 12.706204736));
  CHECK(b.hi == doctest::Approx(2 + 12.706204736));
  // No spread: the interval is the value.
  const Interval c = t_interval({0.25, 0.25, 0.25});
  CHECK(c.lo == 0.25);
  CHECK(c.hi == 0.25);
  // A non-finite value (a diverged run): no interval, which lies on no side of a threshold.
  for (double bad : {NAN, INFINITY}) {
    const Interval d = t_interval({1, 2, bad});
    CHECK(std::isnan(d.lo));
    CHECK(std::isnan(d.hi));
    CHECK(d.n == 3);
  }
  CHECK_THROWS_AS(t_interval({1}), std::invalid_argument);
  CHECK_THROWS_AS(t_interval({}), std::invalid_argument);
}


TEST_CASE("bootstrap_interval: percentile bootstrap of the mean, against hand-computed cases") {
  // {0, 1}: a resample's mean is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4, so the 2.5% point is 0
  // and the 97.5% point 1 (10,000 resamples: fewer than 251 zeros has a chance below 1e-100).
  const Interval a = bootstrap_interval({0, 1}, 7);
  CHECK(a.mean == 0.5);
  CHECK(a.lo == 0);
  CHECK(a.hi == 1);
  CHECK(a.n == 2);
  CHECK(a.method == "bootstrap 95%");
  // Equal values: every resample has their mean.
  const Interval b = bootstrap_interval({2.5, 2.5, 2.5, 2.5}, 1);
  CHECK(b.lo == 2.5);
  CHECK(b.hi == 2.5);
  // {0, 0, 0, 1} (n 4): a resample's mean is k/4, k ~ Binomial(4, 1/4): P(k = 0) = 0.316 > 2.5%,
  // P(k >= 3) = 0.051 > 2.5% and P(k = 4) = 0.0039 < 2.5%, so the interval is [0, 3/4].
  const Interval c = bootstrap_interval({0, 0, 0, 1}, 3);
  CHECK(c.lo == 0);
  CHECK(c.hi == 0.75);
  // The same seed gives the same interval; a large sample's is near the normal one.
  std::vector<double> v;
  for (int i = 0; i < 400; ++i) v.push_back(std::sin(i * 1.7) * 3);
  const Interval d = bootstrap_interval(v, 11), e = bootstrap_interval(v, 11);
  CHECK(d.lo == e.lo);
  CHECK(d.hi == e.hi);
  const Interval t = t_interval(v);
  CHECK(d.lo == doctest::Approx(t.lo).epsilon(0.05 * (t.hi - t.lo) / std::abs(t.lo) + 1e-12));
  CHECK(d.hi - d.lo == doctest::Approx(t.hi - t.lo).epsilon(0.1));
  CHECK(std::isnan(bootstrap_interval({1, NAN}, 1).lo));
  CHECK_THROWS_AS(bootstrap_interval({1}, 1), std::invalid_argument);
}



TEST_CASE("seeds_to_settle: the smallest n whose interval would leave the threshold at the effect and spread seen") {
  double threshold = 0.9;
  // mean 1.0, sd 0.2, effect 0.1: t(0.975, n - 1) / sqrt(n) < 0.5 first at n 18 (2.110 / 4.243 = 0.497;
  // n 17: 2.120 / 4.123 = 0.514).
  CHECK(seeds_to_settle(threshold, {0.8, 1.0, 1.2}, 0.05) == 18);
  CHECK(seeds_to_settle(threshold, {0.8, 1.0, 1.2}, 0.01) > 18);  // a stricter level needs more
  threshold = 1.0;
  CHECK(seeds_to_settle(threshold, {0.8, 1.0, 1.2}, 0.05) == 0);  // on the threshold: no number of seeds
  threshold = 0.999;
  CHECK(seeds_to_settle(threshold, {0.8, 1.0, 1.2}, 0.05) == 1000);  // capped
}


TEST_CASE("seeds_needed: the smallest n whose interval at the design level clears an effect of min_effect at the pilot's sd") {
  // min_effect 1, sd 1, 95%: t(0.975, n - 1) / sqrt(n) < 1 first at n 7 (2.447 / 2.646 = 0.925; n 6:
  // 2.571 / 2.449 = 1.050), from the table of t_quantile_975.
  CHECK(seeds_needed(1.0, 1.0, 0.05) == 7);
  CHECK(seeds_needed(2.0, 2.0, 0.05) == 7);   // only the ratio of effect to spread counts
  CHECK(seeds_needed(0.5, 1.0, 0.05) == 18);  // 2.110 / 4.243 = 0.497; n 17: 2.120 / 4.123 = 0.514
  // At Holm's strictest level for 7 claims (norm's design) the same effect needs more seeds; the
  // answer is the first n that meets the inequality.
  const double a7 = design_alpha(7);
  CHECK(a7 == doctest::Approx(0.05 / 7));
  const int n7 = seeds_needed(1.0, 1.0, a7);
  CHECK(n7 > 7);
  CHECK(t_quantile(1 - a7 / 2, n7 - 1) / std::sqrt(n7) < 1.0);
  CHECK(t_quantile(1 - a7 / 2, n7 - 2) / std::sqrt(n7 - 1) >= 1.0);
  CHECK(seeds_needed(1.0, 0.0, 0.05) == 2);      // no spread: the smallest interval settles it
  CHECK(seeds_needed(1e-4, 1.0, 0.05) == 1000);  // capped
  CHECK(seeds_needed(0.0, 1.0, 0.05) == 0);      // no effect stated: no design
  CHECK(seeds_needed(NAN, 1.0, 0.05) == 0);
  CHECK(seeds_needed(1.0, NAN, 0.05) == 0);
  CHECK_THROWS_AS(design_alpha(0), std::invalid_argument);
}


TEST_CASE("t_cdf and t_quantile: against closed forms and the table") {
  for (double t : {-3.0, -0.5, 0.0, 0.7, 2.0, 10.0}) {
    CHECK(t_cdf(t, 1) == doctest::Approx(0.5 + std::atan(t) / M_PI).epsilon(1e-12));         // Cauchy
    CHECK(t_cdf(t, 2) == doctest::Approx(0.5 + t / (2 * std::sqrt(2 + t * t))).epsilon(1e-12));  // closed form for 2 df
  }
  for (int df = 1; df <= 40; ++df) CHECK(t_quantile(0.975, df) == doctest::Approx(t_quantile_975(df)).epsilon(1e-6));
  CHECK(t_quantile(0.025, 4) == doctest::Approx(-2.776445105).epsilon(1e-8));
  CHECK(t_quantile(0.995, 2) == doctest::Approx(9.924843200).epsilon(1e-8));
  CHECK_THROWS_AS(t_quantile(1.0, 3), std::invalid_argument);
  CHECK_THROWS_AS(t_cdf(1.0, 0), std::invalid_argument);
}


TEST_CASE("spread: mean, sample sd, min, max") {
  const Spread s = spread({1, 2, 3, 4});
  CHECK(s.mean == doctest::Approx(2.5));
  CHECK(s.sd == doctest::Approx(std::sqrt(5.0 / 3.0)));
  CHECK(s.min == 1);
  CHECK(s.max == 4);
  CHECK(spread({7}).sd == 0);
  CHECK(spread({7}).mean == 7);
  CHECK(spread({}).mean == 0);
}


TEST_CASE("loglog_slope: the exponent of a power law; unusable points skipped") {
  CHECK(loglog_slope({1, 2, 4, 8}, {3, 12, 48, 192}) == doctest::Approx(2));
  CHECK(loglog_slope({1, 10, 100}, {5, 0.5, 0.05}) == doctest::Approx(-1));
  CHECK(loglog_slope({1, 2, 0, 4, 8}, {1, 2, 5, -1, 8}) == doctest::Approx(1));  // (0, 5) and (4, -1) skipped
  CHECK(std::isnan(loglog_slope({1, 0}, {1, 1})));                              // one usable point
  CHECK(std::isnan(loglog_slope({2, 2, 2}, {1, 2, 3})));                         // no spread in x
}


TEST_CASE("spearman: rank correlation with average ranks for ties; NaN when a side is constant") {
  CHECK(spearman({1, 2, 3, 4}, {10, 20, 30, 40}) == doctest::Approx(1));
  CHECK(spearman({1, 2, 3, 4}, {4, 3, 2, 1}) == doctest::Approx(-1));
  CHECK(spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}) == doctest::Approx(0.8));
  CHECK(spearman({1, 2, 3}, {1, 8, 1000}) == doctest::Approx(1));          // ranks, not values
  CHECK(spearman({1, 1, 2, 3}, {1, 2, 3, 4}) == doctest::Approx(0.9486832980505138));  // scipy.stats.spearmanr
  CHECK(std::isnan(spearman({1, 2, 3}, {5, 5, 5})));
  CHECK(std::isnan(spearman({2, 2}, {1, 2})));
  CHECK(std::isnan(spearman({1, 2}, {1, 2, 3})));
  CHECK(std::isnan(spearman({1}, {1})));
}


TEST_CASE("sign_test_p: the binomial upper tail at one half") {
  CHECK(sign_test_p(10, 10) == doctest::Approx(1.0 / 1024));
  CHECK(sign_test_p(0, 10) == doctest::Approx(1));
  CHECK(sign_test_p(5, 10) == doctest::Approx(638.0 / 1024));                       // (252 + 210 + 120 + 45 + 10 + 1) / 1024
  CHECK(sign_test_p(64, 100) == doctest::Approx(0.0033185).epsilon(1e-4));         // scipy.stats.binomtest(64, 100, alternative='greater')
  CHECK(sign_test_p(0, 0) == doctest::Approx(1));
  CHECK_THROWS_WITH_AS(sign_test_p(11, 10), doctest::Contains("sign_test_p"), std::invalid_argument);
}


TEST_CASE("least_squares_slope and trend: slopes and rank correlations on known inputs; bad levels refused") {
  CHECK(least_squares_slope({1, 2, 3, 4}, {3, 5, 7, 9}) == doctest::Approx(2));
  // y = 1, 2, 2, 5 on x = 0..3: sxy = (-1.5)(-1.5) + (-0.5)(-0.5) + (0.5)(-0.5) + (1.5)(2.5) = 6, sxx = 5.
  CHECK(least_squares_slope({0, 1, 2, 3}, {1, 2, 2, 5}) == doctest::Approx(1.2));
  CHECK(std::isnan(least_squares_slope({1, 1, 1}, {1, 2, 3})));
  CHECK(std::isnan(least_squares_slope({1, 2, 3}, {1, NAN, 3})));
  CHECK_THROWS_AS(least_squares_slope({1}, {1}), std::invalid_argument);
  CHECK_THROWS_AS(least_squares_slope({1, 2}, {1}), std::invalid_argument);
  // Slope per doubling: y = 3 log2(x) + 1 over 16..512 gives 3 (on the raw level it would not be linear).
  std::vector<double> dk = {16, 32, 64, 128, 256, 512}, y;
  for (double x : dk) y.push_back(3 * std::log2(x) + 1);
  CHECK(trend(dk, y, TrendKind::LogSlope) == doctest::Approx(3));
  CHECK(trend(dk, y, TrendKind::Slope) < 0.1);  // the raw level's slope is set by the widest gap
  // Spearman: any increasing response is 1, a decreasing one -1, whatever its shape.
  CHECK(trend({0, 0.05, 0.1, 0.2}, {0.1, 0.5, 0.51, 9}, TrendKind::Rank) == doctest::Approx(1));
  CHECK(trend({0, 0.05, 0.1, 0.2}, {4, 3, 2, 1}, TrendKind::Rank) == doctest::Approx(-1));
  // 1 - 6 sum d^2 / (n (n^2 - 1)) with ranks 1 3 2 4: sum d^2 = 2, so 1 - 12 / 60 = 0.8.
  CHECK(trend({1, 2, 3, 4}, {1, 3, 2, 4}, TrendKind::Rank) == doctest::Approx(0.8));
  CHECK_THROWS_WITH_AS(trend({1, 2, 3}, {1, 2, 3}, TrendKind::Slope), doctest::Contains("at least 4 levels"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(trend({1, 2, 2, 3}, {1, 2, 3, 4}, TrendKind::Slope), doctest::Contains("increase strictly"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(trend({0, 1, 2, 4}, {1, 2, 3, 4}, TrendKind::LogSlope), doctest::Contains("above 0"), std::invalid_argument);
  CHECK_THROWS_AS(trend({1, 2, 3, 4}, {1, 2, 3}, TrendKind::Slope), std::invalid_argument);
}


TEST_CASE("holm: the step-down's levels, in the input's order; the first undecided test stops it") {
  // p sorted: 0.001 (level 0.05/3), 0.02 (0.05/2), 0.03 (0.05/1). Decided when p < alpha / 2.
  const std::vector<double> p{0.02, 0.001, 0.03};
  auto decided = [&](size_t k, double alpha) { return p[k] < alpha / 2; };
  const auto h = holm(p, decided);
  CHECK(h[1].alpha == doctest::Approx(0.05 / 3));
  CHECK_FALSE(h[1].stopped);
  CHECK(h[0].alpha == doctest::Approx(0.05 / 2));  // 0.02 is not below 0.0125: the descent stops here
  CHECK_FALSE(h[0].stopped);
  CHECK(h[2].alpha == doctest::Approx(0.05 / 2));  // after the stop: the stopping level, unsettled
  CHECK(h[2].stopped);
  // Ties keep the input's order.
  const std::vector<double> tie{0.0, 0.0};
  const auto t = holm(tie, [](size_t, double) { return true; });
  CHECK(t[0].alpha == doctest::Approx(0.025));
  CHECK(t[1].alpha == doctest::Approx(0.05));
}

TEST_CASE("seeds_needed at 80% power: t(1 - alpha/2) + t(0.8), against a hand computation") {
  // E = sd, alpha 0.05: (t(0.975, n-1) + t(0.8, n-1)) / sqrt(n) <= 1 first at n 10:
  // n 10: (2.262 + 0.883) / 3.162 = 0.995; n 9: (2.306 + 0.889) / 3 = 1.065.
  CHECK(seeds_needed(1.0, 1.0, 0.05, 0.8) == 10);
  CHECK(seeds_needed(1.0, 1.0, 0.05, 0.8) > seeds_needed(1.0, 1.0, 0.05));  // power asks more than a coin
  CHECK(seeds_needed(1.0, 1.0, 0.05, 0.5) == seeds_needed(1.0, 1.0, 0.05));
  CHECK(seeds_needed(1.0, 1.0, 0.05, 1.0) == 0);  // power must lie in (0, 1)
  // A simulation agrees: at n 10 an effect of one sd is supported by the one-sided 2.5% test in about 80% of runs.
  std::mt19937_64 rng(7);
  std::normal_distribution<double> z(1.0, 1.0);
  int supported = 0;
  const int runs = 4000;
  for (int k = 0; k < runs; ++k) {
    std::vector<double> v(10);
    for (double& x : v) x = z(rng);
    supported += decide(Compare::Above, 0.0, v, 0.05) == Outcome::Supported;
  }
  CHECK(static_cast<double>(supported) / runs == doctest::Approx(0.80).epsilon(0.05));
}

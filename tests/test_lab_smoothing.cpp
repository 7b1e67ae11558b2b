// Lab `smoothing`: expected calibration error against a hand-computed case, the cluster ratio and
// the template projection on hand-made points, label smoothing's definition against the library's
// cross_entropy, and the target noise.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops/cross_entropy.h"
#include "lab/smoothing.h"
#include "nn_test_util.h"

using namespace gf;
using namespace gf::lab;
using gf::testing::error_of;

TEST_CASE("calibration: ECE of five predictions in 10 bins, by hand") {
  // bin 9: 0.95 right, 0.92 wrong -> |0.5 - 0.935| x 2/5 = 0.174; bin 6: 0.65 right -> 0.35 / 5; bin 5: 0.55 right -> 0.45 / 5;
  // bin 3: 0.35 wrong -> 0.35 / 5. ECE = 0.174 + 0.07 + 0.09 + 0.07 = 0.404.
  const Calibration c = calibration({0.95, 0.92, 0.55, 0.65, 0.35}, {true, false, true, true, false}, 10);
  CHECK(c.ece == doctest::Approx(0.404).epsilon(1e-12));
  CHECK(c.confidence == doctest::Approx(0.684));
  CHECK(c.accuracy == doctest::Approx(0.6));
  CHECK(c.count == std::vector<int64_t>{0, 0, 0, 1, 0, 1, 1, 0, 0, 2});
  CHECK(c.bin_accuracy[9] == doctest::Approx(0.5));
  CHECK(std::isnan(c.bin_confidence[0]));
  // A confidence of 1 falls in the last bin; a perfectly calibrated set has ECE 0.
  CHECK(calibration({1.0, 1.0}, {true, true}, 15).count.back() == 2);
  CHECK(calibration({1.0, 1.0}, {true, true}, 15).ece == 0.0);
  CHECK(calibration({0.5, 0.5}, {true, false}, 15).ece == 0.0);
  GF_CHECK_CONTAINS(error_of([] { calibration({1.5}, {true}); }), "outside [0, 1]");
  GF_CHECK_CONTAINS(error_of([] { calibration({0.5}, {true, false}); }), "1 confidences, 2 outcomes");
}

TEST_CASE("cluster_ratio: within-class over between-class squared distance") {
  // 1-D: class 4 at 0 and 2 (mean 1), class 5 at 10 and 12 (mean 11): within 1, between 100.
  const Tensor f = Tensor::of({0, 2, 10, 12, 50}, {5, 1}, DType::Float64);
  CHECK(cluster_ratio(f, {4, 4, 5, 5, 6}, 2) == doctest::Approx(0.01));  // class 6 (one point) left out
  GF_CHECK_CONTAINS(error_of([&] { cluster_ratio(f, {4, 4, 5, 5, 6}, 3); }), "0 classes have at least 3 features");
}

TEST_CASE("template_coordinates: an orthonormal basis of the templates' span, dependent ones skipped") {
  const Tensor templates = Tensor::of({2, 0, 0, 1, 1, 0, 3, 3, 0}, {3, 3}, DType::Float64);  // e1, e1 + e2, 3 e1 + 3 e2
  const Tensor c = template_coordinates(Tensor::of({1, 2, 3, -1, 0, 5}, {2, 3}, DType::Float64), templates);
  REQUIRE(shape_str(c.shape()) == "(2, 2)");
  CHECK(c.at({0, 0}) == doctest::Approx(1));
  CHECK(c.at({0, 1}) == doctest::Approx(2));  // the third coordinate is outside the span
  CHECK(c.at({1, 0}) == doctest::Approx(-1));
  CHECK(c.at({1, 1}) == doctest::Approx(0).epsilon(1e-12));
}

TEST_CASE("smoothed_cross_entropy: label smoothing's definition, equal to the library's cross_entropy") {
  // p = (0.75, 0.25): 0.9 x -log 0.75 + 0.1 x (-log 0.75 - log 0.25) / 2.
  const Tensor z = Tensor::of({std::log(3.0), 0, 0, 0, 1, 2}, {3, 2}, DType::Float64);
  const double want = 0.9 * -std::log(0.75) + 0.1 * (-std::log(0.75) - std::log(0.25)) / 2;
  CHECK(smoothed_cross_entropy(z.narrow(0, 0, 1).contiguous(), {0}, 0.1, -100) == doctest::Approx(want).epsilon(1e-14));
  CHECK(smoothed_cross_entropy(z.narrow(0, 1, 1).contiguous(), {1}, 0.3, -100) == doctest::Approx(std::log(2.0)).epsilon(1e-14));
  // The row labelled `ignore` does not count; the mean is over the other two.
  const double lib = cross_entropy(Variable(z), Tensor::of({0, 0, 1}, {3}, DType::Int64), 0, 0.2).item();
  CHECK(smoothed_cross_entropy(z, {0, 0, 1}, 0.2, 0) == doctest::Approx(lib).epsilon(1e-14));
}

TEST_CASE("add_target_noise: rate 0 changes nothing, rate 1 draws every token, 0.2 replaces about a fifth") {
  std::vector<train::EncodedPair> pairs;
  for (int i = 0; i < 500; ++i) pairs.push_back({{4, 5, 6}, {4, 5, 6, 7, 8, 9, 10, 11}});
  auto none = pairs;
  add_target_noise(none, 8, 0.0, 1);
  CHECK(none.front().tgt == pairs.front().tgt);
  auto all = pairs;
  add_target_noise(all, 8, 1.0, 2);
  int64_t changed = 0, total = 0;
  for (const auto& p : all)
    for (int64_t t : p.tgt) CHECK((t >= 4 && t < 12));
  auto some = pairs;
  add_target_noise(some, 8, 0.2, 3);
  for (size_t i = 0; i < some.size(); ++i)
    for (size_t k = 0; k < some[i].tgt.size(); ++k) changed += some[i].tgt[k] != pairs[i].tgt[k], ++total;
  // A replaced token keeps its value 1 time in 8: 0.2 x 7/8 = 0.175 of 4,000 tokens change (sd 0.006).
  CHECK(static_cast<double>(changed) / static_cast<double>(total) == doctest::Approx(0.175).epsilon(0.15));
  CHECK(some.front().src == pairs.front().src);  // sources untouched
  GF_CHECK_CONTAINS(error_of([&] { add_target_noise(some, 8, 1.5, 1); }), "rate 1.5 must be in [0, 1]");
}

#pragma once
// The measurements behind lab `smoothing` (lab/smoothing.cpp), public so that tests can check them.
#include <cstdint>
#include <vector>

#include "lab/common.h"
#include "tensor/tensor.h"

namespace gf::lab {

// Calibration of top-1 predictions (Guo et al. 2017, as Müller et al. 2019 use it): predictions
// binned by confidence into `bins` equal bins of [0, 1] (a confidence of exactly 1 in the last);
// ECE = sum over bins of (n_b / N) |accuracy_b - confidence_b|. Throws std::invalid_argument for
// sizes that differ, no predictions, a confidence outside [0, 1] or bins < 1.
struct Calibration {
  double ece = 0;
  double confidence = 0, accuracy = 0;  // means over every prediction
  std::vector<int64_t> count;           // per bin
  std::vector<double> bin_confidence, bin_accuracy;  // per bin (NaN for an empty bin)
};
Calibration calibration(const std::vector<double>& confidence, const std::vector<bool>& correct, int bins = 15);

// How tightly features cluster by class: the mean squared distance of a feature to its class's
// mean, over the mean squared distance between two classes' means (every pair counted once),
// over the classes with at least `min_count` features (the others are left out). features (N, D),
// labels N. Lower is tighter. Throws std::invalid_argument when fewer than two classes qualify.
double cluster_ratio(const Tensor& features, const std::vector<int64_t>& labels, int64_t min_count);

// Coordinates of features (N, D) in an orthonormal basis of the span of `templates` (K, D) (the
// output layer's rows for some classes), by Gram-Schmidt in float64, a template within 1e-9 of the
// span of the earlier ones skipped: (N, r), r <= K. Müller et al. look at the penultimate layer
// through such a projection (onto the plane of three classes' templates): the directions no
// template reads do not change a logit, so no loss acts on them.
Tensor template_coordinates(const Tensor& features, const Tensor& templates);

// Label-smoothed cross-entropy from its definition, in float64: the mean over rows whose label is
// not `ignore` of (1 - eps) * -log p[label] + eps * mean over the V classes of -log p, p the softmax
// of the row's logits. logits (N, V).
double smoothed_cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels, double eps, int64_t ignore);

// Replaces each target token of every pair, with probability `rate`, by a symbol drawn uniformly
// from data's `symbols` (4 .. 4 + symbols - 1; it may draw the same one), from `seed`: noise the
// model cannot predict from the source, so that no model is right more often than about 1 - rate.
void add_target_noise(std::vector<train::EncodedPair>& pairs, int64_t symbols, double rate, uint64_t seed);

}  // namespace gf::lab

#pragma once
// The measurements behind lab `smoothing` (lab/labs/smoothing.cpp), public so that tests can check
// them; defined in lab/parts/smoothing_measures.cpp.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
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

struct RealData;

// What a trained model does on held-out tokens (calibration) and on training tokens (the logit gap
// and the penultimate layer), teacher-forced, eval mode.
struct SmoothingMeasures {
  Calibration held_out;     // 15 bins
  double nll = 0;           // held-out NLL (no smoothing)
  double gap_train = 0;     // mean over training tokens of z_label - mean of the other logits
  double gap_held_out = 0;  // the same on held-out tokens
  double cluster = 0;       // cluster_ratio of the decoder's last states in the templates' span, training tokens whose label is clean
  double cluster_raw = 0;   // ... of the states themselves (every direction)
  double cluster_all = 0;   // ... in the templates' span, every training token by its label (a replaced one too)
};
// `clean_train` holds data.train before add_target_noise (the same pairs and lengths); the logit gap
// and the clusters are measured on the tokens of its first `feature_seqs` pairs.
SmoothingMeasures smoothing_measures(const nn::Seq2SeqTransformer& model, const IdData& data, const std::vector<train::EncodedPair>& clean_train,
                                     size_t feature_seqs);

// One model of lab smoothing: `shape` drawn from fit.seed, trained by fit() (label smoothing
// fit.label_smoothing) on data.train, then measured.
struct SmoothingTraining {
  nn::Seq2SeqOptions shape;
  FitOptions fit;
  int64_t probe_every = 0;  // held-out calibration every this many steps (0: none)
  size_t feature_seqs = 0;
  const RealData* real = nullptr;  // given: BLEU of greedy translations of its first `bleu_pairs` validation pairs
  size_t bleu_pairs = 0;
};
struct SmoothingRun {
  std::vector<double> losses;
  SmoothingMeasures end;
  std::vector<double> probe_steps, probe_ece, probe_over;  // during training: held-out ECE and confidence - accuracy
  double loss_check = 0;  // |batch_loss - smoothed_cross_entropy| / the latter, float64, on the first 64 held-out pairs
  double bleu = NAN;
};
SmoothingRun train_smoothing(const SmoothingTraining& t, const IdData& data, const std::vector<train::EncodedPair>& clean_train);
// A run's numbers as smoothing.json keeps them ("runs").
void to_json(nlohmann::json& j, const SmoothingRun& r);

}  // namespace gf::lab

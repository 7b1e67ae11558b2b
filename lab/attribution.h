#pragma once
// The measurement behind lab `attribution` (lab/labs/attribution.cpp; lab/parts/attribution_study.cpp):
// one trained translator's test sentences, each on its own greedy translation, teacher-forced.
//  - Agreement: for every output token, the last decoder layer's cross-attention (head mean) and
//    three attribution methods over the source tokens (train/inspect/attribution.h): |gradient x
//    input|, leave-one-out and |integrated gradients|; Spearman's rho and Kendall's tau of every
//    pair, averaged over the output tokens of a sentence, then over sentences.
//  - Counterfactuals: every cross-attention row permuted over the source (several draws), or made
//    uniform, through nn::MultiheadAttention::weights_transform; the next-token distribution's total
//    variation distance from the model's own, per output token.
// The ablation (StudyOptions::uniform) runs the same protocol on the model with every cross-attention
// uniform over the source, which is then also the attention compared with the methods.
#include <array>
#include <cstdint>
#include <vector>

#include "lab/trained_model.h"
#include "train/inspect/maps.h"

namespace gf::lab::attribution {

using train::inspect::Map;

// The maps compared: attention and the three attribution methods.
enum MapId { kAtt = 0, kGxi = 1, kLoo = 2, kIg = 3, kMaps = 4 };
inline const char* const kMapName[kMaps] = {"attention", "gradient x input", "leave-one-out", "integrated gradients"};
inline const char* const kMapShort[kMaps] = {"att", "gxi", "loo", "ig"};

struct StudyOptions {
  int ig_steps = 32, permutations = 8;
  int64_t max_extra = 50;  // greedy translations stop after the source's length + this many tokens
  bool uniform = false;    // the ablation: every cross-attention uniform over the source
};

// One test sentence.
struct Sentence {
  std::vector<int64_t> src, out;  // out ends with <eos>
  std::array<Map, kMaps> maps;    // (T, S) each, attention and the methods' magnitudes
  Map all_layers, rollout;        // reported: every layer's head mean, attention rollout
  std::array<std::array<double, kMaps>, kMaps> rho{};  // mean over output tokens of Spearman rho
  std::array<std::array<double, kMaps>, kMaps> tau{};  // ... of Kendall's tau
  double rho_all_layers[kMaps] = {}, rho_rollout[kMaps] = {};  // against each method (index 0 unused)
  double permuted_tv = 0, uniform_tv = 0;  // counterfactuals: mean over output tokens (median over permutations)
  std::vector<double> ig_sum_error, ig_endpoint;  // completeness, per output token
};

// One model (a seed): its sentences and their means.
struct SeedStudy {
  std::vector<Sentence> sentences;
  double tf_accuracy = 0;
  std::array<std::array<double, kMaps>, kMaps> rho{}, tau{};
  double rho_all_layers[kMaps] = {}, rho_rollout[kMaps] = {};
  double permuted_tv = 0, uniform_tv = 0;
  // methods_agree[m]: the other methods' mean rho with m, minus attention's rho with m (m = 1..3);
  // methods_agree_tau[m] the same with Kendall's tau (reported).
  double methods_agree[kMaps] = {}, methods_agree_tau[kMaps] = {};
  double attention_agrees = 0;  // mean over the methods of attention's rho with them
};

// The study of the model's first n test sentences. `seed` draws the permutations. The model's
// parameters collect gradients from the attribution passes (never read); the transforms installed
// for the ablation and the counterfactuals are removed before it returns.
SeedStudy study_model(const TrainedModel& tm, size_t n, const StudyOptions& o, uint64_t seed);

// A sentence's map with each row divided by its sum (a row of zeros stays 0).
Map row_normalised(const Map& m);
double median(std::vector<double> v);
double mean(const std::vector<double>& v);  // NaN for none

}  // namespace gf::lab::attribution

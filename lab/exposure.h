#pragma once
// The measurement behind lab `exposure` (lab/labs/exposure.cpp; lab/parts/exposure_measure.cpp): one
// trained translator's test sentences,
//  1. per target position, the accuracy of the next token teacher-forced (true prefix) against
//     free-running (greedy, the model's own prefix, compared position by position with the
//     reference), and corpus BLEU by third of each reference;
//  2. for each sentence, one step k (drawn at random) where the true prefix is followed by a wrong
//     token (the model's best-scoring token other than the reference's: a mistake the model could
//     make), then greedy decoding onwards, against greedy decoding from the same true prefix. At
//     each later step k + d: the share of tokens that differ between the two continuations, each
//     continuation's error rate against the reference, and the total variation distance between
//     their cross-attention rows (mean over layers and heads).
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/report.h"
#include "lab/stats.h"
#include "lab/trained_model.h"

namespace gf::lab::exposure {

constexpr int kThirds = 3;

struct PositionCounts {
  std::vector<int64_t> total, tf_right, fr_right;  // per target position (the <eos> position included)
  int64_t sentences = 0, exact = 0;                // free-running translations equal to the reference
  // Corpus BLEU per third of each reference (token ids as words, no tokeniser; <eos> left out), for
  // the teacher-forced predictions and the free-running output (its tokens past the reference's end
  // in the last third).
  std::array<double, kThirds> tf_bleu{}, fr_bleu{};
  void grow(size_t n) {
    if (total.size() < n) total.resize(n), tf_right.resize(n), fr_right.resize(n);
  }
};

// Per offset d = 1 .. D after the forced step.
struct Drift {
  std::vector<int64_t> both, changed;                     // steps where either run has a token; of them, tokens that differ
  std::vector<int64_t> ref_steps, err_clean, err_forced;  // steps with a reference token; errors of each run there
  std::vector<double> tv_sum;                             // summed TV distance of the two runs' rows (both have a token)
  std::vector<int64_t> tv_n;
  std::vector<double> tv_same_sum;                        // the same, where the two tokens agree
  std::vector<int64_t> tv_same_n;
  double step_tv_sum = 0;                                 // clean run: TV between consecutive rows, for scale
  int64_t step_tv_n = 0;
  // Alignment-free: token edit distance of each continuation after step k to the reference's rest.
  int64_t sentences = 0, suffix_tokens = 0;               // sentences; reference tokens after step k (with <eos>)
  int64_t edits_clean = 0, edits_forced = 0;              // summed edit distances
  int64_t exact_clean = 0, exact_forced = 0;              // continuations at distance 0 (recovered)
  explicit Drift(size_t D = 0)
      : both(D), changed(D), ref_steps(D), err_clean(D), err_forced(D), tv_sum(D), tv_n(D), tv_same_sum(D), tv_same_n(D) {}
};

struct Example {
  std::vector<int64_t> src, clean, forced;
  std::vector<std::vector<double>> clean_rows, forced_rows;
  int64_t k = -1;                  // the forced step; -1: none
  size_t index = 0;                // which test sentence
  std::vector<int64_t> reference;  // the reference translation, ending with <eos>
};

struct ModelStudy {
  PositionCounts pos;
  Drift drift;
  Example example, derailed;  // the `show` sentence; the first from it on whose later tokens change
  double tf_accuracy = 0, fr_tokens = 0, fr_exact = 0;
};

// The study of the model's first n test sentences, following D steps after each forced token. `seed`
// draws the forced steps (the same at every level of the lab's factor).
ModelStudy study_model(const TrainedModel& tm, size_t n, int64_t D, uint64_t seed, size_t show);

// The accuracy gap (teacher-forced minus free-running), pooled over positions [from, to).
double pooled_gap(const PositionCounts& c, size_t from, size_t to);
// Error rates in the first `d` steps after k, pooled: {after the forced token, from the true prefix}.
std::pair<double, double> error_rates(const Drift& x, int64_t d);
constexpr int64_t kDerailSteps = 3;  // derailment: the error rate in the 3 steps after the forced token
double derailment(const Drift& x);   // error_rates(x, kDerailSteps): forced minus clean
// How many leading positions have at least min_support sentences: the prefix `total` keeps.
size_t supported_positions(const PositionCounts& c, int64_t min_support);
double ratio(int64_t a, int64_t b);  // a / b, NaN for b = 0

// ---------------------------------------------------------------- the lab's runs and output
// (lab/parts/exposure_tables.cpp)

// One run of the lab: a model of one level on one seed, its weights and test pairs dropped.
struct Measured {
  ModelStudy study;
  TrainedModel model;  // its training curve and vocabularies
};
void to_json(nlohmann::json& j, const Measured& m);  // NAME.json's "runs"

using Levels = std::vector<std::vector<const Measured*>>;  // [level][seed]
std::string level_name(double rate);                      // "teacher forcing", "SS k 200"
inline const char* const kRateAxis = "scheduled sampling's speed 100/k (0: teacher forcing)";

// The tables of accuracy per position (the first P positions) and of BLEU by third, printed; the
// series the figure draws.
struct PositionSeries {
  std::vector<double> xs;
  std::vector<std::vector<Spread>> tf, fr, gap;  // per level, per position: over the seeds
};
PositionSeries position_section(Report& r, const Levels& res, const std::vector<double>& rates, size_t P, int64_t min_support);
// The table of the forced token's consequences at offsets 1 .. D and of recovery, printed.
struct DriftSeries {
  std::vector<double> ds;
  std::vector<std::vector<double>> e_forced, e_clean, changed, tv;  // per level, per offset
};
DriftSeries drift_section(Report& r, const Levels& res, const std::vector<double>& rates, int64_t D);
// An example sentence in words, with its two continuations' cross-attention.
nlohmann::json example_json(const Example& e, const TrainedModel& m);
// The panels: accuracy and gap per position, errors after the forced token, the first seed's
// training curves, and the teacher-forced model's example.
void figure(Report& r, const PositionSeries& ps, const DriftSeries& dr, const Levels& res, const std::vector<double>& rates);

}  // namespace gf::lab::exposure

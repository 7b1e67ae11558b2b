#pragma once
// The measurements behind lab `scale` (lab/labs/scale.cpp), public so that tests can check them:
// what one attention's softmax does to its scores and to the gradient through it, for q, k, v drawn
// N(0, 1) or projected from real sentences by an initialised layer, and a translator trained with
// and without 1/sqrt(d_k).
#include <cstdint>
#include <vector>

#include "lab/common.h"
#include "tensor/tensor.h"

namespace gf::lab {

// One attention softmax(q k^T * scale) v, forward and backward with an upstream gradient, float64.
struct SoftmaxStats {
  double score_var = 0;     // variance of the (scaled or unscaled) scores
  double max_prob = 0;      // mean over rows of the largest softmax probability
  double entropy = 0;       // mean over rows of the softmax entropy, in nats
  double saturated = 0;     // share of rows whose largest probability exceeds 0.99
  double jacobian = 0;      // median over rows of || diag(p) - p p^T ||_F
  double grad = 0;          // median over rows of |d loss / d scores| / |d loss / d p|, by backward
  double grad_mean = 0;     // mean over rows of the same
};
// q (B, L, dk), k and v (B, S, dk), upstream (B, L, dk): d loss / d output.
SoftmaxStats softmax_stats(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& upstream, double scale);
// B sequences of L queries against S keys of width dk, q, k, v and the upstream drawn N(0, 1) from
// `seed`, float64; scaled by 1/sqrt(dk) or not.
SoftmaxStats normal_softmax_stats(int64_t dk, bool scaled, int64_t B, int64_t L, int64_t S, uint64_t seed);

// `count` sentences of the corpus's most frequent source length (which ones: drawn by the seed)
// through the embedding and the first LayerNorm of an initialised one-head Pre-LN layer of width dk
// (drawn by the seed), then its in_proj: q, k, v (count, len, dk), float64, and a random upstream.
struct QKV {
  Tensor q, k, v, upstream;
};
QKV real_qkv(const IdData& data, int64_t dk, int64_t count, uint64_t seed);

// A model of `shape` drawn from `seed` trained by fit(o) on data.train, with 1/sqrt(d_k) or without
// (every attention's score_scale 1): its losses (NaN after a divergence stop, so that every run has
// o.steps of them) and its held-out teacher-forced NLL on data.test (its first loss when diverged).
struct ScaleTraining {
  double nll = 0;
  std::vector<double> losses;
};
ScaleTraining train_scaled(const nn::Seq2SeqOptions& shape, const IdData& data, const FitOptions& o, bool scaled, uint64_t seed);

}  // namespace gf::lab

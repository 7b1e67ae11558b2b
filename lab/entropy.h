#pragma once
// The training runs behind lab `entropy` (lab/labs/entropy.cpp), public so that tests can check
// them; defined in lab/parts/entropy_runs.cpp.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lab/common.h"
#include "nn/module.h"
#include "nn/seq2seq.h"

namespace gf::lab {

// How every run of the lab trains: the model's shape, fit()'s options (its lr and seed are the
// run's), how often the heads are probed, and σReparam's scope.
struct EntropySetup {
  nn::Seq2SeqOptions arch;
  FitOptions base;
  int64_t every = 10;
  bool reparam_all = true;  // σReparam on every linear layer of the Transformer layers, or only on W_q and W_k
};

// One training run: loss per step, and at step 0 (initialisation) and every `every` steps each
// head's entropy on the probe batch (the first 64 test pairs) as a share of log(visible keys), and
// the logit-scale bound.
struct EntropyRun {
  FitResult fit;
  std::vector<int64_t> at;                 // steps of the records
  std::vector<std::vector<double>> heads;  // (records, heads): H / log(visible keys)
  std::vector<double> qk_norm;             // (records): max over attentions of σ(W_q) σ(W_k), effective weights
  std::vector<std::string> head_names;     // "enc0.self.h0", ...
  double final_loss = NAN;                 // mean of the last 10% of the steps; a diverged run: at least 3x its first loss
  double least_head_end = NAN;             // least head's H / log(keys) at the last record
};

// σReparam on the model's Transformer layers: every attention's query and key weights, and with
// `all` (the paper's choice) every linear layer of the encoder and decoder layers as well. The
// embeddings and the output projection stay plain (the training loss reads the projection's
// weight directly).
void apply_sigma_reparam(nn::Module& m, bool all);

// A fresh model of s.arch drawn from `seed` (with σReparam when `reparam`), trained by fit() at `lr`
// on data.train with batches and dropout drawn from `seed`, probed as above.
EntropyRun train_entropy_run(const IdData& data, const EntropySetup& s, double lr, bool reparam, uint64_t seed);

// The largest |logit difference| on the probe batch, at initialisation, between the model drawn
// from `seed` with σReparam and the same model without it (infinite for a NaN): the
// reparametrisation starts from the function it replaces (γ = σ(W)).
double reparam_init_difference(const IdData& data, const EntropySetup& s, uint64_t seed);

// The least of a record's head entropies (NaN, a broken run, propagates).
double least_head(const std::vector<double>& heads);

}  // namespace gf::lab

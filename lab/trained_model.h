#pragma once
// The trained translator that the `attribution` and `exposure` labs study: either a run folder from
// `gradflow train` (--model DIR, loaded with train::Translator::load), or a small translator trained
// here with lab/common.h's fit() on the built-in English -> Korean corpus, or, given --data DIR
// (lab/real_data.h), on that real task (its subword models are copied into the model's folder, so
// Translator::load reads it as any run). A model trained here is kept as a run folder (config.json,
// vocab.*.txt, best.safetensors: what Translator::load reads) under --cache, in a folder named by
// every setting that shapes it, so the second lab (and a re-run) loads it instead of training
// again; --retrain trains anyway. The key holds the settings, not the code: after a change to the
// training code (lab::fit, the model), use --retrain.
#include <memory>
#include <string>
#include <vector>

#include "lab/common.h"
#include "lab/fields.h"
#include "lab/real_data.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"
#include "train/data/vocab.h"

namespace gf::lab {

class Report;

struct TrainedModel {
  std::shared_ptr<nn::Seq2SeqTransformer> model;  // in eval mode
  train::Vocab src_words, tgt_words;
  std::vector<train::EncodedPair> test;  // held-out pairs (none of them seen in training)
  std::string description;               // what the model is and where it came from, one line
  double train_seconds = 0;              // wall-clock seconds spent training here (0 when loaded)
  int64_t steps = 0;                     // optimizer steps (0 when loaded from --model)
  std::vector<double> losses;            // training losses, one per step (empty when loaded)
  // Trained until converged (Recipe::converge): the held-out NLL at each measurement, the step
  // whose weights were kept, and whether the rule (not the step limit) ended training.
  std::vector<int64_t> valid_steps;
  std::vector<double> valid_nll;
  std::vector<double> valid_free_running;  // Convergence::select_free_running: the score that chose best_step
  int64_t best_step = -1;
  bool converged = false;
};

// How a lab wants its models trained, beyond the settings: a fixed step count (--train-steps), or
// until the held-out loss stops improving (lab/common.h's Convergence on the corpus's validation
// split, --train-steps the limit); teacher forcing, or scheduled sampling (lab/common.h).
struct Recipe {
  Convergence until;        // until.valid is ignored: converge says whether to use the validation split
  bool converge = false;
  ScheduledSampling sampling;
};

// The settings of a lab that studies trained models (a member of its settings, joined to its field
// table by trained_model_fields()); a lab sets its own defaults where they differ. With --data
// (`real`, lab/real_data.h) the models are trained on that task, and --cache also keeps its subword
// models.
struct TrainedModelSettings {
  std::string model;                 // a run folder to study instead of training one here
  std::string cache = "runs/lab/cache";
  bool retrain = false;
  int64_t corpus = 8000, d_model = 64, heads = 4, layers = 2, train_steps = 400;
  double lr = 0.002;
  int64_t warmup = 100;
  RealDataSettings real;             // its cache is the one above (real_settings())
  RealDataSettings real_settings() const {
    RealDataSettings r = real;
    r.cache = cache;
    return r;
  }
};
// --model, --cache, --retrain, --corpus, --d-model, --heads, --layers, --train-steps, --lr,
// --warmup. The --data fields come apart (trained_model_data_fields()), so that a lab lists them last.
Fields<TrainedModelSettings> trained_model_fields();
Fields<TrainedModelSettings> trained_model_data_fields();

// The model the settings describe for the run of seed `seed`: loaded from --model (the same model
// whatever the seed), from the cache, or trained now (and cached). `real` is the --data task
// (real_data(s.real_settings(), r), read once by the lab), null without --data. The seed draws the
// corpus (its sentences and splits), the weights and the batch order, so each run studies its own
// test sentences. Says on the report where the model came from.
TrainedModel trained_model(const TrainedModelSettings& s, const RealData* real, uint64_t seed, Output& r, const Recipe& recipe = {});

// The cache folder's name for these settings, e.g. "ko-n8000-d64-h4-l2-s600-lr0.002-w100-c1-seed1"
// (a converged or scheduled-sampling recipe adds its settings).
std::string cache_key(const TrainedModelSettings& s, uint64_t seed, const Recipe& recipe = {});

}  // namespace gf::lab

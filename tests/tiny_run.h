#pragma once
// The small translator runs the tests train, written once: the built-in corpus and a one-layer model
// that takes milliseconds a step, or a two-layer one that learns the corpus's grammar in a few
// epochs. A test sets what it tests on top (its budget, depth, dropout...).
#include <cstdint>
#include <string>

#include "korean/builtin_corpus.h"
#include "train/loop/trainer.h"
#include "train/run/run_config.h"

namespace gf::test {

// `pairs` pairs of the built-in corpus, English -> Korean, every token kept (min_freq 1); a model
// 32 wide with 2 heads, a feed-forward of 64 and one layer in each stack. The budget is the test's.
inline train::RunConfig tiny_run(int64_t pairs = 600) {
  train::RunConfig c;
  c.corpus_size = pairs;
  c.src = "en";
  c.tgt = "ko";
  c.min_freq = 1;
  c.layer.d_model = 32;
  c.layer.nhead = 2;
  c.layer.dim_feedforward = 64;
  c.layers = 1;
  return c;
}

// For the tests that need a run to learn, not just to step (a falling loss, translations,
// decoding that agrees with itself): tiny_run's data at 3,000 pairs, a model 64 wide with 4 heads,
// a feed-forward of 128, two layers and dropout 0.1, the built-in recipe's peak rate with a short
// warm-up, batches of 1,024 tokens, no progress lines.
inline train::RunConfig learning_run(int64_t pairs = 3000) {
  train::RunConfig c = tiny_run(pairs);
  c.layer.d_model = 64;
  c.layer.nhead = 4;
  c.layer.dim_feedforward = 128;
  c.layer.dropout = 0.1;
  c.layers = 2;
  c.lr = 2e-3;
  c.warmup = 100;
  c.max_tokens = 1024;
  c.log_every = 1000000;
  return c;
}

// A test's run into `out`: the built-in corpus handed in (libgradflow holds none), no progress
// output, no samples and no final evaluation of the test split.
inline train::TrainOptions quiet_options(const std::string& out) {
  train::TrainOptions o;
  o.out = out;
  o.quiet = true;
  o.final_eval = false;
  o.samples = 0;
  o.builtin_corpus = train::korean_run_data;
  return o;
}

}  // namespace gf::test

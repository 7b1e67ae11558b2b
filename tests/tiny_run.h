#pragma once
// The small translator runs the tests train, written once: the built-in corpus and a one-layer model
// that takes milliseconds a step. A test sets what it tests on top (its budget, depth, dropout...).
#include <cstdint>
#include <string>

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

// A test's run into `out`: no progress output and no final evaluation of the test split.
inline train::TrainOptions quiet_options(const std::string& out) {
  train::TrainOptions o;
  o.out = out;
  o.quiet = true;
  o.final_eval = false;
  return o;
}

}  // namespace gf::test

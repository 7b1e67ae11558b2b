#pragma once
// The built-in corpus as a run reads it: what a program built on libgradflow hands to the trainer
// (TrainOptions::builtin_corpus) and to load_run_data, so that a run without --data trains on the
// Korean grammar's sentences while libgradflow itself holds no corpus.
#include <cstddef>
#include <cstdint>

#include "train/run/run_data.h"

namespace gf::train {

// make_korean_corpus(seed, total)'s three splits as whitespace tokens, named "built-in train",
// "built-in valid" and "built-in test"; a train::BuiltinCorpus.
RunData korean_run_data(uint64_t seed, size_t total);

}  // namespace gf::train

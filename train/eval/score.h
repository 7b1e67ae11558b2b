#pragma once
// Scoring a trained translator on a test split: its translations, corpus BLEU, exact match and the
// teacher-forced loss. The trainer's final report and `gradflow eval` both use it.
#include <string>
#include <vector>

#include "train/data/parallel_text.h"
#include "train/eval/translator.h"
#include "train/eval/bleu.h"

namespace gf::train {

struct TestScore {
  std::vector<std::string> sources, references, hypotheses;  // one line each, tokens joined by spaces
  BleuResult bleu;
  int64_t exact = 0;          // hypotheses equal to their reference
  double exact_share = 0;     // exact / sentences
  double nll = -1;            // mean NLL per target token (teacher forcing); -1 when not asked for
  double decode_seconds = 0;  // the translation alone
};

// Translates `pairs`' sources with `opt` in batches of batch_size and scores them against the
// targets with BLEU's `tokenize` ("none" or "13a"); with_loss also measures the loss.
// Throws std::invalid_argument for an empty test set.
TestScore score_test_split(const Translator& t, const std::vector<TokenPair>& pairs, const DecodeOptions& opt, int64_t batch_size,
                           const std::string& tokenize, bool with_loss);

// How many of a[i] differ from b[i] (the same sentences decoded two ways: `eval
// --compare-precision`). std::invalid_argument when the two differ in length.
int64_t count_differing(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace gf::train

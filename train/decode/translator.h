#pragma once
// A trained translator: its config, vocabularies and model, loaded from a run folder, with
// batched sentence-in, sentence-out translation.
#include <memory>
#include <string>
#include <vector>

#include "nn/seq2seq.h"
#include "train/decode/decode.h"
#include "train/loop/model.h"
#include "train/data/parallel_text.h"
#include "train/loop/run_config.h"
#include "train/data/vocab.h"

namespace gf::train {

struct Translator {
  RunConfig config;
  Vocab src_vocab, tgt_vocab;
  std::unique_ptr<TranslationModel> net;  // the config's architecture
  std::string weights_file;               // what was loaded

  // The encoder-decoder (for attention maps and the labs); throws std::runtime_error naming the
  // run's architecture when it is another one.
  const nn::Seq2SeqTransformer& seq2seq() const;

  // path: a run folder (its best.safetensors, else the latest checkpoint) or one of its
  // .safetensors weight files. Errors name the missing or malformed file.
  static Translator load(const std::string& path);

  // Whitespace-tokenised sentences in, translations out (same order). Sentences are batched by
  // length, batch_size at a time. Empty input lines give empty translations.
  std::vector<std::string> translate(const std::vector<std::string>& sentences, const DecodeOptions& opt, int64_t batch_size = 64,
                                     DecodeStats* stats = nullptr) const;
  DecodeOptions default_decode_options() const;
  // Mean negative log-likelihood per target token (teacher forcing, no smoothing).
  double mean_nll(const std::vector<TokenPair>& pairs) const;
};

// Where the files of a run folder are.
std::string run_file(const std::string& dir, const std::string& name);

}  // namespace gf::train

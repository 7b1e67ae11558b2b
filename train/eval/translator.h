#pragma once
// A trained translator: its config, vocabularies and model, loaded from a run folder, with
// batched sentence-in, sentence-out translation.
#include <memory>
#include <string>
#include <vector>

#include "nn/seq2seq.h"
#include "train/decode/decode.h"
#include "train/run/model.h"
#include "train/data/parallel_text.h"
#include "train/run/run_subwords.h"
#include "train/run/run_config.h"
#include "train/data/vocab.h"

namespace gf::train {

struct Translator {
  RunConfig config;
  RunSegmenters segmenters;  // text <-> tokens: whitespace, or the run's SentencePiece models
  Vocab src_vocab, tgt_vocab;
  std::unique_ptr<TranslationModel> net;  // the config's architecture
  std::string weights_file;               // what was loaded

  // The encoder-decoder (for attention maps and the labs); throws std::runtime_error naming the
  // run's architecture when it is another one.
  const nn::Seq2SeqTransformer& seq2seq() const;

  // path: a run folder (its best.safetensors, else the latest checkpoint) or one of its
  // .safetensors weight files. Errors name the missing or malformed file.
  // weights: the dtype the linear weights are kept in (nn::lay_out_for_decoding); BFloat16 for a
  // process that decodes with bf16 products only (translate and eval under --precision bf16), which
  // then holds half the bytes of weights and no float32 copy beside the bf16 one.
  static Translator load(const std::string& path, DType weights = DType::Float32);

  // Sentences in, translations out (same order): whitespace-tokenised text, or raw text for a run
  // with subwords (its translations are detokenised raw text). Sentences are batched by length,
  // batch_size at a time. Empty input lines give empty translations. Each translation is one line:
  // a line break a byte piece decodes to (<0x0A>) becomes a space. `pieces`, when given, receives
  // each sentence's source tokens as the model read them, output tokens (the subword pieces), and
  // how many source tokens the sentence had before the cut to the run's max_len.
  struct Pieces {
    std::vector<Tokens> source, output;
    std::vector<size_t> source_length;
  };
  std::vector<std::string> translate(const std::vector<std::string>& sentences, const DecodeOptions& opt, int64_t batch_size = 64,
                                     DecodeStats* stats = nullptr, Pieces* pieces = nullptr) const;
  // BLEU's tokeniser for this run's output: 13a (sacreBLEU's default) for detokenised subword
  // output, none for whitespace tokens (pre-tokenised text, scored as it is).
  std::string bleu_tokenize() const { return segmenters.tgt.subwords() ? "13a" : "none"; }
  DecodeOptions default_decode_options() const;
  // Mean negative log-likelihood per target token (teacher forcing, no smoothing); the pairs are
  // text split on whitespace, re-split by the run's segmenters.
  double mean_nll(const std::vector<TokenPair>& pairs) const;
};

// Where the files of a run folder are.
std::string run_file(const std::string& dir, const std::string& name);

}  // namespace gf::train

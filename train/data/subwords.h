#pragma once
// Subword segmentation with SentencePiece (Kudo & Richardson, 2018), through the library itself:
// its trainer (unigram or BPE) learns the pieces from the training split, its processor splits raw
// text into pieces and joins pieces back into raw text.
//
// Models are trained so that their ids are gradflow's (<pad> 0, <unk> 1, <bos> 2, <eos> 3, and
// with a joint vocabulary <sep> 4 for the decoder-only model), so a Vocab of the model's pieces in
// id order encodes exactly as the model does; loading checks that they still agree. Characters the
// model has not seen fall back to their UTF-8 bytes (pieces "<0xE6>"), so any text survives
// raw -> pieces -> ids -> pieces -> raw; the text is NFKC-normalised on the way in (SentencePiece's
// default nmt_nfkc rule) and runs of spaces become one.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "train/data/parallel_text.h"
#include "train/data/vocab.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gf::train {

struct SubwordOptions {
  int64_t vocab_size = 8000;
  std::string type = "unigram";  // or "bpe"
  bool sep = false;              // reserve <sep> at id 4
  int threads = 1;
};

class Subwords {
 public:
  // Learns a model from `sentences` (raw text, one sentence each). `what` names the text in errors
  // ("the source side of train.de"); a vocabulary too small for the text's characters, or larger
  // than the text can fill, throws std::invalid_argument saying which sizes would work.
  static Subwords train(const std::vector<std::string>& sentences, const SubwordOptions& o, const std::string& what);
  // Throws std::runtime_error naming the file when it is missing or not a SentencePiece model.
  static Subwords load(const std::filesystem::path& file);
  // What load does with the file's bytes; `name` stands for the file in errors.
  static Subwords parse(std::string bytes, const std::string& name);
  void save(const std::filesystem::path& file) const;  // atomically (temp file + rename)

  Tokens encode(std::string_view text) const;     // raw text -> pieces
  std::string decode(const Tokens& pieces) const;  // pieces -> raw text
  int64_t size() const;
  // The pieces in id order as a gradflow vocabulary.
  Vocab vocab() const;

 private:
  std::shared_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string proto_;  // the serialized model, as saved
  std::string where_;  // the file it came from, for errors
};

// How one side's text becomes tokens and back: whitespace (pre-tokenised data, the default) or
// SentencePiece subwords.
class Segmenter {
 public:
  Segmenter() = default;
  explicit Segmenter(std::shared_ptr<const Subwords> subwords) : subwords_(std::move(subwords)) {}
  Tokens split(std::string_view text) const;
  std::string join(const Tokens& tokens) const;
  const Subwords* subwords() const { return subwords_.get(); }

 private:
  std::shared_ptr<const Subwords> subwords_;
};

// Throws std::invalid_argument naming `where` and the first token that differs when the run's saved
// vocabulary is not the subword model's piece list (a model file swapped or retrained).
void check_vocab_matches(const Vocab& vocab, const Subwords& subwords, const std::string& where);

}  // namespace gf::train

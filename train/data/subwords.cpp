#include "train/data/subwords.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <regex>
#include <stdexcept>
#include <unordered_map>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace {

// Feeds the trainer from memory (no temporary corpus file).
class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

std::unordered_map<std::string, std::string> trainer_args(const SubwordOptions& o) {
  return {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.type},
      // gradflow's special ids and names (Vocab::kSpecials), so ids need no mapping.
      {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
      {"pad_piece", "<pad>"}, {"unk_piece", "<unk>"}, {"bos_piece", "<bos>"}, {"eos_piece", "<eos>"},
      {"user_defined_symbols", o.sep ? std::string(Vocab::kSep) : std::string()},
      // Every character seen is kept, and unseen ones become bytes: nothing maps to <unk>.
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"num_threads", std::to_string(std::max(1, o.threads))},
      {"minloglevel", "2"},  // the trainer's progress log is long; errors still come back as Status
  };
}

// The library's two size errors, restated with the flag's name and the sizes that work.
[[noreturn]] void fail_training(const std::string& message, const SubwordOptions& o, const std::string& what) {
  std::smatch m;
  if (std::regex_search(message, m, std::regex("set it to a value <= ([0-9]+)")))
    GF_FAIL("--subwords {} is more than {} can fill with --subword-type {}: at most {}", o.vocab_size, what, o.type, m[1].str());
  if (std::regex_search(message, m, std::regex("smaller than required_chars\\. [0-9]+ vs ([0-9]+)")))
    GF_FAIL("--subwords {} is too small for {}: its distinct characters, the 256 byte pieces and the special tokens need at least {}",
            o.vocab_size, what, m[1].str());
  GF_FAIL("SentencePiece could not train on {}: {}", what, message);
}


}  // namespace

Subwords Subwords::train(const std::vector<std::string>& sentences, const SubwordOptions& o, const std::string& what) {
  GF_CHECK(o.type == "unigram" || o.type == "bpe", "--subword-type must be unigram or bpe, got '{}'", o.type);
  GF_CHECK(o.vocab_size > 0, "--subwords must be positive, got {}", o.vocab_size);
  GF_CHECK(!sentences.empty(), "--subwords: {} is empty", what);
  Sentences it(sentences);
  Subwords s;
  const auto status = sentencepiece::SentencePieceTrainer::Train(trainer_args(o), &it, &s.proto_);
  if (!status.ok()) fail_training(status.message(), o, what);
  s.sp_ = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto loaded = s.sp_->LoadFromSerializedProto(s.proto_);
  GF_CHECK_AS(std::runtime_error, loaded.ok(), "SentencePiece: the model just trained on {} does not load: {}", what, loaded.message());
  s.where_ = "the model trained on " + what;
  return s;
}

Subwords Subwords::load(const std::filesystem::path& file) { return parse(read_file_bytes(file, "Subwords::load"), file.string()); }

Subwords Subwords::parse(std::string bytes, const std::string& name) {
  Subwords s;
  s.proto_ = std::move(bytes);
  s.sp_ = std::make_shared<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status loaded;
  try {
    loaded = s.sp_->LoadFromSerializedProto(s.proto_);
  } catch (const std::exception& e) {  // the library's own exceptions (darts-clone's, for an empty piece) name no file
    GF_FAIL_AS(std::runtime_error, "Subwords::load: '{}' is not a SentencePiece model: {}", name, e.what());
  }
  GF_CHECK_AS(std::runtime_error, loaded.ok(), "Subwords::load: '{}' is not a SentencePiece model: {}", name, loaded.message());
  s.where_ = name;
  return s;
}

void Subwords::save(const std::filesystem::path& file) const { write_file_atomic(file.string(), proto_); }

Tokens Subwords::encode(std::string_view text) const {
  Tokens pieces;
  const auto status = sp_->Encode(text, &pieces);
  GF_CHECK(status.ok(), "Subwords::encode ({}): {}", where_, status.message());
  return pieces;
}

std::string Subwords::decode(const Tokens& pieces) const {
  std::string text;
  const auto status = sp_->Decode(pieces, &text);
  GF_CHECK(status.ok(), "Subwords::decode ({}): {}", where_, status.message());
  return text;
}

int64_t Subwords::size() const { return sp_->GetPieceSize(); }

Vocab Subwords::vocab() const {
  std::vector<std::string> pieces;
  pieces.reserve(static_cast<size_t>(size()));
  for (int i = 0; i < sp_->GetPieceSize(); ++i) pieces.push_back(sp_->IdToPiece(i));
  try {
    return Vocab(std::move(pieces));
  } catch (const std::invalid_argument& e) {  // e.g. a model trained elsewhere with other special ids
    GF_FAIL("{} cannot be a gradflow vocabulary: {}", where_, e.what());
  }
}

Tokens Segmenter::split(std::string_view text) const { return subwords_ ? subwords_->encode(text) : utf8::split_whitespace(text); }

std::string Segmenter::join(const Tokens& tokens) const { return subwords_ ? subwords_->decode(tokens) : join_tokens(tokens); }

void check_vocab_matches(const Vocab& vocab, const Subwords& subwords, const std::string& where) {
  const Vocab pieces = subwords.vocab();
  const size_t n = static_cast<size_t>(std::min(vocab.size(), pieces.size()));
  for (size_t i = 0; i < n; ++i)
    GF_CHECK(vocab.tokens()[i] == pieces.tokens()[i], "{}: the subword model does not match the vocabulary: id {} is '{}' in the model but '{}' in the vocabulary",
             where, i, pieces.tokens()[i], vocab.tokens()[i]);
  GF_CHECK(vocab.size() == pieces.size(), "{}: the subword model has {} pieces but the vocabulary has {} tokens", where, pieces.size(), vocab.size());
}

}  // namespace gf::train

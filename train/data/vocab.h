#pragma once
// A token vocabulary with the translator's four special tokens first:
//   <pad> = 0, <unk> = 1, <bos> = 2, <eos> = 3,
// then every training token seen at least min_freq times, most frequent first and ties in code
// point order -- exactly the PyTorch reference's
//   sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w)).
// (One difference: a literal "<unk>" etc. in the training text is not added a second time.)
//
// Saved as UTF-8 text, one token per line in id order, written atomically (temp file + rename).
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "train/data/parallel_text.h"

namespace gf::train {

class Vocab {
 public:
  static constexpr int64_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3;
  static constexpr std::array<std::string_view, 4> kSpecials = {"<pad>", "<unk>", "<bos>", "<eos>"};

  // Only the four specials.
  Vocab();
  // From a token list in id order; it must start with the four specials and have no empty,
  // duplicate or whitespace-containing tokens (std::invalid_argument otherwise).
  explicit Vocab(std::vector<std::string> tokens);

  static Vocab build(const std::vector<Tokens>& sentences, int64_t min_freq = 2);
  // The source (or target) side of parallel text.
  static Vocab build_source(const std::vector<TokenPair>& pairs, int64_t min_freq = 2);
  static Vocab build_target(const std::vector<TokenPair>& pairs, int64_t min_freq = 2);
  // One vocabulary for both sides (the decoder-only model reads source and target as one
  // sequence), counting a token's uses on either side, with <sep> right after the specials.
  static constexpr std::string_view kSep = "<sep>";
  static Vocab build_joint(const std::vector<TokenPair>& pairs, int64_t min_freq = 2);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  bool contains(std::string_view token) const { return index_.find(token) != index_.end(); }
  // The id of a token, kUnk when it is not in the vocabulary.
  int64_t id(std::string_view token) const;
  // The token of an id; std::out_of_range for ids outside [0, size).
  const std::string& token(int64_t id) const;

  std::vector<int64_t> encode(const Tokens& sentence) const;  // unknown tokens -> kUnk
  // Tokens up to the first <eos>, skipping <pad> and <bos>.
  Tokens decode(std::span<const int64_t> ids) const;
  std::string decode_text(std::span<const int64_t> ids) const;  // decode() joined by spaces

  // Throws std::runtime_error when the file cannot be written or read; load throws
  // std::invalid_argument naming file:line for bad content.
  void save(const std::filesystem::path& file) const;
  static Vocab load(const std::filesystem::path& file);
  // What load does with the file's bytes: `name` stands for the file in errors (name:line).
  static Vocab parse(std::string_view text, const std::string& name);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> index_;
};

}  // namespace gf::train

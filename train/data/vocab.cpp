#include "train/data/vocab.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace {

// Why a token cannot be stored one per line, or nullptr when it can.
const char* token_problem(std::string_view token) {
  if (token.empty()) return "empty token";
  if (!utf8::is_valid(token)) return "invalid UTF-8";
  const Tokens parts = utf8::split_whitespace(token);
  if (parts.size() != 1 || parts[0] != token) return "token contains whitespace";
  return nullptr;
}

// Counts the tokens of sentence_of(0 .. n-1); the first tokens are the specials and `extra`.
template <class SentenceOf>
Vocab build_from(size_t n, SentenceOf sentence_of, int64_t min_freq, std::vector<std::string_view> extra = {}) {
  std::unordered_map<std::string_view, int64_t> counts;
  for (size_t i = 0; i < n; ++i)
    for (const std::string& w : sentence_of(i)) ++counts[w];
  std::vector<std::pair<std::string_view, int64_t>> kept;
  for (const auto& [w, c] : counts) {
    const bool special = std::find(Vocab::kSpecials.begin(), Vocab::kSpecials.end(), w) != Vocab::kSpecials.end() ||
                         std::find(extra.begin(), extra.end(), w) != extra.end();
    if (c >= min_freq && !special) kept.emplace_back(w, c);
  }
  // std::string_view compares bytes as unsigned char, and UTF-8 byte order is code point order,
  // which is how Python compares str.
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::vector<std::string> tokens(Vocab::kSpecials.begin(), Vocab::kSpecials.end());
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  for (const auto& [w, c] : kept) tokens.emplace_back(w);
  return Vocab(std::move(tokens));
}

}  // namespace

Vocab::Vocab() : Vocab(std::vector<std::string>(kSpecials.begin(), kSpecials.end())) {}

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < kSpecials.size(); ++i)
    GF_CHECK(i < tokens_.size() && tokens_[i] == kSpecials[i], "Vocab: token {} must be '{}', got '{}'", i, kSpecials[i],
             i < tokens_.size() ? tokens_[i] : std::string("(none)"));
  index_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (const char* problem = token_problem(tokens_[i])) GF_FAIL("Vocab: token {} '{}': {}", i, tokens_[i], problem);
    auto [it, fresh] = index_.emplace(tokens_[i], static_cast<int64_t>(i));
    GF_CHECK(fresh, "Vocab: token {} '{}' duplicates token {}", i, tokens_[i], it->second);
  }
}

Vocab Vocab::build(const std::vector<Tokens>& sentences, int64_t min_freq) {
  return build_from(sentences.size(), [&](size_t i) -> const Tokens& { return sentences[i]; }, min_freq);
}

Vocab Vocab::build_source(const std::vector<TokenPair>& pairs, int64_t min_freq) {
  return build_from(pairs.size(), [&](size_t i) -> const Tokens& { return pairs[i].first; }, min_freq);
}

Vocab Vocab::build_target(const std::vector<TokenPair>& pairs, int64_t min_freq) {
  return build_from(pairs.size(), [&](size_t i) -> const Tokens& { return pairs[i].second; }, min_freq);
}

Vocab Vocab::build_joint(const std::vector<TokenPair>& pairs, int64_t min_freq) {
  return build_from(
      2 * pairs.size(), [&](size_t i) -> const Tokens& { return i % 2 ? pairs[i / 2].second : pairs[i / 2].first; }, min_freq, {kSep});
}

int64_t Vocab::id(std::string_view token) const {
  auto it = index_.find(token);
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  GF_CHECK_AS(std::out_of_range, id >= 0 && id < size(), "Vocab::token: id {} is outside [0, {})", id, size());
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const Tokens& sentence) const {
  std::vector<int64_t> ids;
  ids.reserve(sentence.size());
  for (const std::string& w : sentence) ids.push_back(id(w));
  return ids;
}

Tokens Vocab::decode(std::span<const int64_t> ids) const {
  Tokens out;
  for (int64_t i : ids) {
    if (i == kEos) break;
    if (i == kPad || i == kBos) continue;
    out.push_back(token(i));
  }
  return out;
}

std::string Vocab::decode_text(std::span<const int64_t> ids) const {
  std::string text;
  for (const std::string& w : decode(ids)) {
    if (!text.empty()) text += ' ';
    text += w;
  }
  return text;
}

void Vocab::save(const std::filesystem::path& file) const {
  // Atomically (temporary file, fsync, rename), as every file of a run folder.
  write_file_atomic_with(file.string(), [&](const ByteSink& sink) {
    for (const std::string& w : tokens_) {
      sink(w.data(), w.size());
      sink("\n", 1);
    }
  });
}

Vocab Vocab::load(const std::filesystem::path& file) { return parse(read_file_bytes(file, "Vocab::load"), file.string()); }

Vocab Vocab::parse(std::string_view text, const std::string& name) {
  std::vector<std::string> lines = split_text_lines(text, name);
  std::unordered_map<std::string_view, size_t> first_line;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& w = lines[i];
    GF_CHECK(i >= kSpecials.size() || w == kSpecials[i], "{}:{}: expected '{}', found '{}'", name, i + 1, kSpecials[i], w);
    if (const char* problem = token_problem(w)) GF_FAIL("{}:{}: {}", name, i + 1, problem);
    auto [it, fresh] = first_line.emplace(w, i + 1);
    GF_CHECK(fresh, "{}:{}: duplicate token '{}' (first on line {})", name, i + 1, w, it->second);
  }
  GF_CHECK(lines.size() >= kSpecials.size(), "{}:{}: file ends before the {} special tokens", name, lines.size() + 1,
           kSpecials.size());
  return Vocab(std::move(lines));
}

}  // namespace gf::train

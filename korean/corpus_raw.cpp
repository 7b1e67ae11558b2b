#include "korean/corpus_raw.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "train/data/parallel_text.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace {

constexpr std::array<std::string_view, 3> kPunctuation = {".", "?", "!"};
constexpr std::array<std::string_view, 13> kKoreanParticles = {"는", "은", "을", "를", "가", "에", "에서", "로", "으로", "와", "과", "의", "도"};

template <class List>
bool in(const List& list, std::string_view w) {
  return std::find(list.begin(), list.end(), w) != list.end();
}

// Tokens joined with a space, except before a token `attached` says joins the word before it.
template <class Attached>
std::string join_attached(const Tokens& tokens, Attached attached) {
  std::string out;
  for (const std::string& w : tokens) {
    if (!out.empty() && !attached(w)) out += ' ';
    out += w;
  }
  return out;
}

std::string english_text(const std::string& line) {
  Tokens words = utf8::split_whitespace(line);
  for (std::string& w : words) {
    if (w == "i") w = "I";
    if (w == "tv") w = "TV";
  }
  if (!words.empty() && words[0][0] >= 'a' && words[0][0] <= 'z') words[0][0] = static_cast<char>(words[0][0] - 'a' + 'A');
  return join_attached(words, [](std::string_view w) { return in(kPunctuation, w); });
}

std::string korean_text(const std::string& line) {
  return join_attached(utf8::split_whitespace(line), [](std::string_view w) { return in(kPunctuation, w) || in(kKoreanParticles, w); });
}

}  // namespace

SentencePair render_raw(const SentencePair& p) { return {english_text(p.src), korean_text(p.tgt)}; }

CorpusSplits render_raw(const CorpusSplits& c) {
  CorpusSplits out;
  for (const auto& [from, to] : {std::pair{&c.train, &out.train}, std::pair{&c.valid, &out.valid}, std::pair{&c.test, &out.test}})
    for (const SentencePair& p : *from) to->push_back(render_raw(p));
  return out;
}

}  // namespace gf::train

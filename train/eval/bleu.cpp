#include "train/eval/bleu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "tensor/check.h"

namespace gf {
namespace {

// ---- Python-compatible string helpers ----
// sacreBLEU runs on Python str, whose split()/rstrip() treat every Unicode whitespace code point as
// a separator, not only ASCII ones. A BLEU that must match sacreBLEU token for token has to do the
// same on our UTF-8 bytes (e.g. U+3000 IDEOGRAPHIC SPACE in CJK text, U+00A0 NO-BREAK SPACE).

// Byte length of the whitespace code point starting at s[i], or 0 if none starts there.
size_t whitespace_len(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c0 = b(0);
  if ((c0 >= 0x09 && c0 <= 0x0D) || (c0 >= 0x1C && c0 <= 0x20)) return 1;
  if (c0 == 0xC2 && (b(1) == 0x85 || b(1) == 0xA0)) return 2;  // U+0085, U+00A0
  if (c0 == 0xE1 && b(1) == 0x9A && b(2) == 0x80) return 3;    // U+1680
  if (c0 == 0xE2 && b(1) == 0x80) {
    const unsigned c2 = b(2);
    if ((c2 >= 0x80 && c2 <= 0x8A) || c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF) return 3;  // U+2000-200A, 2028, 2029, 202F
  }
  if (c0 == 0xE2 && b(1) == 0x81 && b(2) == 0x9F) return 3;  // U+205F
  if (c0 == 0xE3 && b(1) == 0x80 && b(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Python's str.rstrip(): drop trailing whitespace code points.
std::string rstrip(const std::string& s) {
  size_t end = 0;  // one past the last byte that is not part of trailing whitespace
  for (size_t i = 0; i < s.size();) {
    const size_t w = whitespace_len(s, i);
    if (w > 0) {
      i += w;
    } else {
      ++i;
      end = i;
    }
  }
  return s.substr(0, end);
}

// Python's str.replace(): every non-overlapping occurrence, scanning left to right.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

// The character class of the first TokenizerRegexp rule, [{-~[-` -&(-+:-@/]: ASCII punctuation
// and symbols except ' , - . which the later rules (or nobody) handle. Space is in it too, which
// is harmless because spaces are collapsed at the end.
bool is_split_symbol(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// The three two-character rules are applied like Python's re.sub: scan left to right, and after a
// match continue behind it, so matches never overlap. All rule characters are ASCII, so scanning
// UTF-8 bytes gives the same result as scanning code points (a multi-byte character can only take
// part in a match as the [^0-9] side, and its bytes are copied through unchanged).
template <class Match, class Emit>
std::string sub_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string join_tokens(const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += tokens[i];
  }
  return out;
}

// ---- n-gram statistics ----

using NgramCounts = std::unordered_map<std::string, int64_t>;

// All n-grams of order 1..kBleuMaxOrder; the key joins tokens with ' ', which is unambiguous
// because tokens never contain whitespace.
NgramCounts count_ngrams(const std::vector<std::string>& tokens) {
  NgramCounts counts;
  const size_t len = tokens.size();
  for (size_t i = 0; i < len; ++i) {
    std::string key;
    for (size_t n = 1; n <= static_cast<size_t>(kBleuMaxOrder) && i + n <= len; ++n) {
      if (n > 1) key += ' ';
      key += tokens[i + n - 1];
      ++counts[key];
    }
  }
  return counts;
}

size_t ngram_order(const std::string& key) { return static_cast<size_t>(std::count(key.begin(), key.end(), ' ')) + 1; }

// sacreBLEU's choice among several reference lengths: the closest to the hypothesis length,
// the shorter one on a tie.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1, best_len = -1;
  for (const int64_t r : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - r);
    if (best_diff == -1 || diff < best_diff) {
      best_diff = diff;
      best_len = r;
    } else if (diff == best_diff && r < best_len) {
      best_len = r;
    }
  }
  return best_len;
}

void check_tokenizer(const std::string& tokenize) {
  GF_CHECK(tokenize == "13a" || tokenize == "none", "corpus_bleu: unknown tokenize '{}' (expected '13a' or 'none')", tokenize);
}

// Statistics plus the nrefs field of the signature ("1", "2", ... or "var").
BleuStats collect_stats(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& ref_streams,
                        const std::string& tokenize, std::string* nrefs_out) {
  check_tokenizer(tokenize);
  GF_CHECK(!hyps.empty(), "corpus_bleu: no hypotheses (the corpus is empty)");
  GF_CHECK(!ref_streams.empty(), "corpus_bleu: no reference streams");
  for (size_t k = 0; k < ref_streams.size(); ++k)
    GF_CHECK(ref_streams[k].size() == hyps.size(), "corpus_bleu: {} hypotheses but {} references{}", hyps.size(),
             ref_streams[k].size(), ref_streams.size() > 1 ? fmt::format(" in stream {}", k) : "");

  BleuStats stats;
  std::set<size_t> nrefs_seen;
  for (size_t i = 0; i < hyps.size(); ++i) {
    NgramCounts ref_ngrams;  // per n-gram, the maximum count over this segment's references
    std::vector<int64_t> ref_lens;
    for (const auto& stream : ref_streams) {
      const std::string& ref = stream[i];
      if (ref.empty()) continue;  // sacreBLEU skips empty references (variable number of refs)
      const auto tokens = split_whitespace(bleu_tokenize(ref, tokenize));
      ref_lens.push_back(static_cast<int64_t>(tokens.size()));
      for (const auto& [gram, c] : count_ngrams(tokens)) {
        auto& slot = ref_ngrams[gram];
        slot = std::max(slot, c);
      }
    }
    GF_CHECK(!ref_lens.empty(), "corpus_bleu: empty reference for segment {}", i);
    nrefs_seen.insert(ref_lens.size());

    const auto hyp_tokens = split_whitespace(bleu_tokenize(hyps[i], tokenize));
    const auto hyp_len = static_cast<int64_t>(hyp_tokens.size());
    stats.sys_len += hyp_len;
    stats.ref_len += closest_ref_len(hyp_len, ref_lens);
    for (const auto& [gram, c] : count_ngrams(hyp_tokens)) {
      const size_t n = ngram_order(gram) - 1;
      stats.total[n] += c;
      if (auto it = ref_ngrams.find(gram); it != ref_ngrams.end()) stats.correct[n] += std::min(c, it->second);
    }
  }
  if (nrefs_out) *nrefs_out = nrefs_seen.size() == 1 ? std::to_string(*nrefs_seen.begin()) : "var";
  return stats;
}

// "version:2.x" names the sacreBLEU 2.x algorithm reproduced here; no sacreBLEU is involved.
std::string make_signature(const std::string& nrefs, const std::string& tokenize) {
  return fmt::format("nrefs:{}|case:mixed|eff:no|tok:{}|smooth:exp|version:2.x", nrefs, tokenize);
}

}  // namespace

std::vector<std::string> split_whitespace(const std::string& line) {
  std::vector<std::string> tokens;
  std::string cur;
  for (size_t i = 0; i < line.size();) {
    const size_t w = whitespace_len(line, i);
    if (w > 0) {
      if (!cur.empty()) tokens.push_back(std::move(cur));
      cur.clear();
      i += w;
    } else {
      cur += line[i++];
    }
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

std::string tokenize_13a(const std::string& input) {
  // Language-independent part of mteval-v13a, in sacreBLEU's order (order matters: "&amp;quot;"
  // becomes "&quot;", not '"').
  std::string line = replace_all(input, "<skipped>", "");
  line = replace_all(line, "-\n", "");
  line = replace_all(line, "\n", " ");
  line = replace_all(line, "&quot;", "\"");
  line = replace_all(line, "&amp;", "&");
  line = replace_all(line, "&lt;", "<");
  line = replace_all(line, "&gt;", ">");
  line = " " + line + " ";

  // Rule 1: every symbol in the class becomes its own token.
  std::string spaced;
  spaced.reserve(line.size() * 2);
  for (const char c : line) {
    if (is_split_symbol(c)) {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  // Rule 2: split '.' and ',' unless preceded by a digit ("3.5" and "1,000" stay whole).
  spaced = sub_pairs(
      spaced, [](char a, char b) { return !is_digit(a) && is_period_or_comma(b); },
      [](std::string& out, char a, char b) { out += a, out += ' ', out += b, out += ' '; });
  // Rule 3: split '.' and ',' unless followed by a digit.
  spaced = sub_pairs(
      spaced, [](char a, char b) { return is_period_or_comma(a) && !is_digit(b); },
      [](std::string& out, char a, char b) { out += ' ', out += a, out += ' ', out += b; });
  // Rule 4: split a dash that follows a digit ("2-3" -> "2 - 3", but "well-known" stays).
  spaced = sub_pairs(
      spaced, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& out, char a, char b) { out += a, out += ' ', out += b, out += ' '; });

  return join_tokens(split_whitespace(spaced));
}

std::string bleu_tokenize(const std::string& line, const std::string& tokenize) {
  check_tokenizer(tokenize);
  const std::string stripped = rstrip(line);
  return tokenize == "13a" ? tokenize_13a(stripped) : stripped;
}

BleuStats corpus_bleu_stats(const std::vector<std::string>& hyps,
                            const std::vector<std::vector<std::string>>& ref_streams, const std::string& tokenize) {
  return collect_stats(hyps, ref_streams, tokenize, nullptr);
}

BleuResult bleu_from_stats(const BleuStats& s, const std::string& signature) {
  BleuResult r;
  r.signature = signature;
  r.sys_len = s.sys_len;
  r.ref_len = s.ref_len;
  r.ratio = s.ref_len ? static_cast<double>(s.sys_len) / static_cast<double>(s.ref_len) : 0.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    r.counts[n] = s.correct[n];
    r.totals[n] = s.total[n];
  }

  if (s.sys_len < s.ref_len)
    r.bp = s.sys_len > 0 ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.sys_len)) : 0.0;
  else
    r.bp = 1.0;

  // No match of any order: score 0 with all precisions 0 (sacreBLEU issue #141), rather than
  // letting the smoothing invent precisions for a hypothesis that shares nothing with the reference.
  if (std::all_of(std::begin(s.correct), std::end(s.correct), [](int64_t c) { return c == 0; })) {
    r.score = 0.0;
    return r;
  }

  // 'exp' smoothing (mteval-v13a, Chen & Cherry's method 3): the k-th order without matches gets
  // precision 1 / (2^k * total) instead of 0, so one missing 4-gram does not zero the whole score.
  double smooth = 1.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    // An order with no hypothesis n-grams at all (every segment shorter than n): this and all
    // higher precisions stay 0, which makes the score 0 below.
    if (s.total[n] == 0) break;
    if (s.correct[n] == 0) {
      smooth *= 2;
      r.precisions[n] = 100.0 / (smooth * static_cast<double>(s.total[n]));
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    }
  }

  // Geometric mean of the precisions; sacreBLEU floors log(0) at -9999999999 (so the score
  // underflows to exactly 0) instead of producing -inf.
  double log_sum = 0.0;
  for (int n = 0; n < kBleuMaxOrder; ++n) log_sum += r.precisions[n] == 0.0 ? -9999999999.0 : std::log(r.precisions[n]);
  r.score = r.bp * std::exp(log_sum / kBleuMaxOrder);
  return r;
}

BleuResult corpus_bleu_multi(const std::vector<std::string>& hyps,
                             const std::vector<std::vector<std::string>>& ref_streams, const std::string& tokenize) {
  std::string nrefs;
  const BleuStats stats = collect_stats(hyps, ref_streams, tokenize, &nrefs);
  return bleu_from_stats(stats, make_signature(nrefs, tokenize));
}

BleuResult corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                       const std::string& tokenize) {
  return corpus_bleu_multi(hyps, {refs}, tokenize);
}

std::string BleuResult::format(bool with_signature) const {
  const std::string name = with_signature && !signature.empty() ? "BLEU|" + signature : "BLEU";
  return fmt::format("{} = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                     name, score, precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio, sys_len,
                     ref_len);
}

}  // namespace gf

#pragma once
// Corpus BLEU computed the way sacreBLEU 2.x does with its defaults
// (signature nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x):
// mteval-v13a tokenisation, n-grams of order 1..4 with counts clipped by the reference,
// corpus-level sums of matches and totals, brevity penalty exp(1 - r/c) when c < r, and the
// NIST "exp" smoothing for orders with no match. The aim is the same number sacreBLEU prints,
// so that scores from gradflow can be compared with published ones.
#include <cstdint>
#include <string>
#include <vector>

namespace gf {

inline constexpr int kBleuMaxOrder = 4;

// Sufficient statistics of corpus BLEU: sums over all segments.
struct BleuStats {
  int64_t correct[kBleuMaxOrder] = {0, 0, 0, 0};  // clipped n-gram matches, per order
  int64_t total[kBleuMaxOrder] = {0, 0, 0, 0};    // hypothesis n-grams, per order
  int64_t sys_len = 0;                            // hypothesis tokens
  int64_t ref_len = 0;                            // (closest) reference tokens
};

struct BleuResult {
  double score = 0;                          // 0..100
  double precisions[kBleuMaxOrder] = {0, 0, 0, 0};  // 0..100, after smoothing
  int64_t counts[kBleuMaxOrder] = {0, 0, 0, 0};     // clipped matches per order
  int64_t totals[kBleuMaxOrder] = {0, 0, 0, 0};     // hypothesis n-grams per order
  double bp = 0;                             // brevity penalty
  double ratio = 0;                          // sys_len / ref_len (0 when ref_len is 0)
  int64_t sys_len = 0, ref_len = 0;
  std::string signature;                     // e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x"

  // sacreBLEU's score line: "BLEU = 35.21 67.1/42.3/28.0/19.5 (BP = 0.958 ratio = 0.959 hyp_len = 9 ref_len = 10)";
  // with_signature puts the signature after the name: "BLEU|nrefs:1|...|version:2.x = 35.21 ...".
  std::string format(bool with_signature = false) const;
};

// The mteval-v13a tokeniser as sacreBLEU implements it (tok:13a); tokens joined by single spaces.
std::string tokenize_13a(const std::string& line);
// Tokenise one segment the way BLEU does before counting: strip trailing whitespace, then apply
// the named tokeniser ("13a" or "none"); throws std::invalid_argument for any other name.
std::string bleu_tokenize(const std::string& line, const std::string& tokenize);
// Python's str.split(): split on runs of (Unicode) whitespace, dropping empty pieces.
std::vector<std::string> split_whitespace(const std::string& line);

// Corpus BLEU of hyps[i] against refs[i]. Throws std::invalid_argument when the counts differ,
// the corpus is empty, a reference is empty (sacreBLEU refuses those too) or tokenize is unknown.
BleuResult corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                       const std::string& tokenize = "13a");

// Several references per segment: ref_streams[k][i] is the k-th reference of segment i (as in
// sacreBLEU's corpus_score(hyps, [refs1, refs2])). Empty references are skipped per segment; the
// signature then says nrefs:var if segments end up with different numbers of references.
BleuResult corpus_bleu_multi(const std::vector<std::string>& hyps,
                             const std::vector<std::vector<std::string>>& ref_streams,
                             const std::string& tokenize = "13a");

// Sums of matches/totals/lengths without the final formula (useful to aggregate shards).
BleuStats corpus_bleu_stats(const std::vector<std::string>& hyps,
                            const std::vector<std::vector<std::string>>& ref_streams,
                            const std::string& tokenize = "13a");

// The BLEU formula on given statistics with exp smoothing (sacreBLEU's BLEU.compute_bleu with
// smooth_method="exp", effective_order=false).
BleuResult bleu_from_stats(const BleuStats& stats, const std::string& signature = "");

}  // namespace gf

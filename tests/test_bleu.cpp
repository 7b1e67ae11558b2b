#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/eval/bleu.h"

using namespace gf;
using Strings = std::vector<std::string>;

// ---------------------------------------------------------------- tokenisation

TEST_CASE("13a: punctuation becomes separate tokens") {
  CHECK(tokenize_13a("Hello, world!") == "Hello , world !");
  CHECK(tokenize_13a("(a) [b] {c} x/y a:b a;b a?b a@b") == "( a ) [ b ] { c } x / y a : b a ; b a ? b a @ b");
  CHECK(tokenize_13a("snake_case a^b a`b a|b a~b a=b a+b a*b #1 50% $5") ==
        "snake _ case a ^ b a ` b a | b a ~ b a = b a + b a * b # 1 50 % $ 5");
  // apostrophes and hyphens between letters stay inside the word
  CHECK(tokenize_13a("don't well-known") == "don't well-known");
  // whitespace runs (and leading/trailing space) collapse to single spaces
  CHECK(tokenize_13a("  a \t b  ") == "a b");
  CHECK(tokenize_13a("") == "");
}

TEST_CASE("13a: periods and commas inside numbers are kept") {
  CHECK(tokenize_13a("3.5") == "3.5");
  CHECK(tokenize_13a("1,000") == "1,000");
  // ',' after a digit but before a space splits (rule 3); final '.' after a digit too
  CHECK(tokenize_13a("It costs $3.50, or 1,000 yen.") == "It costs $ 3.50 , or 1,000 yen .");
  CHECK(tokenize_13a("pi is 3.14.") == "pi is 3.14 .");
  CHECK(tokenize_13a("a.b,c") == "a . b , c");
  // kept only between two digits: after a space, ".5" is split (rule 2)
  CHECK(tokenize_13a(".5 and ,5") == ". 5 and , 5");
  // dash after a digit is split, dash after a letter is not
  CHECK(tokenize_13a("pages 2-3 and A-4") == "pages 2 - 3 and A-4");
}

TEST_CASE("13a: entities, <skipped> and line breaks") {
  CHECK(tokenize_13a("&quot;Hi&quot; &amp; &lt;b&gt;") == "\" Hi \" & < b >");
  // replacements are applied one after the other, &quot; first: "&amp;quot;" ends as "&quot;"
  CHECK(tokenize_13a("&amp;quot;") == "& quot ;");
  CHECK(tokenize_13a("a <skipped> b") == "a b");
  CHECK(tokenize_13a("hy-\nphen\nnew") == "hyphen new");
}

TEST_CASE("13a: UTF-8 text") {
  CHECK(tokenize_13a("안녕하세요, 세계.") == "안녕하세요 , 세계 .");
  CHECK(tokenize_13a("«Ça va?»") == "«Ça va ? »");
  CHECK(tokenize_13a("Schöne Münchnerin 2018: Neun") == "Schöne Münchnerin 2018 : Neun");
}

TEST_CASE("whitespace splitting follows Python's str.split") {
  CHECK(split_whitespace("  a  b\tc\n") == Strings{"a", "b", "c"});
  CHECK(split_whitespace("a\u3000b\u00a0c\u2009d") == Strings{"a", "b", "c", "d"});  // ideographic, no-break, thin space
  CHECK(split_whitespace("a\u200bb") == Strings{"a\u200bb"});  // zero-width space is not whitespace
  CHECK(split_whitespace("").empty());
  // trailing Unicode whitespace is stripped before tokenising, then 13a runs
  CHECK(bleu_tokenize("Hi.\u3000", "13a") == "Hi .");
  CHECK(bleu_tokenize("a,b  ", "none") == "a,b");
  CHECK_THROWS_AS(bleu_tokenize("x", "intl"), std::invalid_argument);
}

// ---------------------------------------------------------------- scores by hand

TEST_CASE("perfect match scores 100") {
  const auto r = corpus_bleu({"the cat sat on the mat"}, {"the cat sat on the mat"});
  CHECK(r.score == doctest::Approx(100.0));
  for (double p : r.precisions) CHECK(p == doctest::Approx(100.0));
  CHECK(r.bp == 1.0);
  CHECK(r.sys_len == 6);
  CHECK(r.ref_len == 6);
  CHECK(r.format() == "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)");
}

TEST_CASE("disjoint hypothesis scores 0 with all precisions 0") {
  const auto r = corpus_bleu({"a b c d"}, {"e f g h"});
  CHECK(r.score == 0.0);
  for (double p : r.precisions) CHECK(p == 0.0);
  CHECK(r.bp == 1.0);
  // sacreBLEU's #141 example: no match at all, so exp smoothing must not kick in
  CHECK(corpus_bleu({"this is a cat"}, {"okay thanks"}).score == 0.0);
}

TEST_CASE("brevity penalty") {
  // hyp "the cat sat on the" (c = 5) vs ref "the cat sat on the mat" (r = 6):
  // every n-gram of the hypothesis matches: 5/5, 4/4, 3/3, 2/2 -> all precisions 100
  // BP = exp(1 - 6/5) = exp(-0.2) = 0.818730753...; BLEU = 100 * BP = 81.8730753...
  const auto r = corpus_bleu({"the cat sat on the"}, {"the cat sat on the mat"});
  CHECK(r.bp == doctest::Approx(std::exp(-0.2)));
  CHECK(r.score == doctest::Approx(81.87307530779819).epsilon(1e-12));
  CHECK(r.ratio == doctest::Approx(5.0 / 6.0));
  CHECK(r.format() == "BLEU = 81.87 100.0/100.0/100.0/100.0 (BP = 0.819 ratio = 0.833 hyp_len = 5 ref_len = 6)");
  // a longer hypothesis has no penalty
  CHECK(corpus_bleu({"the cat sat on the mat mat"}, {"the cat sat on the mat"}).bp == 1.0);
}

TEST_CASE("exp smoothing: one order without matches") {
  // hyp "the cat sat down here" vs ref "the cat sat up here" (both 5 tokens, BP = 1)
  // 1-grams: the cat sat here match, down not        -> 4/5 = 80
  // 2-grams: "the cat" "cat sat" match               -> 2/4 = 50
  // 3-grams: "the cat sat" matches                   -> 1/3 = 33.33
  // 4-grams: none match                              -> 0/2, smoothed to 100 / (2 * 2) = 25
  // BLEU = (80 * 50 * 33.33 * 25)^(1/4) = 42.7287006396...
  const auto r = corpus_bleu({"the cat sat down here"}, {"the cat sat up here"});
  CHECK(r.counts[3] == 0);
  CHECK(r.totals[3] == 2);
  CHECK(r.precisions[3] == doctest::Approx(25.0));
  CHECK(r.score == doctest::Approx(42.728700639623405).epsilon(1e-12));
  CHECK(r.format() == "BLEU = 42.73 80.0/50.0/33.3/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 5 ref_len = 5)");
}

TEST_CASE("exp smoothing: two orders without matches double the divisor each time") {
  // hyp "a b c d e" (5) vs ref "a b x c d y" (6)
  // 1-grams a b c d -> 4/5 = 80; 2-grams "a b" "c d" -> 2/4 = 50
  // 3-grams 0/3 -> 100 / (2 * 3) = 16.67; 4-grams 0/2 -> 100 / (4 * 2) = 12.5
  // BP = exp(1 - 6/5); BLEU = BP * (80 * 50 * 16.67 * 12.5)^(1/4) = 24.7369295440...
  const auto r = corpus_bleu({"a b c d e"}, {"a b x c d y"});
  CHECK(r.precisions[2] == doctest::Approx(100.0 / 6.0));
  CHECK(r.precisions[3] == doctest::Approx(12.5));
  CHECK(r.score == doctest::Approx(24.73692954409193).epsilon(1e-12));
}

TEST_CASE("an order with no hypothesis n-grams at all gives 0") {
  // three tokens: no 4-gram exists anywhere in the corpus -> total[3] = 0, precision stays 0,
  // log floored at -9999999999 -> score 0 even though everything matches
  const auto r = corpus_bleu({"a b c"}, {"a b c"});
  CHECK(r.totals[3] == 0);
  CHECK(r.precisions[2] == doctest::Approx(100.0));
  CHECK(r.precisions[3] == 0.0);
  CHECK(r.score == 0.0);
  // a second, longer segment supplies 4-grams, and the corpus is scored as a whole
  const auto c = corpus_bleu({"a b c", "d e f g"}, {"a b c", "d e f g"});
  CHECK(c.score == doctest::Approx(100.0));
}

TEST_CASE("empty hypotheses") {
  const auto r = corpus_bleu({"", ""}, {"a b", "c"});
  CHECK(r.score == 0.0);
  CHECK(r.bp == 0.0);
  CHECK(r.sys_len == 0);
  CHECK(r.ref_len == 3);
  CHECK(r.ratio == 0.0);
  CHECK(r.format() == "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 3)");
}

TEST_CASE("clipped counts") {
  // hyp "the the the the" vs ref "the cat": unigram "the" appears 4 times but only once in the
  // reference -> 1/4 matches; no bigram matches
  const auto r = corpus_bleu({"the the the the"}, {"the cat"});
  CHECK(r.counts[0] == 1);
  CHECK(r.totals[0] == 4);
  CHECK(r.counts[1] == 0);
}

TEST_CASE("tokenisation changes the score: 13a vs none") {
  // "Hello, world!" under 13a is "Hello , world !", the reference's tokens; with none its tokens
  // are "Hello," and "world!", which match none of "Hello" "," "world" "!": score 0
  CHECK(corpus_bleu({"Hello, world!"}, {"Hello , world !"}).score == doctest::Approx(100.0));
  CHECK(corpus_bleu({"Hello, world!"}, {"Hello , world !"}, "none").score == 0.0);
}

TEST_CASE("signature and format with signature") {
  const auto r = corpus_bleu({"a b c d"}, {"a b c d"});
  CHECK(r.signature == "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x");
  CHECK(corpus_bleu({"a b c d"}, {"a b c d"}, "none").signature ==
        "nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:2.x");
  CHECK(r.format(true).rfind("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x = 100.00 ", 0) == 0);
}

TEST_CASE("errors") {
  CHECK_THROWS_WITH_AS(corpus_bleu({"a", "b"}, {"a"}), doctest::Contains("2 hypotheses but 1 references"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(corpus_bleu({"a"}, {"a"}, "intl"), doctest::Contains("unknown tokenize 'intl'"),
                       std::invalid_argument);
  CHECK_THROWS_AS(corpus_bleu({}, {}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(corpus_bleu({"a", "b"}, {"a", ""}), doctest::Contains("empty reference for segment 1"),
                       std::invalid_argument);
  CHECK_THROWS_AS(corpus_bleu_multi({"a"}, {}), std::invalid_argument);
}

// ---------------------------------------------------------------- sacreBLEU's own test values

TEST_CASE("sacreBLEU test_bleu.py: README example with two references") {
  // test/test_bleu.py test_corpus_bleu_cases (EPSILON 1e-8)
  const Strings hyps = {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."};
  const std::vector<Strings> refs = {
      {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
      {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."},
  };
  const auto r = corpus_bleu_multi(hyps, refs);
  CHECK(std::abs(r.score - 48.530827) < 1e-6);
  CHECK(r.signature == "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x");
  CHECK(std::abs(corpus_bleu_multi(hyps, refs, "none").score - 49.1919566) < 1e-6);
  CHECK(corpus_bleu_multi({"", "", ""}, refs).score == 0.0);  // empty hypotheses are not removed
}

TEST_CASE("sacreBLEU test_bleu.py: statistics and scoring") {
  // test_case_statistics: hyp "am I am a character sequence", ref "I am a symbol string sequence a a"
  // -> counts [4, 2, 1, 0], totals [6, 5, 4, 3]
  const auto r = corpus_bleu({"am I am a character sequence"}, {"I am a symbol string sequence a a"});
  const int64_t counts[4] = {4, 2, 1, 0}, totals[4] = {6, 5, 4, 3};
  for (int n = 0; n < 4; ++n) {
    CHECK(r.counts[n] == counts[n]);
    CHECK(r.totals[n] == totals[n]);
  }
  // with exp smoothing (our own arithmetic): p = 4/6, 2/5, 1/4, 100/(2*3); c = 6, r = 8
  // BLEU = exp(1 - 8/6) * (66.67 * 40 * 25 * 16.67)^(1/4) = 23.2634726976...
  CHECK(r.score == doctest::Approx(23.263472697663296).epsilon(1e-12));

  // test_case_scoring: correct [9,7,5,3], total [10,8,6,4], sys_len = ref_len = 11 -> 0.8375922397
  BleuStats s;
  const int64_t c2[4] = {9, 7, 5, 3}, t2[4] = {10, 8, 6, 4};
  for (int n = 0; n < 4; ++n) s.correct[n] = c2[n], s.total[n] = t2[n];
  s.sys_len = s.ref_len = 11;
  CHECK(std::abs(bleu_from_stats(s).score / 100 - 0.8375922397) < 1e-8);
}

TEST_CASE("sacreBLEU test_sentence_bleu.py: Romanian example (#98)") {
  // expected with exp smoothing: 8.493 (tok 13a) and 7.347 (tok none), EPSILON 1e-3; that test
  // uses effective_order=True, which changes nothing here since every order has n-grams
  const std::string ref = "producţia de zahăr brut se exprimă în zahăr alb;";
  const std::string sys = "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;";
  CHECK(std::abs(corpus_bleu({sys}, {ref}).score - 8.493) < 1e-3);
  CHECK(std::abs(corpus_bleu({sys}, {ref}, "none").score - 7.347) < 1e-3);
}

TEST_CASE("corpus statistics are sums over segments") {
  const Strings hyps = {"the cat sat down here", "a b c d e"};
  const Strings refs = {"the cat sat up here", "a b x c d y"};
  const BleuStats s = corpus_bleu_stats(hyps, {refs});
  // segment 1: counts 4,2,1,0 totals 5,4,3,2; segment 2: counts 4,2,0,0 totals 5,4,3,2
  CHECK(s.correct[0] == 8);
  CHECK(s.correct[1] == 4);
  CHECK(s.correct[2] == 1);
  CHECK(s.correct[3] == 0);
  CHECK(s.total[0] == 10);
  CHECK(s.total[3] == 4);
  CHECK(s.sys_len == 10);
  CHECK(s.ref_len == 11);
  CHECK(bleu_from_stats(s).score == doctest::Approx(corpus_bleu(hyps, refs).score));
}

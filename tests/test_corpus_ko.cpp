// The built-in English -> Korean corpus: Korean morphology (particles, conjugation), rendering of
// chosen sentences, and the properties of the generated corpus.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "korean/corpus_ko.h"
#include "korean/korean_morph.h"
#include "train/data/parallel_text.h"
#include "train/data/utf8.h"

using namespace gf::train;
using korean::Tense;

namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool is_hangul_syllable(char32_t c) { return c >= 0xAC00 && c <= 0xD7A3; }

const CorpusSplits& corpus() {
  static const CorpusSplits c = make_korean_corpus(1, 24000);
  return c;
}

std::vector<SentencePair> all_pairs(const CorpusSplits& c) {
  std::vector<SentencePair> all = c.train;
  all.insert(all.end(), c.valid.begin(), c.valid.end());
  all.insert(all.end(), c.test.begin(), c.test.end());
  return all;
}

}  // namespace

TEST_CASE("the required example sentences come out exactly") {
  const SentenceSpec student{.frame = Frame::Copula, .subject = "i", .object = "student"};
  SentencePair p = render_sentence(student);
  CHECK(p.src == "i am a student .");
  CHECK(p.tgt == "저 는 학생 입니다 .");

  const SentenceSpec read{.frame = Frame::Transitive, .subject = "my friend", .verb = "read", .object = "book",
                     .place = "library", .time = "yesterday", .tense = Tense::Past};
  p = render_sentence(read);
  CHECK(p.src == "my friend read a book in the library yesterday .");
  CHECK(p.tgt == "제 친구 는 어제 도서관 에서 책 을 읽었습니다 .");
}

TEST_CASE("particles follow the final consonant of the last syllable") {
  CHECK(korean::has_batchim("학생"));
  CHECK_FALSE(korean::has_batchim("친구"));
  CHECK(korean::topic_particle("학생") == "은");
  CHECK(korean::topic_particle("친구") == "는");
  CHECK(korean::topic_particle("제 친구") == "는");  // only the last syllable counts
  CHECK(korean::object_particle("책") == "을");
  CHECK(korean::object_particle("사과") == "를");
  CHECK(korean::subject_particle("학생") == "이");
  CHECK(korean::subject_particle("친구") == "가");
  CHECK(korean::and_particle("친구") == "와");
  CHECK(korean::and_particle("선생님") == "과");
  CHECK(korean::instrument_particle("펜") == "으로");
  CHECK(korean::instrument_particle("젓가락") == "으로");
  CHECK(korean::instrument_particle("버스") == "로");
  CHECK(korean::instrument_particle("지하철") == "로");  // ㄹ takes 로
  CHECK(korean::instrument_particle("연필") == "로");
  CHECK_THROWS_WITH_AS(korean::has_batchim("book"), doctest::Contains("'book' does not end in a Hangul syllable"),
                       std::invalid_argument);
  CHECK_THROWS_AS(korean::topic_particle(""), std::invalid_argument);
}

TEST_CASE("formal polite conjugation in present, past and future") {
  struct Row {
    const char* verb;
    const char* present;
    const char* past;
    const char* future;
  };
  const Row rows[] = {
      {"가다", "갑니다", "갔습니다", "갈 것입니다"},           {"먹다", "먹습니다", "먹었습니다", "먹을 것입니다"},
      {"읽다", "읽습니다", "읽었습니다", "읽을 것입니다"},     {"하다", "합니다", "했습니다", "할 것입니다"},
      {"공부하다", "공부합니다", "공부했습니다", "공부할 것입니다"},
      {"오다", "옵니다", "왔습니다", "올 것입니다"},           {"보다", "봅니다", "봤습니다", "볼 것입니다"},
      {"마시다", "마십니다", "마셨습니다", "마실 것입니다"},   {"배우다", "배웁니다", "배웠습니다", "배울 것입니다"},
      {"쓰다", "씁니다", "썼습니다", "쓸 것입니다"},           {"만들다", "만듭니다", "만들었습니다", "만들 것입니다"},
      {"놀다", "놉니다", "놀았습니다", "놀 것입니다"},         {"듣다", "듣습니다", "들었습니다", "들을 것입니다"},
      {"걷다", "걷습니다", "걸었습니다", "걸을 것입니다"},     {"닫다", "닫습니다", "닫았습니다", "닫을 것입니다"},
      {"돕다", "돕습니다", "도왔습니다", "도울 것입니다"},     {"덥다", "덥습니다", "더웠습니다", "더울 것입니다"},
      {"입다", "입습니다", "입었습니다", "입을 것입니다"},     {"부르다", "부릅니다", "불렀습니다", "부를 것입니다"},
      {"빠르다", "빠릅니다", "빨랐습니다", "빠를 것입니다"},   {"바쁘다", "바쁩니다", "바빴습니다", "바쁠 것입니다"},
      {"예쁘다", "예쁩니다", "예뻤습니다", "예쁠 것입니다"},   {"크다", "큽니다", "컸습니다", "클 것입니다"},
      {"쉬다", "쉽니다", "쉬었습니다", "쉴 것입니다"},         {"기다리다", "기다립니다", "기다렸습니다", "기다릴 것입니다"},
      {"치다", "칩니다", "쳤습니다", "칠 것입니다"},           {"추다", "춥니다", "췄습니다", "출 것입니다"},
      {"있다", "있습니다", "있었습니다", "있을 것입니다"},     {"짧다", "짧습니다", "짧았습니다", "짧을 것입니다"},
      {"되다", "됩니다", "됐습니다", "될 것입니다"},
  };
  for (const Row& r : rows) {
    CAPTURE(r.verb);
    CHECK(korean::polite(r.verb, Tense::Present) == r.present);
    CHECK(korean::polite(r.verb, Tense::Past) == r.past);
    CHECK(korean::polite(r.verb, Tense::Future) == r.future);
  }
}

TEST_CASE("negation, honorifics and modifiers") {
  CHECK(korean::polite_negative("먹다", Tense::Present) == "먹지 않습니다");
  CHECK(korean::polite_negative("먹다", Tense::Past) == "먹지 않았습니다");
  CHECK(korean::polite_negative("먹다", Tense::Future) == "먹지 않을 것입니다");
  CHECK(korean::polite_negative("공부하다", Tense::Past) == "공부하지 않았습니다");
  CHECK(korean::polite_negative("크다", Tense::Present) == "크지 않습니다");
  CHECK(korean::polite_negative("먹다", Tense::Present, true) == "먹지 않으십니다");

  CHECK(korean::polite("가다", Tense::Present, true) == "가십니다");
  CHECK(korean::polite("가다", Tense::Past, true) == "가셨습니다");
  CHECK(korean::polite("가다", Tense::Future, true) == "가실 것입니다");
  CHECK(korean::polite("읽다", Tense::Present, true) == "읽으십니다");
  CHECK(korean::polite("읽다", Tense::Past, true) == "읽으셨습니다");
  CHECK(korean::polite("만들다", Tense::Present, true) == "만드십니다");
  CHECK(korean::polite("듣다", Tense::Present, true) == "들으십니다");
  CHECK(korean::polite("돕다", Tense::Past, true) == "도우셨습니다");
  CHECK(korean::polite("있다", Tense::Present, true) == "있으십니다");

  CHECK(korean::modifier("크다") == "큰");
  CHECK(korean::modifier("작다") == "작은");
  CHECK(korean::modifier("길다") == "긴");
  CHECK(korean::modifier("덥다") == "더운");
  CHECK(korean::modifier("맛있다") == "맛있는");
  CHECK(korean::modifier("깨끗하다") == "깨끗한");
  CHECK(korean::modifier("빠르다") == "빠른");
  CHECK(korean::modifier("예쁘다") == "예쁜");

  CHECK_THROWS_WITH_AS(korean::polite("먹어", Tense::Present),
                       doctest::Contains("'먹어' is not a Hangul dictionary form ending in 다"), std::invalid_argument);
  CHECK_THROWS_AS(korean::polite("go다", Tense::Present), std::invalid_argument);
  CHECK_THROWS_AS(korean::modifier("다"), std::invalid_argument);
}

TEST_CASE("English tense forms agree with the Korean and the subject") {
  SentenceSpec s{.frame = Frame::Transitive, .subject = "he", .verb = "read", .object = "book"};
  struct Row {
    Tense tense;
    bool negative;
    const char* en;
    const char* ko;
  };
  const Row rows[] = {
      {Tense::Present, false, "he reads a book .", "그 는 책 을 읽습니다 ."},
      {Tense::Past, false, "he read a book .", "그 는 책 을 읽었습니다 ."},
      {Tense::Future, false, "he will read a book .", "그 는 책 을 읽을 것입니다 ."},
      {Tense::Present, true, "he does not read a book .", "그 는 책 을 안 읽습니다 ."},
      {Tense::Past, true, "he did not read a book .", "그 는 책 을 안 읽었습니다 ."},
      {Tense::Future, true, "he will not read a book .", "그 는 책 을 안 읽을 것입니다 ."},
  };
  for (const Row& r : rows) {
    s.tense = r.tense;
    s.negative = r.negative;
    const SentencePair p = render_sentence(s);
    CHECK(p.src == r.en);
    CHECK(p.tgt == r.ko);
  }

  // Irregular English pasts, third person -s/-es/-ies, "do not" for I/we/they.
  SentenceSpec eat{.frame = Frame::Transitive, .subject = "we", .verb = "eat", .object = "apple", .time = "yesterday",
                     .tense = Tense::Past};
  CHECK(render_sentence(eat).src == "we ate an apple yesterday .");
  CHECK(render_sentence(eat).tgt == "우리 는 어제 사과 를 먹었습니다 .");
  eat.tense = Tense::Present;
  eat.time = "every day";
  eat.negative = true;
  CHECK(render_sentence(eat).src == "we do not eat an apple every day .");

  SentenceSpec study{.frame = Frame::Transitive, .subject = "she", .verb = "study", .object = "korean", .time = "every day"};
  CHECK(render_sentence(study).src == "she studies korean every day .");
  CHECK(render_sentence(study).tgt == "그녀 는 매일 한국어 를 공부합니다 .");
  study.negative = true;
  study.time = "";
  study.tense = Tense::Future;
  CHECK(render_sentence(study).tgt == "그녀 는 한국어 를 공부하지 않을 것입니다 .");  // 하다 verbs: -지 않다

  SentenceSpec go{.frame = Frame::Motion, .subject = "i", .verb = "go", .place = "school"};
  CHECK(render_sentence(go).src == "i go to school .");
  CHECK(render_sentence(go).tgt == "저 는 학교 에 갑니다 .");
  go.subject = "my mother";
  go.tense = Tense::Past;
  go.time = "tomorrow";
  CHECK_THROWS_WITH_AS(render_sentence(go), doctest::Contains("'tomorrow' does not fit the past tense"),
                       std::invalid_argument);
  go.time = "yesterday";
  go.instrument = "subway";
  go.place = "market";
  CHECK(render_sentence(go).src == "my mother went to the market by subway yesterday .");
  CHECK(render_sentence(go).tgt == "제 어머니 는 어제 지하철 로 시장 에 가셨습니다 .");  // honorific -시-
  go.tense = Tense::Future;
  go.time = "tomorrow";
  go.subject = "he";
  go.instrument = "";
  go.place = "home";
  CHECK(render_sentence(go).src == "he will go home tomorrow .");
  CHECK(render_sentence(go).tgt == "그 는 내일 집 에 갈 것입니다 .");
}

TEST_CASE("every frame renders correct Korean") {
  SentenceSpec big{.frame = Frame::Adjective, .subject = "the dog", .adjective = "big"};
  CHECK(render_sentence(big).src == "the dog is big .");
  CHECK(render_sentence(big).tgt == "개 는 큽니다 .");
  big.negative = true;
  big.very = true;
  CHECK(render_sentence(big).src == "the dog is not very big .");
  CHECK(render_sentence(big).tgt == "개 는 별로 크지 않습니다 .");

  const SentenceSpec bag{.frame = Frame::Adjective, .subject = "shoes", .subject_det = Determiner::This,
                     .adjective = "expensive", .tense = Tense::Past};  // a noun subject with a determiner, plural agreement
  CHECK(render_sentence(bag).src == "these shoes were expensive .");
  CHECK(render_sentence(bag).tgt == "이 신발 은 비쌌습니다 .");

  const SentenceSpec hungry{.frame = Frame::Adjective, .subject = "i", .adjective = "hungry"};
  CHECK(render_sentence(hungry).src == "i am hungry .");
  CHECK(render_sentence(hungry).tgt == "저 는 배 가 고픕니다 .");

  const SentenceSpec eat{.frame = Frame::Transitive, .subject = "i", .verb = "eat", .object = "rice", .adjective = "hot",
                     .place = "home", .instrument = "chopsticks",
                     .tense = Tense::Past};  // attributive adjective, tool with 으로, companion with 와
  CHECK(render_sentence(eat).src == "i ate hot rice with chopsticks at home .");
  CHECK(render_sentence(eat).tgt == "저 는 집 에서 젓가락 으로 뜨거운 밥 을 먹었습니다 .");

  const SentenceSpec buy{.frame = Frame::Transitive, .subject = "my friend", .verb = "buy", .object = "bread", .object2 = "milk",
                     .companion = "my teacher",
                     .tense = Tense::Future};  // "and" takes 와/과 from the first noun, 을/를 from the last
  CHECK(render_sentence(buy).src == "my friend will buy bread and milk with my teacher .");
  CHECK(render_sentence(buy).tgt == "제 친구 는 제 선생님 과 함께 빵 과 우유 를 살 것입니다 .");

  SentenceSpec play{.frame = Frame::Transitive, .subject = "they", .verb = "play",
                     .object = "the piano"};  // one English verb, different Korean verbs
  CHECK(render_sentence(play).tgt == "그들 은 피아노 를 칩니다 .");
  play.object = "soccer";
  CHECK(render_sentence(play).tgt == "그들 은 축구 를 합니다 .");
  play.object = "the violin";
  CHECK(render_sentence(play).tgt == "그들 은 바이올린 을 켭니다 .");

  const SentenceSpec eat_hon{.frame = Frame::Transitive, .subject = "the teacher", .verb = "eat", .object = "cake",
                     .det = Determiner::Definite, .negative = true};  // honorific suppletion: 먹다 -> 드시다
  CHECK(render_sentence(eat_hon).src == "the teacher does not eat the cake .");
  CHECK(render_sentence(eat_hon).tgt == "선생님 은 케이크 를 안 드십니다 .");

  SentenceSpec cat{.frame = Frame::Existence, .object = "cat", .spot = "on the bed"};
  CHECK(render_sentence(cat).src == "there is a cat on the bed .");
  CHECK(render_sentence(cat).tgt == "침대 위 에 고양이 가 있습니다 .");
  cat.negative = true;
  cat.tense = Tense::Past;
  cat.time = "yesterday";
  CHECK(render_sentence(cat).src == "there was no cat on the bed yesterday .");
  CHECK(render_sentence(cat).tgt == "어제 침대 위 에 고양이 가 없었습니다 .");

  const SentenceSpec have{.frame = Frame::Possession, .subject = "she", .object = "car", .negative = true};
  CHECK(render_sentence(have).src == "she does not have a car .");
  CHECK(render_sentence(have).tgt == "그녀 는 자동차 가 없습니다 .");

  SentenceSpec doctor{.frame = Frame::Copula, .subject = "we", .object = "doctor", .adjective = "kind",
                     .tense = Tense::Past};  // copula: past after a vowel, negation and future take 이/가
  CHECK(render_sentence(doctor).src == "we were kind doctors .");
  CHECK(render_sentence(doctor).tgt == "우리 는 친절한 의사 였습니다 .");
  doctor.subject = "i";
  doctor.adjective = "";
  doctor.object = "office worker";
  doctor.tense = Tense::Present;
  doctor.negative = true;
  CHECK(render_sentence(doctor).src == "i am not an office worker .");
  CHECK(render_sentence(doctor).tgt == "저 는 회사원 이 아닙니다 .");
  doctor.tense = Tense::Future;
  doctor.negative = false;
  doctor.object = "doctor";
  CHECK(render_sentence(doctor).src == "i will be a doctor .");
  CHECK(render_sentence(doctor).tgt == "저 는 의사 가 될 것입니다 .");

  const SentenceSpec dance{.frame = Frame::Intransitive, .subject = "the children", .verb = "dance", .place = "park",
                     .tense = Tense::Past, .negative = true};  // English intransitive, Korean "dance a dance"
  CHECK(render_sentence(dance).src == "the children did not dance in the park .");
  CHECK(render_sentence(dance).tgt == "아이들 은 공원 에서 춤 을 안 췄습니다 .");
}

TEST_CASE("render_sentence rejects what does not fit") {
  SentenceSpec s{.frame = Frame::Transitive, .subject = "i", .verb = "read", .object = "apple"};
  CHECK_THROWS_WITH_AS(render_sentence(s), doctest::Contains("no transitive verb 'read' takes the object 'apple'"),
                       std::invalid_argument);
  s.object = "book";
  s.subject = "the king";
  CHECK_THROWS_WITH_AS(render_sentence(s), doctest::Contains("unknown subject 'the king'"), std::invalid_argument);
  s.subject = "i";
  s.place = "moon";
  CHECK_THROWS_WITH_AS(render_sentence(s), doctest::Contains("unknown place 'moon'"), std::invalid_argument);
  s.place = "";
  s.time = "next week";
  s.tense = Tense::Present;
  CHECK_THROWS_WITH_AS(render_sentence(s), doctest::Contains("'next week' does not fit the present tense"),
                       std::invalid_argument);
  SentenceSpec far{.frame = Frame::Transitive, .subject = "i", .verb = "buy", .object = "bag"};
  far.adjective = "far";  // "a far bag" is not English
  CHECK_THROWS_AS(render_sentence(far), std::invalid_argument);
  const SentenceSpec missing{.frame = Frame::Motion, .subject = "i", .verb = "go"};
  CHECK_THROWS_WITH_AS(render_sentence(missing), doctest::Contains("missing destination"), std::invalid_argument);
}

TEST_CASE("corpus: sizes, distinct sentences, no train/test overlap") {
  const CorpusSplits& c = corpus();
  CHECK(c.train.size() == 21600);
  CHECK(c.valid.size() == 1200);
  CHECK(c.test.size() == 1200);
  std::set<std::string> train_src;
  for (const SentencePair& p : c.train) train_src.insert(p.src);
  std::set<std::string> all;
  for (const SentencePair& p : all_pairs(c)) all.insert(p.src);
  CHECK(all.size() == 24000);
  CHECK(all.size() >= 20000);
  for (const SentencePair& p : c.valid) CHECK_MESSAGE(!train_src.count(p.src), p.src);
  for (const SentencePair& p : c.test) CHECK_MESSAGE(!train_src.count(p.src), p.src);
}

TEST_CASE("corpus: deterministic for a seed, different across seeds, fast") {
  const auto t0 = std::chrono::steady_clock::now();
  const CorpusSplits a = make_korean_corpus(7, 24000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("generated 24000 pairs in " << seconds << " s");
  CHECK(seconds < 1.0);
  const CorpusSplits b = make_korean_corpus(7, 24000);
  REQUIRE(a.train.size() == b.train.size());
  bool same = true;
  for (size_t i = 0; i < a.train.size(); ++i) same = same && a.train[i].src == b.train[i].src && a.train[i].tgt == b.train[i].tgt;
  for (size_t i = 0; i < a.test.size(); ++i) same = same && a.test[i].src == b.test[i].src && a.test[i].tgt == b.test[i].tgt;
  CHECK(same);
  const CorpusSplits other = make_korean_corpus(8, 24000);
  CHECK(other.train[0].src + other.train[1].src != a.train[0].src + a.train[1].src);

  const CorpusSplits small = make_korean_corpus(1, 100);
  CHECK(small.train.size() == 90);
  CHECK(small.valid.size() == 5);
  CHECK(small.test.size() == 5);
  CHECK_THROWS_WITH_AS(make_korean_corpus(1, 10), doctest::Contains("total 10 is below 20"), std::invalid_argument);
}

TEST_CASE("corpus: lengths, lowercase English, valid Hangul tokens") {
  size_t bad = 0;
  for (const SentencePair& p : all_pairs(corpus())) {
    const auto en = words(p.src), ko = words(p.tgt);
    const bool lengths_ok = en.size() >= 4 && en.size() <= 14 && ko.size() >= 4 && ko.size() <= 14;
    const bool en_ok = std::all_of(p.src.begin(), p.src.end(), [](char ch) { return (ch >= 'a' && ch <= 'z') || ch == ' ' || ch == '.'; });
    bool ko_ok = utf8::is_valid(p.tgt) && ko.back() == "." && en.back() == ".";
    for (size_t i = 0; i + 1 < ko.size(); ++i) {
      const std::u32string cps = utf8::decode(ko[i]);
      ko_ok = ko_ok && std::all_of(cps.begin(), cps.end(), is_hangul_syllable);
    }
    if (!(lengths_ok && en_ok && ko_ok)) {
      if (++bad < 5) MESSAGE(p.src << " | " << p.tgt);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("corpus: every particle agrees with the word before it") {
  size_t checked = 0, bad = 0;
  for (const SentencePair& p : all_pairs(corpus())) {
    const auto ko = words(p.tgt);
    for (size_t i = 1; i < ko.size(); ++i) {
      const std::string& w = ko[i];
      const std::string& prev = ko[i - 1];
      bool ok = true;
      if (w == "은" || w == "이" || w == "을" || w == "과" || w == "이었습니다") ok = korean::has_batchim(prev);
      else if (w == "는" || w == "가" || w == "를" || w == "와" || w == "였습니다") ok = !korean::has_batchim(prev);
      else if (w == "으로") ok = korean::has_batchim(prev) && !korean::ends_in_rieul(prev);
      else if (w == "로") ok = !korean::has_batchim(prev) || korean::ends_in_rieul(prev);
      else continue;
      ++checked;
      if (!ok && ++bad < 5) MESSAGE(p.tgt);
    }
  }
  CHECK(checked > 30000);
  CHECK(bad == 0);
}

TEST_CASE("corpus: tense agrees with the time word") {
  size_t bad = 0;
  for (const SentencePair& p : all_pairs(corpus())) {
    const std::string& en = p.src;
    const bool future_en = en.find(" will ") != std::string::npos;
    const bool future_ko = p.tgt.find("것입니다") != std::string::npos;
    bool ok = future_en == future_ko;
    if (en.find("yesterday") != std::string::npos || en.find("last ") != std::string::npos) ok = ok && !future_en;
    if (en.find("tomorrow") != std::string::npos || en.find("next ") != std::string::npos) ok = ok && future_en;
    if (en.find("every ") != std::string::npos) ok = ok && !future_en && p.tgt.find("았") == std::string::npos &&
                                                          p.tgt.find("었") == std::string::npos;
    if (!ok && ++bad < 5) MESSAGE(p.src << " | " << p.tgt);
  }
  CHECK(bad == 0);
}

TEST_CASE("save_corpus writes files read_parallel_dir reads back") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gf_test_corpus_ko_" + std::to_string(::getpid()));
  const CorpusSplits c = make_korean_corpus(3, 200);
  save_corpus(c, dir);
  const ParallelText test = read_parallel_dir(dir, "test", "en", "ko");
  REQUIRE(test.pairs.size() == c.test.size());
  CHECK(test.stats.skipped_empty == 0);
  CHECK(test.pairs[0].first == words(c.test[0].src));
  CHECK(test.pairs[0].second == words(c.test[0].tgt));
  CHECK(read_parallel_dir(dir, "train", "en", "ko").pairs.size() == 180);
  CHECK(read_parallel_dir(dir, "valid", "en", "ko").pairs.size() == 10);
  std::filesystem::remove_all(dir);
}

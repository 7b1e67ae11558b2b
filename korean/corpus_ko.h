#pragma once
// A built-in English -> Korean parallel corpus, generated from a small grammar so that the
// translator has something to learn that needs attention: English SVO becomes Korean SOV, time and
// place move to the front, particles agree with the noun's final consonant, verbs are conjugated
// for tense, negation and honorifics, and one English word can need different Korean words
// ("play the piano" -> 피아노 를 칩니다, "play soccer" -> 축구 를 합니다).
//
//   "i am a student ."  ->  "저 는 학생 입니다 ."
//   "my friend read a book in the library yesterday ."  ->  "제 친구 는 어제 도서관 에서 책 을 읽었습니다 ."
//
// English is lowercase; every token (punctuation too) is separated by one space. On the Korean
// side particles (는, 을, 에서, 와 ...) and the copula (입니다) are their own tokens; a future
// verb is two ("읽을 것입니다"), as is a long negation ("읽지 않습니다").
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "korean/korean_morph.h"

namespace gf::train {

struct SentencePair {
  std::string src, tgt;  // English, Korean
};

struct CorpusSplits {
  std::vector<SentencePair> train, valid, test;
};

// `total` pairs with distinct English sentences (4..14 tokens on either side), split 90/5/5 by
// sentence, so no valid or test sentence occurs in train. The same seed gives the same corpus.
// Throws std::invalid_argument when total is too small (< 20) or more than the grammar yields.
CorpusSplits make_korean_corpus(uint64_t seed = 1, size_t total = 24000);

// Writes DIR/{train,valid,test}.{src_ext,tgt_ext}, one sentence a line (creating DIR).
void save_corpus(const CorpusSplits& corpus, const std::filesystem::path& dir, const std::string& src_ext = "en",
                 const std::string& tgt_ext = "ko");

// One sentence described by its parts, for rendering a chosen sentence exactly (tests, demos).
// Words are the lexicon's keys (see corpus_ko_lexicon.cpp): subjects by their English ("i", "my friend",
// "the dog"), nouns by their English singular ("book", "water", "my friend", "the piano"), verbs
// by their English base form ("read"), places by their noun ("library", "home"), times by their
// English ("yesterday", "every day"). Empty means "not present".
enum class Frame {
  Copula,        // i am a student .                  -> 저 는 학생 입니다 .
  Adjective,     // the dog is big .                  -> 개 는 큽니다 .
  Transitive,    // he reads a book .                 -> 그 는 책 을 읽습니다 .
  Intransitive,  // the baby slept at home .          -> 아기 는 집 에서 잤습니다 .
  Motion,        // i go to school by bus .           -> 저 는 버스 로 학교 에 갑니다 .
  Existence,     // there is a cat on the bed .       -> 침대 위 에 고양이 가 있습니다 .
  Possession,    // she has a car .                   -> 그녀 는 자동차 가 있습니다 .
};

enum class Determiner {
  Indefinite,  // a/an for a count noun, nothing for a mass or plural noun
  Definite,    // the
  This,        // this / these  (Korean 이)
  My,          // my            (Korean 제)
};

struct SentenceSpec {
  Frame frame = Frame::Transitive;
  std::string subject;         // a subject key; in the Adjective frame also a noun key (the bag is heavy)
  Determiner subject_det = Determiner::Definite;  // for a noun subject in the Adjective frame
  std::string verb;            // English base form (Transitive, Intransitive, Motion)
  std::string object;          // Transitive object, Copula role, Existence/Possession thing
  std::string object2;         // second object joined by "and" (와/과)
  Determiner det = Determiner::Indefinite;  // of the object / role / thing
  std::string adjective;       // attributive on the object, or the predicate of the Adjective frame
  bool very = false;           // Adjective frame: "very" (아주; negated: "not very" -> 별로 ...지 않습니다)
  std::string place;           // where (에서), or Motion's destination (에)
  std::string spot;            // Existence: "on the desk", "in the room" ...
  std::string time;            // "yesterday", "tomorrow", "every day" ...
  std::string companion;       // "with my mother" (와/과 함께): a person noun key
  std::string instrument;      // "with chopsticks" / "by bus" ((으)로): a tool or transport key
  korean::Tense tense = korean::Tense::Present;
  bool negative = false;
};

// Renders one sentence. Throws std::invalid_argument for unknown words, a verb that does not take
// the given object, a time word that disagrees with the tense, or a missing required part.
SentencePair render_sentence(const SentenceSpec& spec);

}  // namespace gf::train

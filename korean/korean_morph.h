#pragma once
// Korean morphology for the built-in English->Korean corpus: particles chosen by the final
// consonant (batchim) of a noun's last Hangul syllable, and the formal polite style (-ㅂ니다/-습니다)
// of verbs and adjectives in present, past and future, plain or honorific (-(으)시-), positive or
// with long negation (-지 않습니다).
//
// A Hangul syllable is U+AC00 + (lead * 21 + vowel) * 28 + tail; tail 0 means no final consonant.
// Irregular stems are recognised from built-in lists: ㅂ (덥다 -> 더워), ㄷ (듣다 -> 들어) and
// 르 (부르다 -> 불러). ㅅ and ㅎ irregulars are not handled (the corpus uses none).
#include <string>
#include <string_view>

namespace gf::train::korean {

enum class Tense { Present, Past, Future };

// True when the last syllable of `word` has a final consonant. Throws std::invalid_argument when
// `word` does not end in a Hangul syllable.
bool has_batchim(std::string_view word);
// True when that final consonant is ㄹ (which takes 로, not 으로).
bool ends_in_rieul(std::string_view word);

std::string_view topic_particle(std::string_view noun);       // 은 / 는
std::string_view subject_particle(std::string_view noun);     // 이 / 가
std::string_view object_particle(std::string_view noun);      // 을 / 를
std::string_view and_particle(std::string_view noun);         // 과 / 와
std::string_view instrument_particle(std::string_view noun);  // 으로 / 로 (also after ㄹ)

// Formal polite form of a verb or adjective given in dictionary form (ending in 다):
//   polite("가다", Present) = "갑니다", Past = "갔습니다", Future = "갈 것입니다";
//   polite("읽다", Past, /*honorific=*/true) = "읽으셨습니다".
// The future is two tokens, "<stem>(으)ㄹ 것입니다".
std::string polite(std::string_view dictionary_form, Tense tense, bool honorific = false);

// Long negation: polite_negative("먹다", Past) = "먹지 않았습니다" (two tokens); with honorific the
// -(으)시- goes on 않다: "먹지 않으셨습니다".
std::string polite_negative(std::string_view dictionary_form, Tense tense, bool honorific = false);

// Present attributive (adnominal) form of an adjective: 크다 -> 큰, 작다 -> 작은, 길다 -> 긴,
// 덥다 -> 더운, 맛있다 -> 맛있는.
std::string modifier(std::string_view adjective);

}  // namespace gf::train::korean

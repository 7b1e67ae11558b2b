#include "korean/korean_morph.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "tensor/check.h"
#include "train/data/utf8.h"

namespace gf::train::korean {
namespace {

constexpr char32_t kFirstSyllable = 0xAC00, kLastSyllable = 0xD7A3;

// Jamo indices inside a precomposed syllable (the Unicode order).
enum Vowel { A = 0, AE = 1, YA = 2, EO = 4, E = 5, YEO = 6, O = 8, WA = 9, WAE = 10, OE = 11, U = 13, WO = 14, EU = 18, I = 20 };
enum Tail { kNoTail = 0, kTailRieul = 8, kTailBieup = 17, kTailSsangSiot = 20, kTailDigeut = 7 };
constexpr int kLeadIeung = 11, kLeadHieut = 18;

struct Syllable {
  int lead, vowel, tail;
};

bool is_syllable(char32_t c) { return c >= kFirstSyllable && c <= kLastSyllable; }

Syllable split(char32_t c) {
  const int k = static_cast<int>(c - kFirstSyllable);
  return {k / (21 * 28), (k / 28) % 21, k % 28};
}

char32_t join(Syllable s) { return kFirstSyllable + static_cast<char32_t>((s.lead * 21 + s.vowel) * 28 + s.tail); }

char32_t last_syllable(std::string_view word, const char* op) {
  std::u32string cps = utf8::decode(word);
  GF_CHECK(!cps.empty() && is_syllable(cps.back()), "korean::{}: '{}' does not end in a Hangul syllable", op, word);
  return cps.back();
}

// Vowels ㅏ, ㅑ, ㅗ take the "bright" endings 아/았; all others take 어/었.
bool bright(int vowel) { return vowel == A || vowel == YA || vowel == O; }

enum class Irregular { None, B, D, Reu };

struct Stem {
  std::u32string syllables;  // the dictionary form without 다
  Irregular irregular = Irregular::None;

  Syllable last() const { return split(syllables.back()); }
  void set_last(Syllable s) { syllables.back() = join(s); }
};

bool stem_in(const std::u32string& stem, std::initializer_list<std::u32string_view> list) {
  return std::find(list.begin(), list.end(), std::u32string_view(stem)) != list.end();
}

// Which stems are irregular cannot be told from their spelling (입다 is regular, 눕다 is not), hence
// the lists of the common ㅂ and ㄷ irregulars. Stems ending in 르 are 르-irregular except a few.
Irregular irregular_class(const std::u32string& stem) {
  if (stem_in(stem, {U"덥", U"춥", U"어렵", U"쉽", U"무겁", U"가볍", U"뜨겁", U"차갑", U"돕", U"곱", U"맵",
                     U"귀엽", U"반갑", U"고맙", U"아름답", U"눕", U"줍", U"가깝", U"즐겁", U"더럽", U"시끄럽",
                     U"부드럽", U"싱겁", U"두껍", U"밉", U"새롭", U"외롭", U"괴롭", U"아깝", U"부럽", U"무섭",
                     U"어둡", U"굽"}))
    return Irregular::B;
  if (stem_in(stem, {U"듣", U"걷", U"묻", U"싣", U"깨닫", U"긷", U"붇"})) return Irregular::D;
  if (stem.size() >= 2 && stem.back() == U'르' && !stem_in(stem, {U"따르", U"치르", U"들르", U"다다르", U"우러르"}))
    return Irregular::Reu;
  return Irregular::None;
}

Stem parse_stem(std::string_view dictionary_form, const char* op) {
  std::u32string cps = utf8::decode(dictionary_form);
  const bool ok = cps.size() >= 2 && cps.back() == U'다' && std::all_of(cps.begin(), cps.end(), is_syllable);
  GF_CHECK(ok, "korean::{}: '{}' is not a Hangul dictionary form ending in 다", op, dictionary_form);
  cps.pop_back();
  Stem stem{cps, Irregular::None};
  stem.irregular = irregular_class(stem.syllables);
  return stem;
}

// Stem + -(으)시-: 가 -> 가시, 읽 -> 읽으시, 만들 -> 만드시, 덥 -> 더우시, 듣 -> 들으시. The
// result is a regular vowel stem.
Stem honorific_stem(Stem s) {
  Syllable last = s.last();
  if (s.irregular == Irregular::B) {
    last.tail = kNoTail;
    s.set_last(last);
    s.syllables += U"우시";
  } else if (s.irregular == Irregular::D) {
    last.tail = kTailRieul;
    s.set_last(last);
    s.syllables += U"으시";
  } else if (last.tail == kNoTail) {
    s.syllables += U"시";
  } else if (last.tail == kTailRieul) {  // ㄹ drops before ㅅ
    last.tail = kNoTail;
    s.set_last(last);
    s.syllables += U"시";
  } else {
    s.syllables += U"으시";
  }
  s.irregular = Irregular::None;
  return s;
}

// -(스)ㅂ니다: a vowel stem takes ㅂ as its final (가 -> 갑니다), a ㄹ stem swaps ㄹ for ㅂ
// (만들 -> 만듭니다), any other consonant stem takes 습니다 (먹습니다).
std::u32string present(Stem s) {
  Syllable last = s.last();
  if (last.tail == kNoTail || last.tail == kTailRieul) {
    last.tail = kTailBieup;
    s.set_last(last);
    return s.syllables + U"니다";
  }
  return s.syllables + U"습니다";
}

// A vowel stem fused with 아/어: 가+아 -> 가, 오+아 -> 와, 배우+어 -> 배워, 마시+어 -> 마셔,
// 쓰+어 -> 써 (ㅡ drops; the vowel before it picks 아 or 어), 되+어 -> 돼; ㅟ and ㅢ do not fuse.
std::u32string fuse_vowel(std::u32string syl) {
  Syllable last = split(syl.back());
  switch (last.vowel) {
    case A: case EO: case YEO: case AE: case E: return syl;
    case O: last.vowel = WA; break;
    case U: last.vowel = WO; break;
    case I: last.vowel = YEO; break;
    case OE: last.vowel = WAE; break;
    case EU: {
      const bool prev_bright = syl.size() >= 2 && bright(split(syl[syl.size() - 2]).vowel);
      last.vowel = prev_bright ? A : EO;
      break;
    }
    default: syl += U'어'; return syl;
  }
  syl.back() = join(last);
  return syl;
}

std::u32string append_a_eo(std::u32string syl) {
  syl += bright(split(syl.back()).vowel) ? U'아' : U'어';
  return syl;
}

// The 아/어 form (the stem the past -았/었- is built on).
std::u32string infinitive(Stem s) {
  std::u32string syl = s.syllables;
  Syllable last = s.last();
  if (last.lead == kLeadHieut && last.vowel == A && last.tail == kNoTail) {  // 하 -> 해
    last.vowel = AE;
    syl.back() = join(last);
    return syl;
  }
  switch (s.irregular) {
    case Irregular::B: {  // ㅂ becomes 우 (오 for the one-syllable 돕, 곱): 더워, 도와
      const bool o = syl.size() == 1 && last.vowel == O;
      last.tail = kNoTail;
      syl.back() = join(last);
      syl += o ? U'오' : U'우';
      return fuse_vowel(syl);
    }
    case Irregular::D:  // ㄷ becomes ㄹ before a vowel: 들어
      last.tail = kTailRieul;
      syl.back() = join(last);
      return append_a_eo(syl);
    case Irregular::Reu: {  // 르 loses its ㅡ, its ㄹ doubles: 부르 -> 불러, 빠르 -> 빨라
      syl.pop_back();
      Syllable prev = split(syl.back());
      prev.tail = kTailRieul;
      syl.back() = join(prev);
      syl += bright(prev.vowel) ? U'라' : U'러';
      return syl;
    }
    case Irregular::None: break;
  }
  return last.tail == kNoTail ? fuse_vowel(syl) : append_a_eo(syl);
}

std::u32string past(const Stem& s) {
  std::u32string syl = infinitive(s);
  Syllable last = split(syl.back());
  last.tail = kTailSsangSiot;  // 가 -> 갔, 먹어 -> 먹었
  syl.back() = join(last);
  return syl + U"습니다";
}

// Endings with a linking 으 that end in a consonant: -(으)ㄹ (future) and -(으)ㄴ (modifier).
std::u32string with_eu_tail(Stem s, int tail) {
  Syllable last = s.last();
  if (s.irregular == Irregular::B) {  // 덥 -> 더울, 더운
    last.tail = kNoTail;
    s.set_last(last);
    s.syllables += join({kLeadIeung, U, tail});
    return s.syllables;
  }
  if (s.irregular == Irregular::D) {  // 듣 -> 들을
    last.tail = kTailRieul;
    s.set_last(last);
    s.syllables += join({kLeadIeung, EU, tail});
    return s.syllables;
  }
  if (last.tail == kNoTail || last.tail == kTailRieul) {  // 가 -> 갈, 크 -> 큰; 만들 -> 만들, 길 -> 긴
    last.tail = tail;
    s.set_last(last);
    return s.syllables;
  }
  s.syllables += join({kLeadIeung, EU, tail});  // 먹을, 작은
  return s.syllables;
}

constexpr int kTailNieun = 4;

}  // namespace

bool has_batchim(std::string_view word) { return split(last_syllable(word, "has_batchim")).tail != kNoTail; }

bool ends_in_rieul(std::string_view word) { return split(last_syllable(word, "ends_in_rieul")).tail == kTailRieul; }

std::string_view topic_particle(std::string_view noun) { return has_batchim(noun) ? "은" : "는"; }
std::string_view subject_particle(std::string_view noun) { return has_batchim(noun) ? "이" : "가"; }
std::string_view object_particle(std::string_view noun) { return has_batchim(noun) ? "을" : "를"; }
std::string_view and_particle(std::string_view noun) { return has_batchim(noun) ? "과" : "와"; }
std::string_view instrument_particle(std::string_view noun) {
  return has_batchim(noun) && !ends_in_rieul(noun) ? "으로" : "로";
}

std::string polite(std::string_view dictionary_form, Tense tense, bool honorific) {
  Stem stem = parse_stem(dictionary_form, "polite");
  if (honorific) stem = honorific_stem(stem);
  switch (tense) {
    case Tense::Present: return utf8::encode(present(stem));
    case Tense::Past: return utf8::encode(past(stem));
    case Tense::Future: return utf8::encode(with_eu_tail(stem, kTailRieul)) + " 것입니다";
  }
  GF_FAIL("korean::polite: bad tense {}", static_cast<int>(tense));
}

std::string polite_negative(std::string_view dictionary_form, Tense tense, bool honorific) {
  const Stem stem = parse_stem(dictionary_form, "polite_negative");
  return utf8::encode(stem.syllables) + "지 " + polite("않다", tense, honorific);
}

std::string modifier(std::string_view adjective) {
  const Stem stem = parse_stem(adjective, "modifier");
  const char32_t last = stem.syllables.back();
  if (last == U'있' || last == U'없') return utf8::encode(stem.syllables) + "는";  // 맛있는
  return utf8::encode(with_eu_tail(stem, kTailNieun));
}

}  // namespace gf::train::korean

#include "korean/corpus_ko.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "korean/corpus_ko_lexicon.h"

namespace gf::train {
namespace {

using korean::Tense;
using namespace ko_lexicon;

// ---------------------------------------------------------------------------------------------
// Key lookup.

template <class T, class KeyOf>
std::unordered_map<std::string, const T*> index_by(const std::vector<T>& table, KeyOf key_of, const char* what) {
  std::unordered_map<std::string, const T*> index;
  for (const T& entry : table)
    GF_CHECK_AS(std::logic_error, index.emplace(key_of(entry), &entry).second, "korean corpus: duplicate {} '{}'", what,
                key_of(entry));
  return index;
}

struct Lexicon {
  std::unordered_map<std::string, const Noun*> nouns;
  std::unordered_map<std::string, const Adjective*> adjectives;
  std::unordered_map<std::string, const Subject*> subjects;
  std::unordered_map<std::string, const Place*> places;
  std::unordered_map<std::string, const Spot*> spots;
  std::unordered_map<std::string, const Time*> times;
  std::unordered_map<std::string, const Instrument*> instruments;

  Lexicon() {
    nouns = index_by(kNouns, [](const Noun& n) { return std::string(n.key); }, "noun");
    adjectives = index_by(kAdjectives, [](const Adjective& a) { return std::string(a.key); }, "adjective");
    subjects = index_by(kSubjects, [](const Subject& s) { return std::string(s.en); }, "subject");
    places = index_by(kPlaces, [](const Place& p) { return std::string(p.key); }, "place");
    spots = index_by(kSpots, [](const Spot& s) { return std::string(s.en); }, "spot");
    times = index_by(kTimes, [](const Time& t) { return std::string(t.en); }, "time");
    instruments = index_by(kInstruments, [](const Instrument& i) { return std::string(i.key); }, "instrument");
    check_references();
  }

  template <class T>
  const T* find(const std::unordered_map<std::string, const T*>& index, const std::string& key, const char* what) const {
    auto it = index.find(key);
    GF_CHECK(it != index.end(), "render_sentence: unknown {} '{}'", what, key);
    return it->second;
  }

  // A typo in a table would otherwise surface as a failure deep inside generation.
  void check_references() const {
    auto all = [&](const auto& keys, const auto& index, const char* what) {
      for (const char* k : keys) find(index, k, what);
    };
    for (const Noun& n : kNouns) all(n.adjectives, adjectives, "adjective");
    for (const Verb& v : kVerbs) {
      all(v.objects, nouns, "noun");
      all(v.places, places, "place");
      all(v.instruments, instruments, "instrument");
    }
    all(kCopulaSubjects, subjects, "subject");
    all(kRoles, nouns, "noun");
    all(kCopulaTimes, times, "time");
    all(kHumanAdjectives, adjectives, "adjective");
    all(kBabyAdjectives, adjectives, "adjective");
    all(kAnimalAdjectives, adjectives, "adjective");
    all(kThingsHere, nouns, "noun");
    all(kAnimalsHere, nouns, "noun");
    all(kPossessions, nouns, "noun");
    for (const Spot& s : kSpots)
      if (s.container) find(nouns, s.container, "noun");
  }
};

const Lexicon& lexicon() {
  static const Lexicon lex;
  return lex;
}

bool contains(const std::vector<const char*>& keys, std::string_view key) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
}

// ---------------------------------------------------------------------------------------------
// Rendering.

// A sentence built word by word (a "word" may hold several space-separated tokens).
struct Words {
  std::string text;
  void add(std::string_view w) {
    if (w.empty()) return;
    if (!text.empty()) text += ' ';
    text += w;
  }
};

// A sentence with its words resolved to lexicon entries.
struct Clause {
  Frame frame = Frame::Transitive;
  const Subject* subject = nullptr;
  const Noun* subject_noun = nullptr;  // Adjective frame: "the bag is heavy"
  Determiner subject_det = Determiner::Definite;
  const Verb* verb = nullptr;
  const Noun* object = nullptr;
  const Noun* object2 = nullptr;
  Determiner det = Determiner::Indefinite;
  const Adjective* adjective = nullptr;
  bool very = false;
  const Place* place = nullptr;
  const Spot* spot = nullptr;
  const Time* time = nullptr;
  const Noun* companion = nullptr;
  const Instrument* instrument = nullptr;
  Tense tense = Tense::Present;
  bool negative = false;
};

std::string en_plural(const Noun& n) { return n.plural ? n.plural : std::string(n.key) + "s"; }

bool plural_noun(const Noun& n) { return n.kind == NounKind::PluralOnly; }

// "an" before a vowel sound. The lexicon has no "university" or "hour", so the first letter decides.
const char* indefinite_article(std::string_view next_word) {
  return std::string_view("aeiou").find(next_word.front()) != std::string_view::npos ? "an" : "a";
}

// "a big dog", "the water", "these shoes", "my bag", "korean"; plural_form for "i like apples" and
// "we are students".
std::string en_noun_phrase(const Noun& n, Determiner det, const Adjective* adj, bool plural_form = false) {
  if (n.kind == NounKind::Fixed) return n.key;
  const bool plural = plural_form || plural_noun(n);
  std::string words = adj ? std::string(adj->en) + " " : std::string();
  words += plural_form && n.kind == NounKind::Count ? en_plural(n) : std::string(n.key);
  switch (det) {
    case Determiner::Indefinite:
      if (n.kind == NounKind::Count && !plural) return std::string(indefinite_article(words)) + " " + words;
      return words;
    case Determiner::Definite: return "the " + words;
    case Determiner::This: return (plural ? "these " : "this ") + words;
    case Determiner::My: return "my " + words;
  }
  return words;
}

// Korean drops articles; this/my become 이/제, an adjective becomes its modifier form (큰 개).
std::string ko_noun_phrase(const Noun& n, Determiner det, const Adjective* adj) {
  Words w;
  if (n.kind != NounKind::Fixed) {
    if (det == Determiner::This) w.add("이");
    if (det == Determiner::My) w.add("제");
  }
  if (adj) w.add(korean::modifier(adj->ko));
  w.add(n.ko);
  return w.text;
}

bool third_singular(const Subject& s) { return s.person == 3 && !s.plural; }

// English "be" for a subject: am / is / are / was / were / will be, with "not" when negative.
std::string en_be(bool first_singular, bool third_sg, Tense tense, bool negative) {
  std::string be;
  switch (tense) {
    case Tense::Present: be = first_singular ? "am" : third_sg ? "is" : "are"; break;
    case Tense::Past: be = first_singular || third_sg ? "was" : "were"; break;
    case Tense::Future: return negative ? "will not be" : "will be";
  }
  return negative ? be + " not" : be;
}

// reads / does not read / read / did not read / will read / will not read (+ "to" / "for").
std::string en_verb(const Verb& v, bool third_sg, Tense tense, bool negative) {
  std::string out;
  switch (tense) {
    case Tense::Present:
      out = negative ? std::string(third_sg ? "does not " : "do not ") + v.base : (third_sg ? v.third : v.base);
      break;
    case Tense::Past: out = negative ? std::string("did not ") + v.base : v.past; break;
    case Tense::Future: out = std::string(negative ? "will not " : "will ") + v.base; break;
  }
  if (v.prep) out += std::string(" ") + v.prep;
  return out;
}

// The Korean predicate of a verb for this subject: honorific -(으)시- (or the honorific verb, 드시다),
// and negation as 안 + verb or -지 않다.
std::string ko_verb(const Verb& v, const Subject& s, Tense tense, bool negative) {
  const bool suppletive = s.honorific && v.ko_honorific;
  const char* dict = suppletive ? v.ko_honorific : v.ko;
  const bool honorific = s.honorific && !suppletive;
  if (!negative) return korean::polite(dict, tense, honorific);
  if (v.long_negation) return korean::polite_negative(dict, tense, honorific);
  return "안 " + korean::polite(dict, tense, honorific);
}

void add_time(Words& en, const Clause& c) {
  if (c.time) en.add(c.time->en);
}

// 제 친구 는 [어제]: the topic (the subject) with 은/는, then when.
void ko_topic_time(Words& ko, const std::string& topic, const Clause& c) {
  ko.add(topic);
  ko.add(korean::topic_particle(topic));
  if (c.time) ko.add(c.time->ko);
}

// 제 친구 는 [어제] [제 어머니 와 함께]: the topic, then when, then with whom.
void ko_topic_time_companion(Words& ko, const Clause& c) {
  ko_topic_time(ko, c.subject->ko, c);
  if (c.companion) {
    ko.add(c.companion->ko);
    ko.add(korean::and_particle(c.companion->ko));
    ko.add("함께");
  }
}

void ko_instrument(Words& ko, const Instrument* ins) {
  if (!ins) return;
  ko.add(ins->ko);
  if (ins->particle) ko.add(korean::instrument_particle(ins->ko));
}

// A verb frame's English start: the subject and its conjugated verb.
void en_subject_verb(Words& en, const Clause& c) {
  en.add(c.subject->en);
  en.add(en_verb(*c.verb, third_singular(*c.subject), c.tense, c.negative));
}

// English "with COMPANION", "at PLACE" and the time, each where the clause has it.
void en_companion_place_time(Words& en, const Clause& c) {
  if (c.companion) en.add(std::string("with ") + c.companion->key);
  if (c.place) en.add(c.place->at);
  add_time(en, c);
}

// Korean "PLACE 에서" (where it happens), where the clause has a place.
void ko_place(Words& ko, const Clause& c) {
  if (!c.place) return;
  ko.add(c.place->ko);
  ko.add("에서");
}

// Every sentence ends with a full stop on either side, a token of its own.
SentencePair full_stops(Words& en, Words& ko) {
  en.add(".");
  ko.add(".");
  return {en.text, ko.text};
}

// A verb frame's end: the Korean verb last (SOV), then the full stops.
SentencePair end_with_verb(Words& en, Words& ko, const Clause& c) {
  ko.add(ko_verb(*c.verb, *c.subject, c.tense, c.negative));
  return full_stops(en, ko);
}

SentencePair render_copula(const Clause& c) {
  const Subject& s = *c.subject;
  Words en, ko;
  en.add(s.en);
  en.add(en_be(s.person == 1 && !s.plural, third_singular(s), c.tense, c.negative));
  en.add(en_noun_phrase(*c.object, Determiner::Indefinite, c.adjective, s.plural));
  add_time(en, c);

  ko_topic_time(ko, s.ko, c);
  const std::string role = ko_noun_phrase(*c.object, Determiner::Indefinite, c.adjective);
  ko.add(role);
  const bool hon = s.honorific;
  if (c.tense == Tense::Future) {  // "will be" is 되다, whose complement takes 이/가
    ko.add(korean::subject_particle(role));
    ko.add(c.negative ? korean::polite_negative("되다", Tense::Future, hon) : korean::polite("되다", Tense::Future, hon));
  } else if (c.negative) {  // N 이/가 아닙니다
    ko.add(korean::subject_particle(role));
    if (c.tense == Tense::Present) ko.add(hon ? "아니십니다" : "아닙니다");
    else ko.add(hon ? "아니셨습니다" : "아니었습니다");
  } else if (c.tense == Tense::Present) {
    ko.add(hon ? "이십니다" : "입니다");
  } else {
    ko.add(hon ? "이셨습니다" : korean::has_batchim(role) ? "이었습니다" : "였습니다");
  }
  return full_stops(en, ko);
}

SentencePair render_adjective(const Clause& c) {
  Words en, ko;
  bool first_sg = false, third_sg = true, honorific = false;
  std::string subject_ko;
  if (c.subject) {
    en.add(c.subject->en);
    first_sg = c.subject->person == 1 && !c.subject->plural;
    third_sg = third_singular(*c.subject);
    honorific = c.subject->honorific;
    subject_ko = c.subject->ko;
  } else {
    en.add(en_noun_phrase(*c.subject_noun, c.subject_det, nullptr));
    third_sg = !plural_noun(*c.subject_noun);
    subject_ko = ko_noun_phrase(*c.subject_noun, c.subject_det, nullptr);
  }
  en.add(en_be(first_sg, third_sg, c.tense, c.negative));
  if (c.very) en.add("very");
  en.add(c.adjective->en);
  add_time(en, c);

  ko_topic_time(ko, subject_ko, c);
  if (c.adjective->ko_prefix) ko.add(c.adjective->ko_prefix);
  if (c.very) ko.add(c.negative ? "별로" : "아주");  // "not very big" is 별로 크지 않습니다
  ko.add(c.negative ? korean::polite_negative(c.adjective->ko, c.tense, honorific)
                    : korean::polite(c.adjective->ko, c.tense, honorific));
  return full_stops(en, ko);
}

SentencePair render_transitive(const Clause& c) {
  const Verb& v = *c.verb;
  Words en, ko;
  en_subject_verb(en, c);
  en.add(en_noun_phrase(*c.object, c.det, c.adjective, v.stative));
  if (c.object2) {
    en.add("and");
    en.add(en_noun_phrase(*c.object2, c.det, nullptr, v.stative));
  }
  if (c.instrument) en.add(c.instrument->en);
  en_companion_place_time(en, c);

  ko_topic_time_companion(ko, c);
  ko_place(ko, c);
  ko_instrument(ko, c.instrument);
  std::string object = ko_noun_phrase(*c.object, c.det, c.adjective);
  if (c.object2) {
    object += " " + std::string(korean::and_particle(object)) + " " + ko_noun_phrase(*c.object2, c.det, nullptr);
  }
  ko.add(object);
  ko.add(v.dative ? std::string_view("에게") : korean::object_particle(object));
  return end_with_verb(en, ko, c);
}

SentencePair render_intransitive(const Clause& c) {
  const Verb& v = *c.verb;
  Words en, ko;
  en_subject_verb(en, c);
  en_companion_place_time(en, c);

  ko_topic_time_companion(ko, c);
  ko_place(ko, c);
  if (v.ko_object) {
    ko.add(v.ko_object);
    ko.add(korean::object_particle(v.ko_object));
  }
  return end_with_verb(en, ko, c);
}

SentencePair render_motion(const Clause& c) {
  Words en, ko;
  en_subject_verb(en, c);
  en.add(c.place->to);
  if (c.instrument) en.add(c.instrument->en);
  if (c.companion) en.add(std::string("with ") + c.companion->key);
  add_time(en, c);

  ko_topic_time_companion(ko, c);
  ko_instrument(ko, c.instrument);
  ko.add(c.place->ko);
  ko.add("에");
  return end_with_verb(en, ko, c);
}

SentencePair render_existence(const Clause& c) {
  Words en, ko;
  en.add("there");
  switch (c.tense) {
    case Tense::Present: en.add("is"); break;
    case Tense::Past: en.add("was"); break;
    case Tense::Future: en.add("will be"); break;
  }
  if (c.negative) {  // "there is no big dog"
    en.add("no");
    if (c.adjective) en.add(c.adjective->en);
    en.add(c.object->key);
  } else {
    en.add(en_noun_phrase(*c.object, Determiner::Indefinite, c.adjective));
  }
  en.add(c.spot->en);
  add_time(en, c);

  if (c.time) ko.add(c.time->ko);
  ko.add(c.spot->ko);
  ko.add("에");
  const std::string thing = ko_noun_phrase(*c.object, Determiner::Indefinite, c.adjective);
  ko.add(thing);
  ko.add(korean::subject_particle(thing));
  ko.add(korean::polite(c.negative ? "없다" : "있다", c.tense));
  return full_stops(en, ko);
}

SentencePair render_possession(const Clause& c) {
  const Subject& s = *c.subject;
  const bool third_sg = third_singular(s);
  Words en, ko;
  en.add(s.en);
  switch (c.tense) {
    case Tense::Present: en.add(c.negative ? (third_sg ? "does not have" : "do not have") : (third_sg ? "has" : "have")); break;
    case Tense::Past: en.add(c.negative ? "did not have" : "had"); break;
    case Tense::Future: en.add(c.negative ? "will not have" : "will have"); break;
  }
  en.add(en_noun_phrase(*c.object, Determiner::Indefinite, c.adjective));
  add_time(en, c);

  ko_topic_time(ko, s.ko, c);
  const std::string thing = ko_noun_phrase(*c.object, Determiner::Indefinite, c.adjective);
  ko.add(thing);
  ko.add(korean::subject_particle(thing));  // Korean "has" is "to me, X exists": X 이/가 있습니다
  ko.add(korean::polite(c.negative ? "없다" : "있다", c.tense, s.honorific));
  return full_stops(en, ko);
}

SentencePair render(const Clause& c) {
  switch (c.frame) {
    case Frame::Copula: return render_copula(c);
    case Frame::Adjective: return render_adjective(c);
    case Frame::Transitive: return render_transitive(c);
    case Frame::Intransitive: return render_intransitive(c);
    case Frame::Motion: return render_motion(c);
    case Frame::Existence: return render_existence(c);
    case Frame::Possession: return render_possession(c);
  }
  GF_FAIL("render_sentence: bad frame {}", static_cast<int>(c.frame));
}

// ---------------------------------------------------------------------------------------------
// SentenceSpec -> Clause, checking that the parts fit together.

const Verb* find_verb(Frame frame, const std::string& base, const std::string& object, const std::string& object2) {
  for (const Verb& v : kVerbs) {
    if (v.frame != frame || base != v.base) continue;
    if (frame != Frame::Transitive) return &v;
    if (contains(v.objects, object) && (object2.empty() || contains(v.objects, object2))) return &v;
  }
  if (frame == Frame::Transitive)
    GF_FAIL("render_sentence: no transitive verb '{}' takes the object '{}'{}", base, object,
            object2.empty() ? std::string() : fmt::format(" and '{}'", object2));
  GF_FAIL("render_sentence: no {} verb '{}'", frame == Frame::Motion ? "motion" : "intransitive", base);
}

Clause resolve(const SentenceSpec& spec) {
  const Lexicon& lex = lexicon();
  Clause c;
  c.frame = spec.frame;
  c.tense = spec.tense;
  c.negative = spec.negative;
  c.very = spec.very;
  c.det = spec.det;
  c.subject_det = spec.subject_det;
  const bool needs_subject = spec.frame != Frame::Existence;
  if (needs_subject) {
    GF_CHECK(!spec.subject.empty(), "render_sentence: missing subject");
    auto it = lex.subjects.find(spec.subject);
    if (it != lex.subjects.end()) c.subject = it->second;
    else if (spec.frame == Frame::Adjective) c.subject_noun = lex.find(lex.nouns, spec.subject, "subject");
    else GF_FAIL("render_sentence: unknown subject '{}'", spec.subject);
  }
  const bool verb_frame = spec.frame == Frame::Transitive || spec.frame == Frame::Intransitive ||
                          spec.frame == Frame::Motion;
  if (verb_frame) {
    GF_CHECK(!spec.verb.empty(), "render_sentence: missing verb");
    c.verb = find_verb(spec.frame, spec.verb, spec.object, spec.object2);
  }
  const bool needs_object = spec.frame == Frame::Transitive || spec.frame == Frame::Copula ||
                            spec.frame == Frame::Existence || spec.frame == Frame::Possession;
  GF_CHECK(!needs_object || !spec.object.empty(), "render_sentence: missing object");
  if (!spec.object.empty()) c.object = lex.find(lex.nouns, spec.object, "noun");
  if (!spec.object2.empty()) c.object2 = lex.find(lex.nouns, spec.object2, "noun");
  if (!spec.adjective.empty()) c.adjective = lex.find(lex.adjectives, spec.adjective, "adjective");
  GF_CHECK(spec.frame != Frame::Adjective || c.adjective, "render_sentence: missing adjective");
  GF_CHECK(!c.adjective || spec.frame == Frame::Adjective || c.adjective->attributive,
           "render_sentence: '{}' cannot stand before a noun", spec.adjective);
  if (!spec.place.empty()) c.place = lex.find(lex.places, spec.place, "place");
  GF_CHECK(spec.frame != Frame::Motion || c.place, "render_sentence: missing destination (place)");
  if (!spec.spot.empty()) c.spot = lex.find(lex.spots, spec.spot, "spot");
  GF_CHECK(spec.frame != Frame::Existence || c.spot, "render_sentence: missing spot");
  if (!spec.companion.empty()) c.companion = lex.find(lex.nouns, spec.companion, "companion");
  if (!spec.instrument.empty()) c.instrument = lex.find(lex.instruments, spec.instrument, "instrument");
  if (!spec.time.empty()) {
    c.time = lex.find(lex.times, spec.time, "time");
    GF_CHECK(c.time->tenses & tense_bit(spec.tense), "render_sentence: the time '{}' does not fit the {} tense", spec.time,
             spec.tense == Tense::Present ? "present" : spec.tense == Tense::Past ? "past" : "future");
  }
  const bool extras = spec.tense == Tense::Future || c.place || c.time || c.companion || c.instrument;
  GF_CHECK(!(c.verb && c.verb->stative && extras), "render_sentence: '{}' takes no future, place, time, companion or instrument",
           spec.verb);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Random sentences.

// Draws from std::mt19937_64, whose output sequence the standard fixes; the bounded draws are done
// here (not by std::uniform_int_distribution, which differs between libraries) so a seed gives the
// same corpus everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  size_t below(size_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = gen_();
    while (x >= limit);
    return static_cast<size_t>(x % n);
  }
  bool chance(double p) { return static_cast<double>(gen_() >> 11) * 0x1.0p-53 < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

 private:
  std::mt19937_64 gen_;
};

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed), lex_(lexicon()) {
    for (const Verb& v : kVerbs) {
      if (v.frame == Frame::Transitive) transitive_.push_back(&v);
      if (v.frame == Frame::Intransitive) intransitive_.push_back(&v);
      if (v.frame == Frame::Motion) motion_.push_back(&v);
    }
    for (const Noun& n : kNouns)
      if (!n.adjectives.empty()) described_nouns_.push_back(&n);
  }

  // One random clause; false when this draw does not make a usable sentence (the caller draws again).
  bool draw(Clause& c) {
    c = Clause{};
    const size_t r = rng_.below(100);
    if (r < 40) return transitive(c);
    if (r < 52) return intransitive(c);
    if (r < 66) return motion(c);
    if (r < 74) return copula(c);
    if (r < 87) return adjective(c);
    if (r < 94) return existence(c);
    return possession(c);
  }

 private:
  const Noun* noun(const char* key) { return lex_.nouns.at(key); }
  const Subject* subject(const char* key) { return lex_.subjects.at(key); }

  const Subject* subject_of_class(unsigned classes) {
    for (;;) {
      const Subject& s = rng_.pick(kSubjects);
      if (s.cls & classes) return &s;
    }
  }

  enum class Times { Any, NotHabitual, WholeDays };

  // A time word with a tense it allows (or any tense without one).
  void time_and_tense(Clause& c, double p_time, unsigned tenses = kAnyTense, Times which = Times::Any) {
    c.time = nullptr;
    if (rng_.chance(p_time)) {
      const Time& t = rng_.pick(kTimes);
      const bool fits = which == Times::Any || (which == Times::NotHabitual ? !t.habitual : t.whole_day);
      if ((t.tenses & tenses) && fits) c.time = &t;
    }
    const unsigned allowed = c.time ? (c.time->tenses & tenses) : tenses;
    for (;;) {
      const Tense t = static_cast<Tense>(rng_.below(3));
      if (allowed & tense_bit(t)) {
        c.tense = t;
        break;
      }
    }
  }

  void negation(Clause& c, double p) { c.negative = !(c.time && c.time->habitual) && rng_.chance(p); }

  Determiner object_determiner(const Noun& n) {
    if (n.kind == NounKind::Count) return rng_.chance(0.6) ? Determiner::Indefinite : Determiner::Definite;
    return rng_.chance(0.7) ? Determiner::Indefinite : Determiner::Definite;
  }

  const Adjective* attributive(const Noun& n, double p) {
    if (n.adjectives.empty() || !rng_.chance(p)) return nullptr;
    const Adjective* a = lex_.adjectives.at(rng_.pick(n.adjectives));
    return a->attributive ? a : nullptr;
  }

  const Noun* companion_for(const Subject& s, double p) {
    if (!rng_.chance(p)) return nullptr;
    static const std::vector<const char*> kCompanions = {"my friend", "my friends", "my brother", "my sister",
                                                         "my mother", "my father",  "my teacher"};
    const char* k = rng_.pick(kCompanions);
    return std::string_view(k) == s.en ? nullptr : noun(k);
  }

  bool transitive(Clause& c) {
    c.frame = Frame::Transitive;
    c.verb = rng_.pick(transitive_);
    const Verb& v = *c.verb;
    c.subject = subject_of_class(v.subjects);
    c.object = noun(rng_.pick(v.objects));
    if (c.object->key == std::string_view(c.subject->en)) return false;  // "my friend met my friend"
    if (v.stative) {
      c.det = Determiner::Indefinite;
      c.tense = rng_.chance(0.5) ? Tense::Present : Tense::Past;
      c.negative = rng_.chance(0.25);
      return true;
    }
    c.det = object_determiner(*c.object);
    if (v.coordination && rng_.chance(0.15)) {
      c.object2 = noun(rng_.pick(v.objects));
      if (c.object2 == c.object) return false;
    } else {
      c.adjective = attributive(*c.object, 0.25);
    }
    if (!v.places.empty() && rng_.chance(0.55)) c.place = lex_.places.at(rng_.pick(v.places));
    if (!v.instruments.empty() && rng_.chance(0.25)) c.instrument = lex_.instruments.at(rng_.pick(v.instruments));
    if (!c.instrument && v.companion && c.subject->cls == kHuman) c.companion = companion_for(*c.subject, 0.12);
    if (c.companion == c.object || c.companion == c.object2) c.companion = nullptr;  // "meet my friend with my friend"
    time_and_tense(c, 0.6);
    negation(c, 0.25);
    // "i read a book" reads as past: keep present "read" only with a habitual time word.
    if (c.tense == Tense::Present && !third_singular(*c.subject) && std::string_view(v.base) == v.past &&
        !(c.time && c.time->habitual))
      return false;
    return true;
  }

  bool intransitive(Clause& c) {
    c.frame = Frame::Intransitive;
    c.verb = rng_.pick(intransitive_);
    c.subject = subject_of_class(c.verb->subjects);
    if (!c.verb->places.empty() && rng_.chance(0.65)) c.place = lex_.places.at(rng_.pick(c.verb->places));
    if (c.subject->cls == kHuman) c.companion = companion_for(*c.subject, 0.15);
    time_and_tense(c, 0.65);
    negation(c, 0.25);
    return true;
  }

  bool motion(Clause& c) {
    c.frame = Frame::Motion;
    c.verb = rng_.pick(motion_);
    c.subject = subject_of_class(kHuman);
    c.place = lex_.places.at(rng_.pick(c.verb->places));
    if (!c.verb->instruments.empty() && rng_.chance(0.35)) {
      const Instrument* ins = lex_.instruments.at(rng_.pick(c.verb->instruments));
      if (!(ins->far_only && !c.place->far) && !(ins->near_only && c.place->far)) c.instrument = ins;
    }
    c.companion = companion_for(*c.subject, 0.15);
    time_and_tense(c, 0.6);
    negation(c, 0.25);
    return true;
  }

  bool copula(Clause& c) {
    c.frame = Frame::Copula;
    c.subject = subject(rng_.pick(kCopulaSubjects));
    c.object = noun(rng_.pick(kRoles));
    c.adjective = attributive(*c.object, 0.3);
    if (rng_.chance(0.15)) c.time = lex_.times.at(rng_.pick(kCopulaTimes));
    time_and_tense(c, 0.0);
    if (c.time) c.tense = c.time->tenses & kPast ? Tense::Past : Tense::Future;
    negation(c, 0.25);
    return true;
  }

  bool adjective(Clause& c) {
    c.frame = Frame::Adjective;
    bool timed = true;
    if (rng_.chance(0.45)) {
      c.subject = &rng_.pick(kSubjects);
      const auto& adjs = c.subject->cls == kHuman  ? kHumanAdjectives
                         : c.subject->cls == kBaby ? kBabyAdjectives
                                                   : kAnimalAdjectives;
      c.adjective = lex_.adjectives.at(rng_.pick(adjs));
    } else {
      c.subject_noun = rng_.pick(described_nouns_);
      const Noun& n = *c.subject_noun;
      const size_t d = rng_.below(n.possessable ? 3 : 2);
      c.subject_det = d == 0 ? Determiner::Definite : d == 1 ? Determiner::This : Determiner::My;
      c.adjective = lex_.adjectives.at(rng_.pick(n.adjectives));
      timed = std::string_view(n.key) == "the weather";  // "the bag was heavy yesterday" is odd
    }
    c.very = rng_.chance(0.25);
    time_and_tense(c, timed ? 0.45 : 0.0, timed ? kAnyTense : (kPresent | kPast));
    negation(c, 0.25);
    return true;
  }

  bool existence(Clause& c) {
    c.frame = Frame::Existence;
    const bool animal = rng_.chance(0.35);
    c.object = noun(rng_.pick(animal ? kAnimalsHere : kThingsHere));
    c.spot = &rng_.pick(kSpots);
    if (!(animal ? c.spot->animals : c.spot->things)) return false;
    if (c.spot->container && c.object->key == std::string_view(c.spot->container)) return false;
    c.adjective = attributive(*c.object, 0.25);
    time_and_tense(c, 0.4, kAnyTense, Times::NotHabitual);
    negation(c, 0.3);
    return true;
  }

  bool possession(Clause& c) {
    c.frame = Frame::Possession;
    c.subject = subject_of_class(kHuman);
    c.object = noun(rng_.pick(kPossessions));
    c.adjective = attributive(*c.object, 0.2);
    time_and_tense(c, 0.35, kAnyTense, Times::WholeDays);
    negation(c, 0.3);
    return true;
  }

  Rng rng_;
  const Lexicon& lex_;
  std::vector<const Verb*> transitive_, intransitive_, motion_;
  std::vector<const Noun*> described_nouns_;
};

size_t count_tokens(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), ' ')) + 1; }

// Through the atomic writer (tensor/io/atomic_file.h): a temporary file of its own (O_EXCL, never
// a link someone put at a predictable name), fsync'ed, renamed over the file, the folder fsync'ed.
void write_lines_atomically(const std::filesystem::path& file, const std::vector<SentencePair>& pairs, bool source) {
  write_file_atomic_with(file.string(), [&](const ByteSink& sink) {
    for (const SentencePair& p : pairs) {
      const std::string& line = source ? p.src : p.tgt;
      sink(line.data(), line.size());
      sink("\n", 1);
    }
  });
}

}  // namespace

SentencePair render_sentence(const SentenceSpec& spec) { return render(resolve(spec)); }

CorpusSplits make_korean_corpus(uint64_t seed, size_t total) {
  GF_CHECK(total >= 20, "make_korean_corpus: total {} is below 20", total);
  constexpr size_t kMinTokens = 4, kMaxTokens = 14;
  Generator gen(seed);
  std::vector<SentencePair> pairs;
  pairs.reserve(total);
  std::unordered_set<std::string> seen;
  seen.reserve(total * 2);
  size_t misses = 0;  // consecutive draws that added nothing
  Clause c;
  while (pairs.size() < total) {
    GF_CHECK(misses <= 200000, "make_korean_corpus: the grammar gave only {} distinct sentences; asked for {}", pairs.size(),
             total);
    ++misses;
    if (!gen.draw(c)) continue;
    SentencePair p = render(c);
    const size_t ns = count_tokens(p.src), nt = count_tokens(p.tgt);
    if (ns < kMinTokens || ns > kMaxTokens || nt < kMinTokens || nt > kMaxTokens) continue;
    if (!seen.insert(p.src).second) continue;
    pairs.push_back(std::move(p));
    misses = 0;
  }
  // The draws are already in random order, so consecutive slices are random splits; every English
  // sentence is distinct, so no valid or test sentence is in train.
  const size_t held_out = (total * 5 + 50) / 100;
  CorpusSplits out;
  const auto begin = pairs.begin();
  out.train.assign(begin, begin + static_cast<ptrdiff_t>(total - 2 * held_out));
  out.valid.assign(begin + static_cast<ptrdiff_t>(total - 2 * held_out), begin + static_cast<ptrdiff_t>(total - held_out));
  out.test.assign(begin + static_cast<ptrdiff_t>(total - held_out), pairs.end());
  return out;
}

void save_corpus(const CorpusSplits& corpus, const std::filesystem::path& dir, const std::string& src_ext,
                 const std::string& tgt_ext) {
  std::filesystem::create_directories(dir);
  const std::pair<const char*, const std::vector<SentencePair>*> splits[] = {
      {"train", &corpus.train}, {"valid", &corpus.valid}, {"test", &corpus.test}};
  for (const auto& [name, pairs] : splits) {
    write_lines_atomically(dir / fmt::format("{}.{}", name, src_ext), *pairs, true);
    write_lines_atomically(dir / fmt::format("{}.{}", name, tgt_ext), *pairs, false);
  }
}

}  // namespace gf::train

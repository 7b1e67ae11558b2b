#pragma once
// The word lists and word tables behind the built-in English -> Korean corpus (corpus_ko.h):
// nouns, adjectives, subjects, places, times, tools and verbs with the objects and places that
// make sense for them. Entries refer to each other by their English key; corpus_ko.cpp checks
// every reference once, when the lexicon is first used.
#include <vector>

#include "korean/corpus_ko.h"

namespace gf::train::ko_lexicon {

using korean::Tense;

enum class NounKind {
  Count,       // a book / the book / books
  Mass,        // water / the water
  PluralOnly,  // shoes / the shoes (agrees as a plural)
  Fixed,       // used exactly as written: "korean", "my friend", "the piano", "the weather"
};

struct Noun {
  const char* key;     // English singular (PluralOnly: the plural; Fixed: the whole phrase)
  const char* ko;      // Korean, possibly several tokens ("제 친구")
  NounKind kind = NounKind::Count;
  std::vector<const char*> adjectives = {};  // adjective keys that describe it
  const char* plural = nullptr;              // English plural when not key + "s"
  bool possessable = false;                  // "my bag is heavy" reads naturally
};

extern const std::vector<Noun> kNouns;

struct Adjective {
  const char* key;
  const char* en;
  const char* ko;                  // dictionary form
  bool attributive = true;         // "a big dog"; false: only "the school is far"
  const char* ko_prefix = nullptr;  // words before it: hungry = 배 가 고프다 ("the stomach is empty")
};

extern const std::vector<Adjective> kAdjectives;

enum SubjectClass : unsigned { kHuman = 1, kBaby = 2, kAnimal = 4 };

struct Subject {
  const char* en;
  const char* ko;
  int person;  // 1, 2, 3
  bool plural = false;
  unsigned cls = kHuman;
  bool honorific = false;  // the verb takes -(으)시- (my mother, the teacher)
};

extern const std::vector<Subject> kSubjects;

struct Place {
  const char* key;
  const char* ko;
  const char* at;  // English where an action happens
  const char* to;  // English destination
  bool far = false;  // too far to walk or cycle; the only places one flies to
};

extern const std::vector<Place> kPlaces;

// Where something is, for "there is a cat on the bed" -> 침대 위 에 고양이 가 있습니다.
struct Spot {
  const char* en;
  const char* ko;  // before 에
  bool things, animals;
  const char* container = nullptr;  // the noun that cannot be inside itself
};

extern const std::vector<Spot> kSpots;

constexpr unsigned kPresent = 1, kPast = 2, kFuture = 4, kAnyTense = 7;
inline unsigned tense_bit(Tense t) { return t == Tense::Present ? kPresent : t == Tense::Past ? kPast : kFuture; }

struct Time {
  const char* en;
  const char* ko;
  unsigned tenses;         // tenses the English allows with it
  bool habitual = false;   // "every day": present only, and never negated (the scope would blur)
  bool whole_day = false;  // a day or longer, for states ("i will have time tomorrow")
};

extern const std::vector<Time> kTimes;

// Tools ("with chopsticks" -> 젓가락 으로) and transport ("by bus" -> 버스 로).
struct Instrument {
  const char* key;
  const char* en;
  const char* ko;
  bool particle = true;   // takes (으)로; "on foot" is the adverb 걸어서
  bool far_only = false;  // by plane
  bool near_only = false;  // on foot, by bicycle
};

extern const std::vector<Instrument> kInstruments;

struct Verb {
  Frame frame;  // Transitive, Intransitive or Motion
  const char* base;
  const char* third;  // he reads
  const char* past;   // he read
  const char* ko;     // dictionary form
  std::vector<const char*> objects = {};      // Transitive: noun keys it takes
  std::vector<const char*> places = {};       // place keys (Motion: destinations)
  std::vector<const char*> instruments = {};  // instrument keys
  const char* prep = nullptr;           // "listen to", "wait for"
  const char* ko_honorific = nullptr;   // a different honorific verb: 먹다 -> 드시다
  const char* ko_object = nullptr;      // Korean says "dance a dance": 춤 을 추다
  bool long_negation = false;           // -지 않다 (하다 compounds) instead of 안 + verb
  unsigned subjects = kHuman;
  bool dative = false;                  // the object takes 에게 ("call my friend")
  bool coordination = false;            // "bread and milk"
  bool companion = true;                // "with my friend" reads naturally
  bool stative = false;                 // "like": present or past, no adjuncts
};

extern const std::vector<Verb> kVerbs;

// Who can be what, and what can be where or had (keys into the tables above).
extern const std::vector<const char*> kCopulaSubjects;   // "i", "my mother": ... is a student
extern const std::vector<const char*> kRoles;            // "student", "doctor"
extern const std::vector<const char*> kCopulaTimes;      // "last year", "next year"
extern const std::vector<const char*> kHumanAdjectives;  // i am busy
extern const std::vector<const char*> kBabyAdjectives;   // the baby is hungry
extern const std::vector<const char*> kAnimalAdjectives; // the dog is big
extern const std::vector<const char*> kThingsHere;       // there is a book on the desk
extern const std::vector<const char*> kAnimalsHere;      // there is a cat in the garden
extern const std::vector<const char*> kPossessions;      // i have a car

}  // namespace gf::train::ko_lexicon

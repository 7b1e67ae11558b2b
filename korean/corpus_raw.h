#pragma once
// The built-in corpus as people write it, for trying subwords on raw text without a download:
// English with a capital first letter, "I" and "TV" capitalised and punctuation attached to the
// word before it ("My friend reads a book."); Korean with its particles and the full stop attached
// to the word before them ("제 친구는 책을 읽습니다."). Only particles that cannot be anything else
// are attached (이 is also "this", so it stays apart).
#include "korean/corpus_ko.h"

namespace gf::train {

SentencePair render_raw(const SentencePair& tokenised);
CorpusSplits render_raw(const CorpusSplits& tokenised);

}  // namespace gf::train

#pragma once
// The subword models of a run (--subwords N): trained on the training split only, kept in the run
// folder as spm.model (--joint-vocab: one model for both sides) or spm.src.model and spm.tgt.model,
// and loaded back by translate, eval and --resume. Without --subwords both sides split on whitespace.
#include <string>
#include <vector>

#include "train/data/parallel_text.h"
#include "train/data/subwords.h"
#include "train/run/run_config.h"

namespace gf::train {

struct RunSegmenters {
  Segmenter src, tgt;
};

// The file names of a run's models: {"spm.model"} or {"spm.src.model", "spm.tgt.model"}.
std::vector<std::string> subword_model_files(const RunConfig& c);

// Learns the models from the training pairs' text and saves them into dir.
RunSegmenters train_run_subwords(const RunConfig& c, const std::vector<TokenPair>& train, const std::string& dir, int threads);
// A saved run's segmenters (whitespace when the config has no subwords) and vocabularies
// (vocab.src.txt, vocab.tgt.txt). Throws std::invalid_argument naming the folder when the
// vocabularies are not the subword models' pieces.
struct RunVocabularies {
  RunSegmenters segmenters;
  Vocab src, tgt;
};
RunVocabularies load_run_vocabularies(const RunConfig& c, const std::string& dir);
// The vocabularies of a run with subwords: the models' pieces.
std::pair<Vocab, Vocab> subword_vocabularies(const RunSegmenters& s);

// Each side re-split by its segmenter (the pairs hold whitespace tokens, joined back by one space).
std::vector<TokenPair> segment_pairs(const std::vector<TokenPair>& pairs, const RunSegmenters& s);

}  // namespace gf::train

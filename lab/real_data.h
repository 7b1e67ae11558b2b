#pragma once
// A real translation task for the labs that train (issue 35, item 6): `--data DIR` reads
// DIR/{train,val,test*}.{SRC,TGT} with the trainer's own loader (train/run/run_data.h) and
// segments it with the trainer's subword models (train/run/run_subwords.h: `gradflow train --data DIR
// --subwords N --joint-vocab` learns the same ones), so that a lab's claims can be run on, for
// example, Multi30k (../shared/data/multi30k) instead of its toy task. The SentencePiece models are
// learnt once from the (capped) training split and kept in the lab's cache folder, in a folder named
// by every setting that shapes them; the next run loads them. Pairs longer than --data-max-len
// subwords on either side are left out of every split, to keep a lab affordable.
#include <string>
#include <vector>

#include "lab/common.h"
#include "lab/fields.h"
#include "lab/lab.h"
#include "nn/seq2seq.h"
#include "train/eval/bleu.h"
#include "train/run/run_config.h"
#include "train/run/run_subwords.h"

namespace gf::lab {

class Output;
struct RealData;

// --data and the flags that shape it, for a lab declared with lab/experiment.h (a member of its
// settings, joined to its field table by real_data_fields()).
struct RealDataSettings {
  std::string data;  // "": the lab's toy task
  std::string src = "de", tgt = "en";
  int64_t subwords = 8000, data_train = 0, data_max_len = 50;
  std::string cache = "runs/lab/cache";
  bool given() const { return !data.empty(); }
};
// The fields above; with_cache false for a lab whose other settings declare --cache already.
Fields<RealDataSettings> real_data_fields(bool with_cache = true);
// The task, read and segmented as below; says on `r` what it read.
RealData real_data(const RealDataSettings& s, Output& r);
std::string real_data_key(const RealDataSettings& s);

struct RealData {
  IdData ids;  // train, valid and test (the first test* split; the validation split when none) as ids
  // The target side of each kept valid and test pair as text (tokens joined by spaces): BLEU's references.
  std::vector<std::string> valid_refs, test_refs;
  train::RunConfig config;          // data, src, tgt, subwords, joint vocabulary: what Translator::load needs
  train::RunSegmenters segmenters;  // text <-> subwords
  std::string subword_dir;          // the cache folder of the subword models and vocabularies
  std::string description;          // one line: the data, its sizes and its vocabulary
};


// The part of a cache key that names the data settings, e.g. "multi30k-de-en-sw8000-n0-len50-1a2b3c4d".

// Corpus BLEU (sacreBLEU's default, 13a, as `gradflow eval` scores a subword run) of the model's greedy
// translations of the first `limit` of `pairs` (0: all) against refs[i], detokenised by the data's
// segmenter. The model runs as it is (call eval() first).
BleuResult greedy_bleu(const nn::Seq2SeqTransformer& model, const RealData& data, const std::vector<train::EncodedPair>& pairs,
                       const std::vector<std::string>& refs, size_t limit = 0);

}  // namespace gf::lab

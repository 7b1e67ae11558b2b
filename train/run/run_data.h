#pragma once
// The parallel text of a run: the built-in corpus, DIR/{split}.{lang} files, or a TSV file.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/data/parallel_text.h"
#include "train/run/run_config.h"

namespace gf::train {

struct RunData {
  std::vector<TokenPair> train, valid, test;
  std::string train_name, valid_name, test_name;  // where each came from, for logs
  size_t skipped_empty = 0;                       // pairs with an empty side, dropped while reading
};

// The corpus of a run without --data (RunConfig::builtin()): its splits for the config's corpus
// seed and size. libgradflow holds no corpus of its own, so that the 1,500 lines of the Korean
// grammar are not in every program built on it: the program hands one in (the app and the tests:
// korean/builtin_corpus.h, library gradflow_korean).
using BuiltinCorpus = std::function<RunData(uint64_t seed, size_t total)>;

// Reads the splits the config names; a built-in config's from `builtin`, an error when it is empty. Errors name the missing file or split. With a folder,
// valid_split "" means val or valid (the first present), test_split "" means test or the first
// test* split present (none: test stays empty). With a .tsv file, the valid split is the TSV file
// named by valid_split, or else every 50th training pair held out; test_split names a TSV file.
// A line longer than max_line_bytes is an error naming its file and line. Every file must be a
// regular file (symbolic links followed): a FIFO or device is refused by name before it is opened.
// `files`, when given, receives each file's path before it is read (a file that fails midway is
// listed too): what gradflow report tells its reader it read from outside the run folder.
RunData load_run_data(const RunConfig& config, bool need_train = true, size_t max_line_bytes = kMaxLineBytes,
                      const BuiltinCorpus& builtin = {}, std::vector<std::string>* files = nullptr);

}  // namespace gf::train

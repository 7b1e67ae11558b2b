#pragma once
// The parallel text of a run: the built-in corpus, DIR/{split}.{lang} files, or a TSV file.
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

// Reads the splits the config names. Errors name the missing file or split. With a folder,
// valid_split "" means val or valid (the first present), test_split "" means test or the first
// test* split present (none: test stays empty). With a .tsv file, the valid split is the TSV file
// named by valid_split, or else every 50th training pair held out; test_split names a TSV file.
// A line longer than max_line_bytes is an error naming its file and line.
RunData load_run_data(const RunConfig& config, bool need_train = true, size_t max_line_bytes = kMaxLineBytes);

}  // namespace gf::train

#include "train/run/run_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/plain_file.h"

namespace gf::train {
namespace fs = std::filesystem;

namespace {

bool split_exists(const fs::path& dir, const std::string& split, const RunConfig& c) {
  return fs::exists(dir / (split + "." + c.src)) && fs::exists(dir / (split + "." + c.tgt));
}

// A data file about to be read: a regular file (not a FIFO that would wait, nor a device), recorded in `files`.
void about_to_read(const fs::path& file, std::vector<std::string>* files) {
  struct stat st;
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    GF_FAIL_AS(std::runtime_error, "--data: '{}' is {}, not a regular file", file.string(), file_kind(st.st_mode));
  if (files) files->push_back(file.string());
}

}  // namespace

RunData load_run_data(const RunConfig& c, bool need_train, size_t max_line_bytes, const BuiltinCorpus& builtin, std::vector<std::string>* files) {
  RunData d;
  if (c.builtin()) {
    GF_CHECK(static_cast<bool>(builtin),
             "load_run_data: the run has no --data and the program gave no built-in corpus (BuiltinCorpus; gradflow_korean's "
             "train::korean_run_data)");
    return builtin(c.corpus_seed, static_cast<size_t>(c.corpus_size));
  }
  fs::path data(c.data);
  GF_CHECK_AS(std::runtime_error, fs::exists(data), "--data '{}' does not exist", c.data);
  if (fs::is_regular_file(data)) {
    about_to_read(data, files);
    ParallelText all = read_parallel_tsv(data, max_line_bytes);
    d.skipped_empty += all.stats.skipped_empty;
    d.train_name = data.string();
    if (!c.valid_split.empty()) {
      about_to_read(c.valid_split, files);
      ParallelText v = read_parallel_tsv(c.valid_split, max_line_bytes);
      d.valid = std::move(v.pairs);
      d.train = std::move(all.pairs);
      d.valid_name = c.valid_split;
    } else {
      for (size_t i = 0; i < all.pairs.size(); ++i) (i % 50 == 49 ? d.valid : d.train).push_back(std::move(all.pairs[i]));
      d.valid_name = "every 50th pair of " + data.string();
    }
    if (!c.test_split.empty()) {
      about_to_read(c.test_split, files);
      d.test = read_parallel_tsv(c.test_split, max_line_bytes).pairs;
      d.test_name = c.test_split;
    }
    return d;
  }
  GF_CHECK_AS(std::runtime_error, fs::is_directory(data), "--data '{}' is neither a folder nor a file", c.data);
  auto read = [&](const std::string& split, std::vector<TokenPair>& into) {
    for (const std::string& lang : {c.src, c.tgt}) about_to_read(data / (split + "." + lang), files);
    ParallelText t = read_parallel_dir(data, split, c.src, c.tgt, max_line_bytes);
    d.skipped_empty += t.stats.skipped_empty;
    into = std::move(t.pairs);
  };
  if (need_train) {
    read(c.train_split, d.train);
    d.train_name = (data / (c.train_split + "." + c.src)).string();
  }
  std::string valid = c.valid_split;
  if (valid.empty()) {
    for (const char* s : {"val", "valid", "dev"})
      if (split_exists(data, s, c)) {
        valid = s;
        break;
      }
    GF_CHECK_AS(std::runtime_error, !valid.empty(),
                "--data '{}' has no validation split (val.{}/val.{}, valid.* or dev.*); name one with --valid-split", c.data, c.src,
                c.tgt);
  }
  read(valid, d.valid);
  d.valid_name = (data / (valid + "." + c.src)).string();
  std::string test = c.test_split;
  if (test.empty()) {
    if (split_exists(data, "test", c)) {
      test = "test";
    } else {
      std::vector<std::string> found;
      for (auto& e : fs::directory_iterator(data)) {
        std::string name = e.path().filename().string();
        std::string suffix = "." + c.src;
        if (name.rfind("test", 0) == 0 && name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
          std::string split = name.substr(0, name.size() - suffix.size());
          if (split_exists(data, split, c)) found.push_back(split);
        }
      }
      std::sort(found.begin(), found.end());
      if (!found.empty()) test = found.front();
    }
  }
  if (!test.empty()) {
    read(test, d.test);
    d.test_name = test;
  }
  return d;
}

}  // namespace gf::train

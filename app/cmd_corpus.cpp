// gradflow corpus: writes the built-in English->Korean corpus to files, tokenised or as raw text.
#include <fmt/core.h>

#include <filesystem>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "korean/corpus_ko.h"
#include "korean/corpus_raw.h"

namespace gf::app {

namespace {

void write_tsv(const std::filesystem::path& file, const std::vector<train::SentencePair>& pairs) {
  std::string text;
  for (const auto& p : pairs) text += p.src + "\t" + p.tgt + "\n";
  write_file_atomic(file.string(), text);
}

}  // namespace

Flags corpus_flags() {
  Flags f("corpus",
          "Writes the built-in English->Korean corpus (the one `gradflow train` uses without --data) to --out DIR as\n"
          "DIR/{train,valid,test}.{en,ko}, or with --tsv as DIR/{train,valid,test}.tsv. --raw renders it as people write it\n"
          "(capitals, punctuation and Korean particles attached), to try --subwords on raw text:\n"
          "  gradflow corpus --raw --tsv --out raw && gradflow train --data raw/train.tsv --valid-split raw/valid.tsv \\\n"
          "      --test-split raw/test.tsv --subwords 1000");
  f.add_string("out", "", "folder to write (created)");
  f.add_int("size", 24000, "pairs in all (split 90/5/5)");
  f.add_int("seed", 1, "corpus seed (the trainer's built-in corpus uses 1)");
  f.add_bool("raw", "capitals, attached punctuation and particles (default: tokenised, as the trainer reads it)");
  f.add_bool("tsv", "one TSV file per split instead of two text files");
  return f;
}

void check_corpus_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, !f.str("out").empty(), "corpus: --out DIR is required");
  GF_CHECK_AS(UsageError, f.integer("size") >= 20, "corpus: --size must be at least 20, got {}", f.integer("size"));
}

int cmd_corpus(int argc, char** argv) {
  Flags f = corpus_flags();
  if (!f.parse(argc, argv)) return 0;
  check_corpus_flags(f);
  train::CorpusSplits c = train::make_korean_corpus(static_cast<uint64_t>(f.integer("seed")), static_cast<size_t>(f.integer("size")));
  if (f.on("raw")) c = train::render_raw(c);
  const std::filesystem::path dir(f.str("out"));
  GF_CHECK_AS(UsageError, !std::filesystem::exists(dir) || std::filesystem::is_directory(dir), "corpus: --out '{}' exists and is not a folder",
              dir.string());
  std::filesystem::create_directories(dir);
  if (f.on("tsv")) {
    write_tsv(dir / "train.tsv", c.train);
    write_tsv(dir / "valid.tsv", c.valid);
    write_tsv(dir / "test.tsv", c.test);
  } else {
    train::save_corpus(c, dir);
  }
  fmt::print("wrote {} ({} train, {} valid, {} test pairs{})\n", dir.string(), c.train.size(), c.valid.size(), c.test.size(),
             f.on("raw") ? ", raw text" : "");
  return 0;
}

}  // namespace gf::app

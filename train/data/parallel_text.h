#pragma once
// Reading pre-tokenised parallel text: either two files with one sentence a line
// (DIR/{split}.{src} and DIR/{split}.{tgt}, as Multi30k ships) or one TSV file `source<TAB>target`.
// Tokens are separated by whitespace exactly as Python's str.split() separates them.
//
// Bad input fails loudly, naming the file and line: a missing file, files with different line
// counts, invalid UTF-8, a line longer than max_line_bytes, a TSV line without exactly one tab. CRLF line endings, a UTF-8 byte-order
// mark and a last line without '\n' are accepted. A pair where either side has no tokens is
// skipped and counted in ReadStats::skipped_empty.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "train/data/line_reader.h"

namespace gf::train {

using Tokens = std::vector<std::string>;
using TokenPair = std::pair<Tokens, Tokens>;  // (source tokens, target tokens)

struct ReadStats {
  size_t lines = 0;          // line pairs read
  size_t kept = 0;           // pairs returned
  size_t skipped_empty = 0;  // pairs dropped because a side had no tokens
};

struct ParallelText {
  std::vector<TokenPair> pairs;
  ReadStats stats;
};

// Two aligned files: line i of src_file translates to line i of tgt_file.
// Errors: std::runtime_error when a file cannot be read; std::invalid_argument for bad content
// ("a.en has 3 lines but a.ko has 2", "a.en:7: invalid UTF-8 at byte 4 (0xff)").
ParallelText read_parallel_files(const std::filesystem::path& src_file, const std::filesystem::path& tgt_file,
                                 size_t max_line_bytes = kMaxLineBytes);

// The text of tokens: one space between them (the inverse of the whitespace split).
std::string join_tokens(const Tokens& tokens);

// DIR/{split}.{src_ext} and DIR/{split}.{tgt_ext}, e.g. ("data", "train", "de", "en").
ParallelText read_parallel_dir(const std::filesystem::path& dir, std::string_view split, std::string_view src_ext,
                               std::string_view tgt_ext, size_t max_line_bytes = kMaxLineBytes);

// One file, each line `source<TAB>target`.
ParallelText read_parallel_tsv(const std::filesystem::path& tsv_file, size_t max_line_bytes = kMaxLineBytes);

// The same two readers on text held in memory; the names stand for the files in error messages
// ("name:line: ..."). The file readers read line by line (train/data/line_reader.h), never a whole
// file at once, through the same parsers.
ParallelText parse_parallel_texts(std::string_view src_text, std::string_view src_name, std::string_view tgt_text,
                                  std::string_view tgt_name);
ParallelText parse_parallel_tsv(std::string_view text, std::string_view name);

// The bound of the small files read whole: far above a vocabulary or subword model of a million
// pieces (an 8,000-piece SentencePiece model is 0.4 MB).
inline constexpr uint64_t kMaxWholeFileBytes = uint64_t{64} << 20;
// The whole file as bytes, for the small files read whole (vocabularies, subword models). Throws
// std::runtime_error naming `op` and the file when it is missing, not a regular file (a directory,
// a FIFO, /dev/zero), unreadable or larger than max_bytes (tensor/io/plain_file.h).
std::string read_file_bytes(const std::filesystem::path& file, std::string_view op, uint64_t max_bytes = kMaxWholeFileBytes);

// The lines of a text file without their '\n' (and '\r' before it), the BOM removed, each checked
// for valid UTF-8 (the error names file:line). A last line without '\n' still counts. `op` names
// the caller in the error for a missing or unreadable file.
std::vector<std::string> read_text_lines(const std::filesystem::path& file, std::string_view op = "read_text_lines",
                                         size_t max_line_bytes = kMaxLineBytes);
// The same on text held in memory: `name` stands for the file in the error (name:line).
std::vector<std::string> split_text_lines(std::string_view text, std::string_view name);

}  // namespace gf::train

#include "train/data/parallel_text.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/plain_file.h"
#include "train/data/line_reader.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace {

// The pair of one line from each side, or nothing when either side has no tokens.
bool add_pair(ParallelText& out, std::string_view src, std::string_view tgt) {
  ++out.stats.lines;
  Tokens s = utf8::split_whitespace(src), t = utf8::split_whitespace(tgt);
  if (s.empty() || t.empty()) {
    ++out.stats.skipped_empty;
    return false;
  }
  out.pairs.emplace_back(std::move(s), std::move(t));
  ++out.stats.kept;
  return true;
}

// The two sides line by line; line i of one translates to line i of the other.
ParallelText parse_parallel(LineReader& src, LineReader& tgt) {
  ParallelText out;
  std::string a, b;
  for (;;) {
    const bool more_a = src.next(a), more_b = tgt.next(b);
    if (!more_a || !more_b) {
      // Count what is left of the longer side, for the message.
      for (std::string rest; more_a && src.next(rest);) {}
      for (std::string rest; more_b && tgt.next(rest);) {}
      GF_CHECK(more_a == more_b, "read_parallel: '{}' has {} lines but '{}' has {} lines", src.name(), src.lines(), tgt.name(), tgt.lines());
      return out;
    }
    add_pair(out, a, b);
  }
}

ParallelText parse_tsv(LineReader& in) {
  ParallelText out;
  for (std::string line; in.next(line);) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      if (utf8::split_whitespace(line).empty()) {  // a blank line: nothing to translate
        ++out.stats.lines;
        ++out.stats.skipped_empty;
        continue;
      }
      GF_FAIL("{}:{}: no tab between source and target", in.name(), in.lines());
    }
    GF_CHECK(line.find('\t', tab + 1) == std::string::npos, "{}:{}: more than one tab; expected `source<TAB>target`", in.name(), in.lines());
    add_pair(out, std::string_view(line).substr(0, tab), std::string_view(line).substr(tab + 1));
  }
  return out;
}

// Closes a file descriptor on every exit path.
struct OpenFile {
  int fd;
  OpenFile(const std::filesystem::path& file, std::string_view op) : fd(open_text_file(file.string(), op)) {}
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

}  // namespace

std::string read_file_bytes(const std::filesystem::path& file, std::string_view op, uint64_t max_bytes) {
  return read_regular_file(file.string(), max_bytes, op);
}

std::vector<std::string> split_text_lines(std::string_view text, std::string_view name) {
  LineReader in(text, std::string(name));
  std::vector<std::string> lines;
  for (std::string line; in.next(line);) lines.push_back(std::move(line));
  return lines;
}

std::vector<std::string> read_text_lines(const std::filesystem::path& file, std::string_view op, size_t max_line_bytes) {
  OpenFile f(file, op);
  LineReader in(f.fd, file.string(), max_line_bytes);
  std::vector<std::string> lines;
  for (std::string line; in.next(line);) lines.push_back(std::move(line));
  return lines;
}

ParallelText parse_parallel_texts(std::string_view src_text, std::string_view src_name, std::string_view tgt_text,
                                  std::string_view tgt_name) {
  LineReader src(src_text, std::string(src_name)), tgt(tgt_text, std::string(tgt_name));
  return parse_parallel(src, tgt);
}

ParallelText read_parallel_files(const std::filesystem::path& src_file, const std::filesystem::path& tgt_file, size_t max_line_bytes) {
  OpenFile a(src_file, "read_parallel"), b(tgt_file, "read_parallel");
  LineReader src(a.fd, src_file.string(), max_line_bytes), tgt(b.fd, tgt_file.string(), max_line_bytes);
  return parse_parallel(src, tgt);
}

std::string join_tokens(const Tokens& tokens) {
  std::string s;
  for (const auto& t : tokens) {
    if (!s.empty()) s += ' ';
    s += t;
  }
  return s;
}

ParallelText read_parallel_dir(const std::filesystem::path& dir, std::string_view split, std::string_view src_ext,
                               std::string_view tgt_ext, size_t max_line_bytes) {
  return read_parallel_files(dir / fmt::format("{}.{}", split, src_ext), dir / fmt::format("{}.{}", split, tgt_ext), max_line_bytes);
}

ParallelText parse_parallel_tsv(std::string_view text, std::string_view name) {
  LineReader in(text, std::string(name));
  return parse_tsv(in);
}

ParallelText read_parallel_tsv(const std::filesystem::path& tsv_file, size_t max_line_bytes) {
  OpenFile f(tsv_file, "read_parallel_tsv");
  LineReader in(f.fd, tsv_file.string(), max_line_bytes);
  return parse_tsv(in);
}

}  // namespace gf::train

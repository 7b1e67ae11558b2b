#include "train/data/parallel_text.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
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

}  // namespace

std::string read_file_bytes(const std::filesystem::path& file, std::string_view op) {
  std::error_code ec;
  GF_CHECK_AS(std::runtime_error, std::filesystem::exists(file, ec), "{}: '{}' does not exist", op, file.string());
  GF_CHECK_AS(std::runtime_error, !std::filesystem::is_directory(file, ec), "{}: '{}' is a directory, not a text file", op,
              file.string());
  std::ifstream in(file, std::ios::binary);
  GF_CHECK_AS(std::runtime_error, in, "{}: cannot open '{}': {}", op, file.string(), std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  GF_CHECK_AS(std::runtime_error, !in.bad(), "{}: error reading '{}'", op, file.string());
  return std::move(buf).str();
}

std::vector<std::string> split_text_lines(std::string_view text, std::string_view name) {
  std::string_view rest(text);
  if (rest.starts_with("\xEF\xBB\xBF")) rest.remove_prefix(3);  // UTF-8 byte-order mark
  std::vector<std::string> lines;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    const size_t bad = utf8::find_invalid(line);
    GF_CHECK(bad == std::string_view::npos, "{}:{}: invalid UTF-8 at byte {} (0x{:02x})", name, lines.size() + 1, bad + 1,
             static_cast<unsigned char>(line[bad]));
    lines.emplace_back(line);
  }
  return lines;
}

std::vector<std::string> read_text_lines(const std::filesystem::path& file, std::string_view op) {
  return split_text_lines(read_file_bytes(file, op), file.string());
}

ParallelText parse_parallel_texts(std::string_view src_text, std::string_view src_name, std::string_view tgt_text,
                                  std::string_view tgt_name) {
  const std::vector<std::string> src = split_text_lines(src_text, src_name), tgt = split_text_lines(tgt_text, tgt_name);
  GF_CHECK(src.size() == tgt.size(), "read_parallel: '{}' has {} lines but '{}' has {} lines", src_name, src.size(), tgt_name,
           tgt.size());
  ParallelText out;
  out.pairs.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) add_pair(out, src[i], tgt[i]);
  return out;
}

ParallelText read_parallel_files(const std::filesystem::path& src_file, const std::filesystem::path& tgt_file) {
  return parse_parallel_texts(read_file_bytes(src_file, "read_parallel"), src_file.string(), read_file_bytes(tgt_file, "read_parallel"),
                              tgt_file.string());
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
                               std::string_view tgt_ext) {
  return read_parallel_files(dir / fmt::format("{}.{}", split, src_ext), dir / fmt::format("{}.{}", split, tgt_ext));
}

ParallelText parse_parallel_tsv(std::string_view text, std::string_view name) {
  const std::vector<std::string> lines = split_text_lines(text, name);
  ParallelText out;
  out.pairs.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      if (utf8::split_whitespace(line).empty()) {  // a blank line: nothing to translate
        ++out.stats.lines;
        ++out.stats.skipped_empty;
        continue;
      }
      GF_FAIL("{}:{}: no tab between source and target", name, i + 1);
    }
    GF_CHECK(line.find('\t', tab + 1) == std::string_view::npos, "{}:{}: more than one tab; expected `source<TAB>target`", name, i + 1);
    add_pair(out, line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

ParallelText read_parallel_tsv(const std::filesystem::path& tsv_file) {
  return parse_parallel_tsv(read_file_bytes(tsv_file, "read_parallel_tsv"), tsv_file.string());
}

}  // namespace gf::train

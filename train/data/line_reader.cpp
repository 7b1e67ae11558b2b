#include "train/data/line_reader.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "tensor/check.h"
#include "train/data/utf8.h"

namespace gf::train {

namespace {
constexpr size_t kChunk = size_t{1} << 16;
constexpr std::string_view kBom = "\xEF\xBB\xBF";
// Bytes an unfinished line may hold beyond the limit and still fit it: a BOM and a '\r', which
// are not part of the line.
constexpr size_t kUncounted = kBom.size() + 1;
}  // namespace

LineReader::LineReader(int fd, std::string name, size_t max_line_bytes)
    : fd_(fd), name_(std::move(name)), max_line_bytes_(max_line_bytes) {}

LineReader::LineReader(std::string_view text, std::string name, size_t max_line_bytes)
    : name_(std::move(name)), text_(text), max_line_bytes_(max_line_bytes), ended_(true) {}

bool LineReader::fill(bool wait) {
  if (ended_) return false;
  if (!wait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;  // nothing to read now (or poll failed: read() will say)
  }
  owned_.erase(0, pos_);  // keep only what is not returned yet
  scan_ -= pos_;
  pos_ = 0;
  const size_t old = owned_.size();
  owned_.resize(old + kChunk);
  ssize_t r;
  do r = ::read(fd_, owned_.data() + old, kChunk);
  while (r < 0 && errno == EINTR);
  GF_CHECK_AS(std::runtime_error, r >= 0, "{}: read failed: {}", name_, std::strerror(errno));
  owned_.resize(old + static_cast<size_t>(r));
  text_ = owned_;
  if (r == 0) ended_ = true;
  return r > 0;
}

size_t LineReader::line_end() {
  const size_t nl = text_.find('\n', scan_);
  scan_ = nl == std::string_view::npos ? text_.size() : nl;
  return nl;
}

bool LineReader::ready() {
  if (skipping_) return ended_;  // next() first reads the rest of the refused line, however long
  if (ended_ || line_end() != std::string_view::npos) return true;
  fill(false);
  return ended_ || line_end() != std::string_view::npos;
}

void LineReader::too_long() {
  ++lines_;
  GF_FAIL("{}:{}: line is longer than {} bytes (the limit; --max-line-bytes raises it)", name_, lines_, max_line_bytes_);
}

void LineReader::refuse_unfinished_line() {
  pos_ = scan_ = text_.size();  // what arrived of it is dropped now, the rest by the next call
  skipping_ = true;
  too_long();
}

void LineReader::skip_rest_of_line() {
  size_t nl;
  while ((nl = line_end()) == std::string_view::npos && !ended_) {
    pos_ = scan_;
    fill(true);
  }
  pos_ = scan_ = nl == std::string_view::npos ? text_.size() : nl + 1;
  skipping_ = false;
}

bool LineReader::next(std::string& line) {
  if (skipping_) skip_rest_of_line();
  size_t nl;
  while ((nl = line_end()) == std::string_view::npos && !ended_) {
    if (text_.size() - pos_ > max_line_bytes_ + kUncounted) refuse_unfinished_line();
    fill(true);
  }
  if (pos_ >= text_.size()) return false;
  std::string_view l = text_.substr(pos_, nl == std::string_view::npos ? std::string_view::npos : nl - pos_);
  pos_ = scan_ = nl == std::string_view::npos ? text_.size() : nl + 1;
  if (lines_ == 0 && l.starts_with(kBom)) l.remove_prefix(kBom.size());
  if (l.ends_with('\r')) l.remove_suffix(1);
  if (l.size() > max_line_bytes_) too_long();
  ++lines_;
  const size_t bad = utf8::find_invalid(l);
  GF_CHECK(bad == std::string_view::npos, "{}:{}: invalid UTF-8 at byte {} (0x{:02x})", name_, lines_, bad + 1, static_cast<unsigned char>(l[bad]));
  line.assign(l);
  return true;
}

int open_text_file(const std::string& path, std::string_view op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GF_CHECK_AS(std::runtime_error, fd >= 0 || errno != ENOENT, "{}: '{}' does not exist", op, path);
  GF_CHECK_AS(std::runtime_error, fd >= 0, "{}: cannot open '{}': {}", op, path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "{}: '{}' is a directory, not a text file", op, path);
  }
  return fd;
}

}  // namespace gf::train

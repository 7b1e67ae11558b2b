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
}  // namespace

LineReader::LineReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}

LineReader::LineReader(std::string_view text, std::string name) : name_(std::move(name)), text_(text), ended_(true) {}

bool LineReader::fill(bool wait) {
  if (ended_) return false;
  if (!wait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;  // nothing to read now (or poll failed: read() will say)
  }
  owned_.erase(0, pos_);  // keep only what is not returned yet
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

bool LineReader::ready() {
  if (ended_ || text_.find('\n', pos_) != std::string_view::npos) return true;
  fill(false);
  return ended_ || text_.find('\n', pos_) != std::string_view::npos;
}

bool LineReader::next(std::string& line) {
  size_t nl;
  while ((nl = text_.find('\n', pos_)) == std::string_view::npos && !ended_) fill(true);
  if (pos_ >= text_.size()) return false;
  std::string_view l = text_.substr(pos_, nl == std::string_view::npos ? std::string_view::npos : nl - pos_);
  pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
  if (lines_ == 0 && l.starts_with(kBom)) l.remove_prefix(kBom.size());
  if (l.ends_with('\r')) l.remove_suffix(1);
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

#include "tensor/io/plain_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "tensor/check.h"

namespace gf {
namespace {

// The descriptor back to blocking I/O (it was opened O_NONBLOCK so that opening a FIFO cannot wait).
void make_blocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

// Closes fd and throws unless it is a regular file.
void require_regular(int fd, const std::string& path, std::string_view op, struct stat& st) {
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "{}: cannot read the status of '{}': {}", op, path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "{}: '{}' is {}, not a regular file", op, path, file_kind(st.st_mode));
  }
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

int open_own_file(const std::string& path, int flags, std::string_view op, mode_t mode) {
  const bool truncate = (flags & O_TRUNC) != 0;
  const int fd = ::open(path.c_str(), (flags & ~O_TRUNC) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) {
    const int err = errno;
    GF_CHECK_AS(std::runtime_error, err != ELOOP,
                "{}: '{}' is a symbolic link; gradflow writes its own files there only as regular files, never through a link "
                "(remove the link)",
                op, path);
    GF_CHECK_AS(std::runtime_error, err != ENXIO, "{}: '{}' is a FIFO, not a regular file (remove it)", op, path);
    GF_FAIL_AS(std::runtime_error, "{}: cannot open '{}': {}", op, path, std::strerror(err));
  }
  struct stat st;
  require_regular(fd, path, op, st);
  make_blocking(fd);
  if (truncate && ::ftruncate(fd, 0) != 0) {
    const int err = errno;
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "{}: cannot truncate '{}': {}", op, path, std::strerror(err));
  }
  return fd;
}

int open_regular_file(const std::string& path, std::string_view op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    GF_CHECK_AS(std::runtime_error, err != ENOENT, "{}: '{}' does not exist", op, path);
    GF_FAIL_AS(std::runtime_error, "{}: cannot open '{}': {}", op, path, std::strerror(err));
  }
  struct stat st;
  require_regular(fd, path, op, st);
  make_blocking(fd);
  return fd;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view op) {
  const int fd = open_regular_file(path, op);
  struct stat st;
  ::fstat(fd, &st);  // (open_regular_file has just done the same)
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "{}: '{}' holds {} bytes, more than the {} read from such a file", op, path,
               static_cast<uint64_t>(st.st_size), max_bytes);
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      GF_FAIL_AS(std::runtime_error, "{}: error reading '{}': {}", op, path, std::strerror(err));
    }
    if (r == 0) break;
    bytes.append(buf, static_cast<size_t>(r));
    if (bytes.size() > max_bytes) {
      ::close(fd);
      GF_FAIL_AS(std::runtime_error, "{}: '{}' grew past {} bytes while it was read, more than the {} read from such a file", op, path,
                 max_bytes, max_bytes);
    }
  }
  ::close(fd);
  return bytes;
}

}  // namespace gf

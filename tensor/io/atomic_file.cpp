#include "tensor/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "tensor/check.h"

namespace gf {
namespace {

// std::runtime_error "write_file_atomic: '<path>': <step>: <strerror(err)>".
template <class... Args>
[[noreturn]] void fail(const std::string& path, int err, fmt::format_string<Args...> step, Args&&... args) {
  GF_FAIL_AS(std::runtime_error, "write_file_atomic: '{}': {}: {}", path, fmt::format(step, std::forward<Args>(args)...),
             std::strerror(err));
}

// The directory that will hold the file: the rename must stay within one filesystem, and that
// directory is the one whose entry has to be fsync'ed.
std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Owns the temporary file until it has been renamed into place; unlinks it otherwise.
class TempFile {
 public:
  explicit TempFile(const std::string& target) {
    static std::atomic<uint64_t> counter{0};
    std::filesystem::path p(target);
    std::string dir = p.parent_path().string();
    std::string base = p.filename().string();
    if (base.empty() || base == "." || base == "..") fail(target, EINVAL, "not a file name");
    // A hidden name in the same directory, unique per process and call; O_EXCL guarantees we never
    // reuse a name someone else holds, so a clash just moves on to the next counter value.
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string name = fmt::format(".{}.tmp-{}-{}", base, ::getpid(), counter++);
      path_ = dir.empty() ? name : (std::filesystem::path(dir) / name).string();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) return;
      if (errno != EEXIST) fail(target, errno, "cannot create temporary file '{}'", path_);
    }
    fail(target, EEXIST, "cannot find a free temporary file name");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  void closed() { fd_ = -1; }
  void committed() { committed_ = true; }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

std::atomic<WriteFaults*> g_write_faults{nullptr};

// write(2) may write less than asked or be interrupted; loop until everything is out. A test's
// WriteFaults may cut the write short: a kill leaves the partial file a real crash leaves, and
// ENOSPC fails as a full disk does, after the bytes that still fitted.
void write_all(int fd, const char* p, size_t n, const std::string& target, const std::string& tmp) {
  WriteFaults::Verdict v{n, WriteFaults::Then::Write};
  if (WriteFaults* faults = g_write_faults.load()) v = faults->before_write(n);
  const bool cut = v.then != WriteFaults::Then::Write;
  size_t left = cut ? std::min(v.allowed, n) : n;
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(target, errno, "cannot write temporary file '{}'", tmp);
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (v.then == WriteFaults::Then::Kill) std::raise(SIGKILL);
  if (v.then == WriteFaults::Then::NoSpace) fail(target, ENOSPC, "cannot write temporary file '{}'", tmp);
}

void fsync_directory(const std::string& target) {
  std::string dir = directory_of(target);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail(target, errno, "cannot open directory '{}' to fsync it", dir);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some filesystems cannot fsync a directory at all; the rename is still done, only its
  // durability is up to them, so that is not an error.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) fail(target, err, "cannot fsync directory '{}'", dir);
}

}  // namespace

void write_file_atomic_with(const std::string& path, const std::function<void(const ByteSink& sink)>& produce) {
  TempFile tmp(path);

  // Many small chunks (a header, then tensors) are gathered so each costs no system call.
  constexpr size_t kBufferSize = 1 << 16;
  std::vector<char> buffer;
  buffer.reserve(kBufferSize);
  auto flush = [&] {
    write_all(tmp.fd(), buffer.data(), buffer.size(), path, tmp.path());
    buffer.clear();
  };
  ByteSink sink = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    if (buffer.size() + size <= kBufferSize) {
      buffer.insert(buffer.end(), p, p + size);
      return;
    }
    flush();
    if (size <= kBufferSize) buffer.insert(buffer.end(), p, p + size);
    else write_all(tmp.fd(), p, size, path, tmp.path());
  };
  produce(sink);
  flush();

  // The data must be on disk before the rename makes it visible, or a crash could leave the new
  // name pointing at an empty or partial file.
  if (::fsync(tmp.fd()) != 0) fail(path, errno, "cannot fsync temporary file '{}'", tmp.path());
  int rc = ::close(tmp.fd());
  tmp.closed();
  if (rc != 0) fail(path, errno, "cannot close temporary file '{}'", tmp.path());
  if (::rename(tmp.path().c_str(), path.c_str()) != 0)
    fail(path, errno, "cannot rename temporary file '{}' over it", tmp.path());
  tmp.committed();
  fsync_directory(path);
}

void set_write_faults(WriteFaults* faults) { g_write_faults.store(faults); }

size_t remove_abandoned_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  size_t removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp-");
    if (name.empty() || name[0] != '.' || at == std::string::npos) continue;
    // ".<base>.tmp-<pid>-<counter>": the writer's pid, to leave a live writer's file alone.
    const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic_with(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

}  // namespace gf

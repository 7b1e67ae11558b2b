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
#include <cctype>
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
    // A hidden name in the same directory, unique per host, process and call; O_EXCL guarantees we
    // never reuse a name someone else holds, so a clash just moves on to the next counter value.
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string name = fmt::format(".{}.tmp-{}-{}-{}", base, temp_file_host(), ::getpid(), counter++);
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

// The digits of `s` as a positive number, or -1 when `s` is empty or holds anything else.
long digits_of(const std::string& s) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  return std::stol(s);
}

// A temporary file's name ".<base>.tmp-<host>-<pid>-<counter>" cut into its host and pid; false
// for any other name (a file of another program, or one without a host, whose writer's machine
// cannot be known).
bool temp_file_writer(const std::string& name, std::string& host, long& pid) {
  if (name.empty() || name[0] != '.') return false;
  const size_t c = name.rfind('-');
  if (c == std::string::npos || c == 0 || digits_of(name.substr(c + 1)) < 0) return false;
  const size_t p = name.rfind('-', c - 1);
  if (p == std::string::npos || (pid = digits_of(name.substr(p + 1, c - p - 1))) <= 0) return false;
  // temp_file_host() has no '.', so the last ".tmp-" before the pid is the one before the host.
  const size_t at = name.rfind(".tmp-", p);
  if (at == std::string::npos || at + 5 >= p) return false;
  host = name.substr(at + 5, p - at - 5);
  return host.find('.') == std::string::npos;
}

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

std::string temp_file_host() {
  static const std::string host = [] {
    char h[256] = {};
    std::string s = ::gethostname(h, sizeof h - 1) == 0 && h[0] ? h : "unknown-host";
    // Only letters, digits and '-' (a '.' would make ".tmp-" ambiguous), at most 64 of them
    // (HOST_NAME_MAX), so that a long file name still fits NAME_MAX.
    s = s.substr(0, 64);
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
    return s;
  }();
  return host;
}

size_t remove_abandoned_temp_files(const std::string& dir) {
  namespace fs = std::filesystem;
  size_t removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string host;
    long pid = 0;
    if (!temp_file_writer(e.path().filename().string(), host, pid)) continue;
    // kill(pid, 0) speaks for this machine's processes only: on a shared file system (NFS) another
    // host's writer may be alive under any pid, so its file is never judged here.
    if (host != temp_file_host()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // a live writer
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic_with(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

}  // namespace gf

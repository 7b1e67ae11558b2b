#include "train/loop/run_lock.h"

#include <fcntl.h>
#include <fmt/chrono.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "tensor/check.h"
#include "tensor/io/plain_file.h"

namespace gf::train {
namespace fs = std::filesystem;
namespace {

std::mutex g_mutex;
std::map<std::string, std::weak_ptr<RunFolderLock>> g_held;  // folders this process holds, by canonical path

std::string host_name() {
  char h[256] = {};
  return ::gethostname(h, sizeof h - 1) == 0 && h[0] ? h : "?";
}

// "10:02" today, "2025-06-01 10:02" on another day.
std::string when(std::time_t t) {
  std::tm at{}, now{};
  const std::time_t today = std::time(nullptr);
  localtime_r(&t, &at);
  localtime_r(&today, &now);
  const bool same_day = at.tm_year == now.tm_year && at.tm_yday == now.tm_yday;
  return same_day ? fmt::format("{:%H:%M}", at) : fmt::format("{:%Y-%m-%d %H:%M}", at);
}

// The holder as its lock file describes it: "gradflow pid 1234 on host h (started 10:02)".
std::string holder(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::istringstream in(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
  long long pid = 0, started = 0;
  std::string host;
  for (std::string kv; in >> kv;) {
    if (kv.starts_with("pid=")) pid = std::atoll(kv.c_str() + 4);
    else if (kv.starts_with("host=")) host = kv.substr(5);
    else if (kv.starts_with("started=")) started = std::atoll(kv.c_str() + 8);
  }
  if (pid <= 0) return "another gradflow run (it has not written its pid yet)";
  return fmt::format("gradflow pid {} on host {} (started {})", pid, host.empty() ? "?" : host, when(static_cast<std::time_t>(started)));
}

std::string advice(const std::string& flag) {
  return flag == "--resume" ? "wait for it to end, or stop it, before resuming" : "use another --out";
}

}  // namespace

std::shared_ptr<RunFolderLock> RunFolderLock::take(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  GF_CHECK_AS(std::runtime_error, !ec, "train: cannot create the run folder '{}': {}", dir, ec.message());
  const std::string key = fs::canonical(dir, ec).string();
  GF_CHECK_AS(std::runtime_error, !ec, "train: cannot resolve the run folder '{}': {}", dir, ec.message());
  std::lock_guard<std::mutex> guard(g_mutex);
  if (auto it = g_held.find(key); it != g_held.end())
    if (std::shared_ptr<RunFolderLock> held = it->second.lock(); held && held->owner_ == ::getpid()) return held;
  const std::string file = (fs::path(dir) / kFileName).string();
  // A regular file of its own, never through a link planted in the folder (it is truncated below).
  int fd = -1;
  try {
    fd = open_own_file(file, O_RDWR | O_CREAT, "lock file");
  } catch (const std::runtime_error& e) {
    GF_FAIL_AS(std::runtime_error, "train: cannot write in the run folder '{}': {}", dir, e.what());
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string who = err == EWOULDBLOCK ? holder(fd) : "";
    ::close(fd);
    GF_CHECK_AS(std::runtime_error, err == EWOULDBLOCK, "train: cannot lock the run folder '{}' ({}): {}", dir, file, std::strerror(err));
    GF_FAIL_AS(RunFolderInUse, "run folder '{}' is in use by {}; {}", dir, who, advice(flag));
  }
  const std::string me = fmt::format("pid={} host={} started={}\n", ::getpid(), host_name(), static_cast<long long>(std::time(nullptr)));
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    const int err = errno;
    ::close(fd);
    GF_FAIL_AS(std::runtime_error, "train: cannot write in the run folder '{}': cannot write its lock file '{}': {}", dir, file,
               std::strerror(err));
  }
  std::shared_ptr<RunFolderLock> lock(new RunFolderLock(key, fd, ::getpid()));
  g_held[key] = lock;
  return lock;
}

RunFolderLock::~RunFolderLock() {
  if (owner_ != ::getpid()) {  // a forked child's copy: the lock stays its parent's, and so does the file
    ::close(fd_);
    return;
  }
  std::lock_guard<std::mutex> guard(g_mutex);
  if (auto it = g_held.find(key_); it != g_held.end() && it->second.expired()) g_held.erase(it);
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);  // "no holder": best effort, the lock itself is what counts
  ::close(fd_);
}

}  // namespace gf::train

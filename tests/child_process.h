#pragma once
// A child program run from a test with its output in files and a deadline: a child still running
// then is killed and the test fails, so a test never hangs. Optionally with a file-size limit or as
// user nobody (the fault tests). For tests/test_faults.cpp, test_full_disk.cpp, test_distributed.cpp.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gf::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Child {
  pid_t pid = -1;
  std::filesystem::path out, err;
};

// How the child is started: extra environment, a limit, and who it runs as.
struct ChildOptions {
  std::vector<std::string> env;    // "NAME=value"
  long long file_size_limit = -1;  // RLIMIT_FSIZE in bytes (SIGXFSZ ignored: the write fails with EFBIG)
  bool as_nobody = false;          // root only: run as uid/gid 65534, so file permissions apply
  // RLIMIT_AS in bytes, so that a child that would exhaust the memory fails its allocation instead
  // (not applied under AddressSanitizer, whose shadow memory needs terabytes of address space).
  long long address_space_limit = -1;
};

// Starts `binary args...` with stdout and stderr in `logs`.out and .err.
inline Child start_child(const std::string& binary, const std::vector<std::string>& args, const std::filesystem::path& logs,
                         const ChildOptions& o = {}) {
  Child c;
  c.out = logs.string() + ".out";
  c.err = logs.string() + ".err";
  c.pid = ::fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    int fo = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666), fe = ::open(c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fo < 0 || fe < 0) ::_exit(125);
    ::dup2(fo, 1), ::dup2(fe, 2);
    int null = ::open("/dev/null", O_RDONLY);  // no standard input (CI has none)
    if (null >= 0) ::dup2(null, 0);
    ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL);  // whatever the test runner set
    ::setpgid(0, 0);  // its own process group: a timeout kills the child's children too
    for (const std::string& kv : o.env) ::putenv(const_cast<char*>(kv.c_str()));
    if (o.file_size_limit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit r{static_cast<rlim_t>(o.file_size_limit), static_cast<rlim_t>(o.file_size_limit)};
      if (::setrlimit(RLIMIT_FSIZE, &r) != 0) ::_exit(126);
    }
#ifndef __SANITIZE_ADDRESS__
    if (o.address_space_limit >= 0) {
      rlimit r{static_cast<rlim_t>(o.address_space_limit), static_cast<rlim_t>(o.address_space_limit)};
      if (::setrlimit(RLIMIT_AS, &r) != 0) ::_exit(126);
    }
#endif
    if (o.as_nobody && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(127);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(124);
  }
  return c;
}

// The child's wait status, or nothing while it runs.
inline bool poll_child(const Child& c, int& status) { return ::waitpid(c.pid, &status, WNOHANG) == c.pid; }

// Waits at most `seconds`; a child (and its process group) still running then is killed and the test fails.
inline int wait_child(const Child& c, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (!poll_child(c, status)) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      FAIL("the child did not end within ", seconds, " s; killed");
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

// Waits until `file` holds `text` (at most `seconds`).
inline bool wait_for_text(const std::filesystem::path& file, const std::string& text, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(file).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct Ran {
  int status = 0;
  std::string out, err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

inline Ran run_child(const std::string& binary, const std::vector<std::string>& args, const std::filesystem::path& logs,
                     double seconds, const ChildOptions& o = {}) {
  Child c = start_child(binary, args, logs, o);
  Ran r;
  r.status = wait_child(c, seconds);
  r.out = slurp(c.out), r.err = slurp(c.err);
  return r;
}

}  // namespace gf::test

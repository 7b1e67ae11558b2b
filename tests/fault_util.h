#pragma once
// For the fault tests: a child `gradflow` started with a limit, environment or user of the test's
// choosing, waited for with a deadline (a test never hangs), and a tiny training setup.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/io/safetensors.h"
#include "tests/temp_dir.h"
#include "train/decode/translator.h"
#include "train/loop/checkpoint.h"

namespace gf::test {

namespace fs = std::filesystem;
using train::RunState;
using train::load_state;
using train::Translator;

inline std::string gradflow_binary() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// How a child gradflow is started: extra environment, limits, and who it runs as.
struct ChildOptions {
  std::vector<std::string> env;    // "NAME=value"
  long long file_size_limit = -1;  // RLIMIT_FSIZE in bytes (SIGXFSZ ignored: the write fails with EFBIG)
  bool as_nobody = false;          // root only: run as uid/gid 65534, so file permissions apply
};

struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

// Starts `binary args...` with stdout and stderr in files beside `logs`.
inline Child start(const std::string& binary, const std::vector<std::string>& args, const fs::path& logs, const ChildOptions& o = {}) {
  Child c;
  c.out = logs.string() + ".out";
  c.err = logs.string() + ".err";
  c.pid = ::fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    int fo = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666), fe = ::open(c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fo < 0 || fe < 0) ::_exit(125);
    ::dup2(fo, 1), ::dup2(fe, 2);
    ::signal(SIGINT, SIG_DFL), ::signal(SIGTERM, SIG_DFL);  // whatever the test runner set
    for (const std::string& kv : o.env) ::putenv(const_cast<char*>(kv.c_str()));
    if (o.file_size_limit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit r{static_cast<rlim_t>(o.file_size_limit), static_cast<rlim_t>(o.file_size_limit)};
      if (::setrlimit(RLIMIT_FSIZE, &r) != 0) ::_exit(126);
    }
    if (o.as_nobody && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(127);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    ::_exit(124);
  }
  return c;
}

// Waits at most `seconds`; a child still running then is killed and the test fails (never hangs).
inline int wait_for(const Child& c, double seconds = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(c.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      FAIL("gradflow did not end within ", seconds, " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

struct Ran {
  int status = 0;
  std::string out, err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

inline Ran run(const std::string& binary, const std::vector<std::string>& args, const fs::path& logs, const ChildOptions& o = {}) {
  Child c = start(binary, args, logs, o);
  Ran r;
  r.status = wait_for(c);
  r.out = slurp(c.out), r.err = slurp(c.err);
  return r;
}

// A 1,200-pair corpus and a model small enough that an epoch takes well under a second.
struct Setup {
  test::TempDir tmp{"gf_faults"};
  fs::path data = tmp.path / "data";
  Setup() {
    Ran r = run(gradflow_binary(), {"corpus", "--size", "1200", "--out", data.string()}, tmp.path / "corpus");
    REQUIRE(r.exit_code() == 0);
  }
  std::vector<std::string> train_args(const fs::path& out, int epochs) const {
    return {"train", "--data", data.string(), "--src", "en", "--tgt", "ko", "--out", out.string(), "--d-model", "32", "--heads", "2",
            "--layers", "1", "--ff", "64", "--max-tokens", "1024", "--samples", "0", "--quiet", "--epochs", std::to_string(epochs)};
  }
  static std::vector<std::string> resume_args(const fs::path& out, int epochs) {
    return {"train", "--resume", out.string(), "--samples", "0", "--quiet", "--epochs", std::to_string(epochs)};
  }
  fs::path trained(const std::string& name, int epochs) const {
    fs::path out = tmp.path / name;
    Ran r = run(gradflow_binary(), train_args(out, epochs), tmp.path / (name + "-train"));
    INFO(r.err);
    REQUIRE(r.exit_code() == 0);
    return out;
  }
};

// Every file of a folder, name -> bytes.
inline std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = slurp(e.path());
  return m;
}

inline int temp_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp-") != std::string::npos;
  return n;
}

// The checkpoint state.json names loads, and so does the model gradflow translate would use.
inline void check_loadable(const fs::path& dir) {
  RunState s = load_state(dir.string());
  CHECK_NOTHROW(load_safetensors((dir / s.model_file).string()));
  CHECK_NOTHROW(load_safetensors((dir / s.optim_file).string()));
  CHECK_NOTHROW(Translator::load(dir.string()));
}


}  // namespace gf::test

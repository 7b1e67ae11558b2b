// One run per run folder (train/loop/run_lock.h), with real processes: a second `train --out X`
// or `train --resume X` while a first run holds X is refused at once, naming the first run's pid;
// a run killed with SIGKILL leaves no lock behind (the kernel releases flock's lock); and the
// folder's checkpoints are the first run's alone.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/fault_util.h"
#include "tests/test_budget.h"
#include "train/loop/run_lock.h"

using namespace gf;
using namespace gf::train;
using namespace gf::test;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A first run that holds `out` for a long time (each step sleeps), started and waited for until it
// has set up (it holds the lock from its start; the setup line comes after).
Child long_run(const Setup& s, const std::vector<std::string>& args, const std::string& log) {
  Child c = start(faults_binary(), args, s.tmp.path / log, {{"GRADFLOW_TEST_STEP_SLEEP_MS=200"}});
  REQUIRE(wait_for_text(c.out, "train: lr ", 60));
  return c;
}

}  // namespace

TEST_CASE("two runs on one folder: the second is refused at once, naming the first; the first is untouched") {
  Setup s;
  const fs::path out = s.tmp.path / "shared";
  Child first = long_run(s, s.train_args(out, 1000), "first");
  for (const bool resume : {false, true}) {
    CAPTURE(resume);
    const auto t0 = std::chrono::steady_clock::now();
    Ran second = run(gradflow_binary(), resume ? Setup::resume_args(out, 2) : s.train_args(out, 1), s.tmp.path / "second");
    const double took = seconds_since(t0);
    INFO(second.err);
    MESSAGE("the second run was refused after ", took, " s");
    CHECK(second.exit_code() == 1);
    CHECK(second.err.find(fmt::format("run folder '{}' is in use by gradflow pid {} on host ", out.string(), first.pid)) != std::string::npos);
    CHECK(second.err.find(resume ? "before resuming" : "use another --out") != std::string::npos);
    CHECK(second.out.find("train: lr") == std::string::npos);  // it never set up
    CHECK(took < time_limit(1.0));
  }
  int status = 0;
  CHECK(!poll_child(first, status));  // the first run goes on
  ::kill(first.pid, SIGTERM);
  status = wait_for(first, 60);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);  // saved its checkpoint on the signal
  check_loadable(out);
  CHECK(slurp(out / RunFolderLock::kFileName).empty());  // released: the file says no one holds it
}

TEST_CASE("a run killed with SIGKILL leaves no lock: the next run starts at once") {
  Setup s;
  const fs::path out = s.tmp.path / "killed";
  Child first = long_run(s, s.train_args(out, 1000), "killed");
  CHECK(slurp(out / RunFolderLock::kFileName).find(fmt::format("pid={} ", first.pid)) != std::string::npos);
  ::kill(first.pid, SIGKILL);
  wait_for(first, 30);
  Ran again = run(gradflow_binary(), s.train_args(s.tmp.path / "other", 1), s.tmp.path / "other");  // any run still works
  CHECK(again.exit_code() == 0);
  // The dead run's pid is still in the file, and the folder is free all the same.
  CHECK(slurp(out / RunFolderLock::kFileName).find(fmt::format("pid={} ", first.pid)) != std::string::npos);
  Ran next = run(gradflow_binary(), s.train_args(out, 1), s.tmp.path / "next");
  INFO(next.err);
  CHECK(next.exit_code() == 0);
}

TEST_CASE("in one process the folder's lock is shared; another process is refused") {
  test::TempDir tmp("gf_run_lock");
  const std::string dir = (tmp.path / "run").string();
  std::shared_ptr<RunFolderLock> a = RunFolderLock::take(dir);
  std::shared_ptr<RunFolderLock> b = RunFolderLock::take((tmp.path / "run" / ".." / "run").string());  // the same folder
  CHECK(a.get() == b.get());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // a second process: refused, with this process's pid in the message
    try {
      RunFolderLock::take(dir);
      ::_exit(10);
    } catch (const RunFolderInUse& e) {
      ::_exit(std::string(e.what()).find(fmt::format("pid {} ", ::getppid())) != std::string::npos ? 0 : 11);
    } catch (...) {
      ::_exit(12);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  a.reset();
  b.reset();
  CHECK(slurp(fs::path(dir) / RunFolderLock::kFileName).empty());
  CHECK_NOTHROW(RunFolderLock::take(dir));  // free again
}

#include "app/child_jobs.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>

#include "tensor/check.h"

extern char** environ;

namespace gf::app {
namespace {

using Clock = std::chrono::steady_clock;

// Starts one job; returns its pid, or -1 when it could not start (the log says why).
pid_t start(const ChildJob& job) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, job.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);  // never through a link in the folder
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<std::string> args{"gradflow"};
  args.insert(args.end(), job.args.begin(), job.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return err == 0 ? pid : -1;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::vector<ChildResult> run_child_jobs(const std::vector<ChildJob>& jobs, int parallel,
                                        const std::function<void(size_t, const ChildResult&)>& on_end) {
  GF_CHECK(parallel >= 1, "run_child_jobs: parallel must be at least 1, got {}", parallel);
  for (size_t i = 0; i < jobs.size(); ++i)
    GF_CHECK(jobs[i].after < static_cast<int>(i), "run_child_jobs: job {} waits for job {}, which is not before it", i, jobs[i].after);
  std::vector<ChildResult> results(jobs.size());
  std::vector<char> started(jobs.size(), 0), ended(jobs.size(), 0);
  std::map<pid_t, std::pair<size_t, Clock::time_point>> running;
  auto finish = [&](size_t i, ChildResult r) {
    results[i] = r;
    ended[i] = 1;
    on_end(i, r);
  };
  size_t done = 0;
  while (done < jobs.size()) {
    // Start what may start, in order: a free slot, and the job's `after` has ended.
    for (size_t i = 0; i < jobs.size() && static_cast<int>(running.size()) < parallel; ++i) {
      if (started[i] || (jobs[i].after >= 0 && !ended[jobs[i].after])) continue;
      started[i] = 1;
      const pid_t pid = start(jobs[i]);
      if (pid < 0) {
        finish(i, {127, 0.0});
        ++done;
        continue;
      }
      running[pid] = {i, Clock::now()};
    }
    if (running.empty()) continue;  // every startable job failed to start; the loop starts the next
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      GF_CHECK_AS(std::runtime_error, errno == EINTR, "run_child_jobs: waitpid failed: {}", std::strerror(errno));
      continue;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;  // not one of ours
    const auto [i, t0] = it->second;
    running.erase(it);
    finish(i, {exit_code(status), std::chrono::duration<double>(Clock::now() - t0).count()});
    ++done;
  }
  return results;
}

}  // namespace gf::app

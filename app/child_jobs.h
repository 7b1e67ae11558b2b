// Runs commands of this program as child processes, a few at once: `gradflow lab all --jobs N`.
//
// Why processes and not threads: the labs' models are small (d_model 32-64), and two threads on one
// such model spend much of their time waiting on each other (leak, crossattn and exposure ran faster
// on one thread than on two, docs/labs.md). Two labs side by side, one thread each, keep both cores
// busy. Separate processes share nothing, so no lab's global state (thread counts, RNG, profiler)
// can leak into another's numbers.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gf::app {

struct ChildJob {
  std::vector<std::string> args;  // the program's arguments, without argv[0] ("lab", "norm", ...)
  std::string log;                // the child's stdout and stderr, both into this file
  int after = -1;                 // the index of a job that must end before this one starts, or -1
};

struct ChildResult {
  int code = 0;  // the exit code; 128 + the signal when a signal ended it; 127 when it could not start
  double seconds = 0;
};

// Runs every job as a child of /proc/self/exe, at most `parallel` at once, starting them in order
// as soon as a slot is free and the job's `after` has ended. `on_end(i, result)` is called for each
// job as it ends (in the order they end). Returns the results in the jobs' order.
std::vector<ChildResult> run_child_jobs(const std::vector<ChildJob>& jobs, int parallel,
                                        const std::function<void(size_t, const ChildResult&)>& on_end);

}  // namespace gf::app

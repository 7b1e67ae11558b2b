#pragma once
// One run per run folder. `train --out X` and `train --resume X` hold an exclusive flock(2) on
// X/.gradflow.lock for the whole run; a second run on X is refused at once, naming the first
// (pid, host, start time). The kernel releases the lock when its process ends, however it ends, so
// a lock left by a dead run never blocks. The file stays (removing it would race with a run that
// has just opened it); it is emptied when the run ends. Under MPI only rank 0 takes it: the other
// ranks never write the folder. Without this, two runs on one folder delete each other's
// checkpoints (each save removes the model-/optim- files it did not write). The lock file is opened
// with O_NOFOLLOW and must be a regular file: a symbolic link planted there (a shared folder is
// outside input) is refused, and the file it points to is not emptied.
#include <memory>
#include <stdexcept>
#include <string>

namespace gf::train {

// The error for a folder another run holds: "run folder 'X' is in use by gradflow pid 1234 on host
// h (started 10:02); use another --out".
struct RunFolderInUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RunFolderLock {
 public:
  // Creates `dir` if needed and locks it for this process. `flag` ("--out" or "--resume") shapes the
  // advice in the error. Taking a folder this process already holds shares that lock (cmd_train
  // takes it before its checks, the trainer again). Throws RunFolderInUse, or std::runtime_error
  // naming the folder when it cannot be created or written.
  static std::shared_ptr<RunFolderLock> take(const std::string& dir, const std::string& flag = "--out");

  ~RunFolderLock();  // empties the file, then closes it, which releases the lock
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  static constexpr const char* kFileName = ".gradflow.lock";

 private:
  RunFolderLock(std::string key, int fd, int owner) : key_(std::move(key)), fd_(fd), owner_(owner) {}
  std::string key_;  // the folder's canonical path
  int fd_;
  int owner_;  // the pid that took it: a forked child holds nothing of its parent's
};

}  // namespace gf::train

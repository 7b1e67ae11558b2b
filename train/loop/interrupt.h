#pragma once
// Ctrl-C (SIGINT) and SIGTERM during training: the first asks the trainer to stop after the step
// in progress, save a checkpoint and exit non-zero; a second one ends the process at once (the
// default action of that signal). Nothing on disk is torn by that: every file is written to a
// temporary name and renamed into place (tensor/io/atomic_file.h).
#include <stdexcept>
#include <string>

namespace gf::train {

// Installs the handlers for its lifetime and restores the previous ones after.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal number received since the guard was installed, or 0.
int interrupt_signal();

// Thrown by train_translator after it saved a checkpoint on a signal; the command exits with
// 128 + signal, as a shell reports a process ended by that signal.
struct Interrupted : std::runtime_error {
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal(signal) {}
  int signal;
};

}  // namespace gf::train

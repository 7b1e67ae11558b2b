#include "train/loop/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace gf::train {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term;

// Async-signal-safe: an atomic store, write(2), and re-raising with the default action. errno is
// kept as the interrupted code left it: write(2) sets it when stderr is closed or full, and the
// code the signal interrupted may be about to read its own errno.
void on_signal(int sig) {
  const int saved_errno = errno;
  if (g_signal.exchange(sig) != 0) {  // the second one: go now
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved_errno;
    return;
  }
  static const char msg[] = "\ngradflow: stopping after this step to save a checkpoint (press Ctrl-C again to quit at once)\n";
  [[maybe_unused]] const ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  errno = saved_errno;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: system calls (file writes) continue; the trainer polls between steps. SA_ONSTACK:
  // on a thread that calls oneDNN, the handler runs on that thread's own signal stack
  // (tensor/kernels/signal_stack.h), never on a JIT kernel's.
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  // A signal the parent set to be ignored (nohup, a background job of a script) stays ignored.
  sigaction(SIGINT, nullptr, &g_old_int);
  sigaction(SIGTERM, nullptr, &g_old_term);
  if (g_old_int.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
  if (g_old_term.sa_handler != SIG_IGN) sigaction(SIGTERM, &sa, nullptr);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int interrupt_signal() { return g_signal.load(); }

}  // namespace gf::train

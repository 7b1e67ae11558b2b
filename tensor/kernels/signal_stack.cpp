#include "tensor/kernels/signal_stack.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace gf::kernels {
namespace {

struct SignalStack {
  std::vector<char> memory;
  bool installed = false;
  SignalStack() {
    stack_t old{};
    if (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return;  // the thread has one already
    memory.resize(static_cast<size_t>(std::max<long>(1 << 16, sysconf(_SC_SIGSTKSZ))));
    stack_t ss{};
    ss.ss_sp = memory.data();
    ss.ss_size = memory.size();
    installed = sigaltstack(&ss, nullptr) == 0;
  }
  ~SignalStack() {
    if (!installed) return;
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  }
};

}  // namespace

void ensure_signal_stack() { thread_local SignalStack s; }

}  // namespace gf::kernels

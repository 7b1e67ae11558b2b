#pragma once
// A stack of its own for signal handlers on the calling thread.
//
// A handler installed with SA_ONSTACK runs on the thread the kernel picks, on top of whatever
// that thread was doing. oneDNN's JIT kernels (dnnl_sgemm, the bf16 matmuls) can be interrupted
// there, and a handler frame pushed onto their stack corrupted their state: a Ctrl-C during
// float32 training on oneDNN aborted the run ("corrupted size vs. prev_size", or a segfault) in
// about one run of seven, never with the products on OpenBLAS (tests/test_faults.cpp). Every
// thread that calls oneDNN calls this first, so a handler never runs on a JIT kernel's stack.
namespace gf::kernels {

// Gives the calling thread an alternate signal stack for its lifetime (once; a thread that already
// has one keeps it).
void ensure_signal_stack();

}  // namespace gf::kernels

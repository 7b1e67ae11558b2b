#pragma once
// A reference-counted, 64-byte aligned buffer. Tensors share one Storage between views.
// The live/peak byte counters let tests prove that memory stays flat across training steps.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gf {

class Storage {
 public:
  explicit Storage(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_;
  size_t nbytes_;
};

struct MemoryStats {
  int64_t live_bytes;   // bytes held by storages alive now
  int64_t peak_bytes;   // highest live_bytes since the last reset
  int64_t allocations;  // storages created since start
};
MemoryStats memory_stats();
void reset_peak_memory();

// Tells glibc's malloc to keep freed buffers for reuse instead of returning them to the kernel.
// A training step allocates and frees the same large activations and gradients every step; by
// default glibc serves each buffer above its mmap threshold with a fresh mmap, so every step
// page-faults its whole working set in again (~33,000 faults a step, ~15% of the CPU time in the
// kernel). With mmap and trimming off, freed memory stays in the heap for the next step, which
// glibc also cuts into buffers of other sizes (batches differ in shape). The peak is unchanged;
// the resident size stays at the peak afterwards, as with PyTorch's caching allocator. Skipped
// when GLIBC_TUNABLES sets malloc options (the user's choice stands). Call once, before the
// first large allocation (init_runtime does).
void keep_freed_memory();

}  // namespace gf

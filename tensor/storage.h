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

}  // namespace gf

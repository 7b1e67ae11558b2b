#include "tensor/storage.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <new>

namespace gf {
namespace {
std::atomic<int64_t> g_live{0}, g_peak{0}, g_allocs{0};
}

Storage::Storage(size_t nbytes) : nbytes_(nbytes) {
  size_t rounded = (nbytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!data_) throw std::bad_alloc();
  int64_t live = g_live += static_cast<int64_t>(nbytes);
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  ++g_allocs;
}

Storage::~Storage() {
  g_live -= static_cast<int64_t>(nbytes_);
  std::free(data_);
}

MemoryStats memory_stats() { return {g_live.load(), g_peak.load(), g_allocs.load()}; }
void reset_peak_memory() { g_peak = g_live.load(); }

void keep_freed_memory() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return;
  // Not M_MMAP_THRESHOLD: mallopt caps it at 32 MiB, and the logits of a batch and their
  // gradient are larger. No mmap at all puts every buffer in the heap.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT32_MAX);
}

}  // namespace gf

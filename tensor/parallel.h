#pragma once
// One place for threading: oneTBB loops with a grain that keeps small tensors serial, and
// the single thread-count setting that governs both TBB and OpenBLAS.
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

// ThreadSanitizer (scripts/test_tsan.sh) sees only instrumented code, and oneTBB's scheduler is a
// system library built without it, so the ordering oneTBB guarantees is invisible to it: what the
// caller wrote before parallel_for happens before every chunk, and every chunk happens before
// parallel_for returns. Without that, each chunk's first read of the caller's data would be
// reported as a race. These two annotations state exactly that guarantee and nothing more: two
// chunks that touch the same memory are still reported.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define GF_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define GF_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define GF_TSAN_ACQUIRE(addr) ((void)(addr))
#define GF_TSAN_RELEASE(addr) ((void)(addr))
#endif

namespace gf {

// Work below this many elements runs on the calling thread: scheduling costs more than it saves.
constexpr int64_t kSerialGrain = 32768;

int max_threads();

namespace detail {
// Set on a thread while it runs one of parallel_tasks' tasks and every thread has a task.
inline thread_local bool t_serial = false;

// Sets t_serial (when `on`) for its lifetime, and puts back what it was, on a throw too.
class SerialLoops {
 public:
  explicit SerialLoops(bool on) : outer_(t_serial) { t_serial = outer_ || on; }
  ~SerialLoops() { t_serial = outer_; }
  SerialLoops(const SerialLoops&) = delete;
  SerialLoops& operator=(const SerialLoops&) = delete;

 private:
  bool outer_;
};
}  // namespace detail

// f(begin, end) over [0, n) in chunks of at least `grain` items.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain || max_threads() == 1 || detail::t_serial) {
    f(int64_t{0}, n);
    return;
  }
  char started = 0, finished = 0;  // addresses for ThreadSanitizer's annotations (above)
  GF_TSAN_RELEASE(&started);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& r) {
    GF_TSAN_ACQUIRE(&started);
    f(r.begin(), r.end());
    GF_TSAN_RELEASE(&finished);
  });
  GF_TSAN_ACQUIRE(&finished);
}

// f(i) for each i in [0, n), as tasks spread over the threads, for independent pieces of work
// that have parallel loops inside. With at least as many tasks as threads, those loops run serially
// on the task's thread: every thread already has its own task, and splitting their loops would
// only make each thread wait for pieces of its work taken by another (decoding: measured slower).
// With fewer tasks, the loops are shared out as usual, each task isolated: while it waits inside
// its own loops, its thread takes only pieces of them, never the start of another task.
template <class F>
void parallel_tasks(int64_t n, F&& f) {
  const bool serial_inside = n >= max_threads();
  parallel_for(n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      tbb::this_task_arena::isolate([&] {
        detail::SerialLoops serial(serial_inside);
        f(i);
      });
  });
}

// Rows of `row_cost` elements each: a grain of rows so that each chunk has ~kSerialGrain elements.
inline int64_t row_grain(int64_t row_cost) {
  if (row_cost < 1) row_cost = 1;
  int64_t g = kSerialGrain / row_cost;
  return g < 1 ? 1 : g;
}

// Sets TBB's and OpenBLAS's thread counts together (n <= 0: the hardware's).
void set_num_threads(int n);
int max_threads();

// Who runs a large GEMM's threads. true (the default; GRADFLOW_GEMM_THREADS=tbb): OpenBLAS is
// kept to one thread and the GEMM is cut into one slab per TBB thread, so a single pool runs
// everything and OpenBLAS's idle workers never spin (sched_yield) against TBB's. Measured alone,
// 20-step training benches alternated 5 times: median 2,908 against 2,511 target tokens/s, system
// time 1.0 against 4.9 s (docs/performance.md). false (GRADFLOW_GEMM_THREADS=openblas): OpenBLAS's
// own pool, as before. Read from the environment at first use; set_gemm_on_tbb overrides.
bool gemm_on_tbb();
void set_gemm_on_tbb(bool on);

}  // namespace gf

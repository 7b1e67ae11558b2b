// parallel_tasks (tensor/parallel.h): independent tasks side by side; with a task for every
// thread, the loops inside a task stay on its thread.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensor/parallel.h"

using namespace gf;

TEST_CASE("parallel_tasks runs every task once; with a task per thread, each task's loops run on its own thread") {
  set_num_threads(2);
  // Task 0's loop is long and the others' short: without the rule, the thread done with the
  // short ones would take pieces of task 0's loop.
  constexpr int64_t kLong = 1 << 22;
  std::vector<std::set<std::thread::id>> seen(4);
  std::vector<std::mutex> locks(4);
  std::atomic<int64_t> items{0};
  std::atomic<double> sink{0};
  parallel_tasks(4, [&](int64_t i) {
    parallel_for(i == 0 ? kLong : 2, 1, [&](int64_t lo, int64_t hi) {
      {
        std::lock_guard<std::mutex> g(locks[i]);
        seen[i].insert(std::this_thread::get_id());
      }
      double x = 0;
      for (int64_t j = lo; j < hi; ++j) x += std::sqrt(static_cast<double>(j));
      sink = sink + x;
      items += hi - lo;
    });
  });
  set_num_threads(0);
  CHECK(items == kLong + 3 * 2);
  for (const auto& s : seen) CHECK(s.size() == 1);
}

TEST_CASE("parallel_tasks passes a task's exception on, and loops after it are parallel again") {
  set_num_threads(1);  // both tasks on this thread, the one whose flag is checked
  CHECK_THROWS_AS(parallel_tasks(2, [](int64_t i) {
                    if (i == 1) throw std::runtime_error("task 1");
                  }),
                  std::runtime_error);
  CHECK_FALSE(detail::t_serial);
  set_num_threads(0);
}

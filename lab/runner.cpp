#include "lab/runner.h"

namespace gf::lab::runner_detail {

std::string condition_name(const Condition& c, bool has_levels) {
  return has_levels ? fmt::format("{} @ {:g}", c.arm, c.level) : c.arm;
}

uint64_t pool_seed(uint64_t first_seed, int run) { return first_seed + 1000000 + static_cast<uint64_t>(run); }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace gf::lab::runner_detail

#pragma once
// GRADFLOW_TEST_SHORT=1, which scripts/test_sanitized.sh sets: the few long training tests take a
// smaller budget (fewer pairs, epochs, seeds or sentences) under the sanitizers, which run them
// 10-20x slower than the Release build. Every test case still runs and asserts, on the same code
// paths; only the amount of work shrinks (docs/testing.md lists what each one does).
//
// time_limit(s): a limit of s seconds as measured in the Release build, times how much slower this
// build runs (GRADFLOW_TEST_SLOWDOWN, from the build type in CMakeLists.txt), so that a limit that
// holds with a margin in Release does not fail a sanitizer build for being slow.
#include <cstdlib>
#include <cstring>

#ifndef GRADFLOW_TEST_SLOWDOWN
#error "GRADFLOW_TEST_SLOWDOWN is set for the tests by CMakeLists.txt"
#endif

namespace gf::test {

inline double time_limit(double release_seconds) { return release_seconds * GRADFLOW_TEST_SLOWDOWN; }

inline bool short_budget() {
  const char* s = std::getenv("GRADFLOW_TEST_SHORT");
  return s != nullptr && *s != '\0' && std::strcmp(s, "0") != 0;
}

}  // namespace gf::test

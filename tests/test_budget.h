#pragma once
// GRADFLOW_TEST_SHORT=1, which scripts/test_sanitized.sh sets: the few long training tests take a
// smaller budget (fewer pairs, epochs, seeds or sentences) under the sanitizers, which run them
// 10-20x slower than the Release build. Every test case still runs and asserts, on the same code
// paths; only the amount of work shrinks (docs/testing.md lists what each one does).
#include <cstdlib>
#include <cstring>

namespace gf::test {

inline bool short_budget() {
  const char* s = std::getenv("GRADFLOW_TEST_SHORT");
  return s != nullptr && *s != '\0' && std::strcmp(s, "0") != 0;
}

}  // namespace gf::test

// libFuzzer target "grad_stats": see fuzz/entry.h and docs/fuzzing.md.
#include "fuzz/entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return gf::fuzz::fuzz_one("grad_stats", data, size); }

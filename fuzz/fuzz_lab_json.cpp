// libFuzzer target "lab_json": see fuzz/entry.h and docs/fuzzing.md.
#include "fuzz/entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return gf::fuzz::fuzz_one("lab_json", data, size); }

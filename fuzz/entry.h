#pragma once
// The fuzz targets' bodies, one per parser of outside input. fuzz/fuzz_<name>.cpp hands libFuzzer's
// bytes to one of them, and tests/test_fuzz_regressions.cpp feeds them every committed seed and
// every input that once crashed, so both run exactly the same code.
//
// A target parses its input with the project's own entry point and, when the input parses, checks
// a property of the result (it writes back and reads again to the same value, its tokens are what
// the format promises, ...). Outcomes:
//   - parsed, or rejected with std::invalid_argument, std::out_of_range or std::runtime_error (the
//     project's error types for bad input, app::UsageError included) carrying a message: fine;
//   - anything else is a Finding: a violated property, an empty message, or an exception of another
//     type escaping the parser (a bare std::logic_error, which the project reserves for its own bugs,
//     std::bad_alloc or std::length_error from an absurd allocation, a raw nlohmann::json error with
//     no file or field in it). Crashes, sanitizer reports, hangs and memory blow-ups are found by
//     libFuzzer itself.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gf::fuzz {

// What a target found. Deliberately not a std::exception, so no parser's catch can swallow it.
struct Finding {
  std::string what;
};

struct Target {
  const char* name;  // fuzz/fuzz_<name>.cpp, fuzz/corpus/<name>/, tests/fuzz_regressions/<name>/
  const char* what;  // the entry point it drives
  void (*run)(std::string_view input);
};

// Every target, in the order fuzz/run.sh runs them.
const std::vector<Target>& targets();
const Target& target(std::string_view name);

struct Outcome {
  bool parsed = false;
  std::string error;  // the rejection's message when !parsed
};

// Runs one input through a target. Throws Finding for anything but "parsed" or "rejected with a
// message" (see above).
Outcome run_one(const Target& t, std::string_view input);

// libFuzzer's entry: runs the input and, on a Finding, prints it and aborts (a crash for libFuzzer).
int fuzz_one(std::string_view target_name, const uint8_t* data, size_t size);

}  // namespace gf::fuzz

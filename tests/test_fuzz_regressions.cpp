// Every committed fuzz input through the fuzz targets' own bodies (fuzz/entry.h), in the normal
// build: the seed corpora fuzz/corpus/<target>/ and every input that once crashed a target or broke
// one of its properties, tests/fuzz_regressions/<target>/. Each must parse or be rejected with a
// std::exception of the project's error types carrying a message; a crash, a sanitizer report (in a
// GRADFLOW_SANITIZE build), a violated property or an unexpected exception type fails the test.
// docs/fuzzing.md lists the targets and what the fuzzers found.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/entry.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct Tally {
  size_t files = 0, parsed = 0;
};

Tally run_folder(const gf::fuzz::Target& t, const fs::path& dir) {
  Tally n;
  for (const fs::path& file : files_in(dir)) {
    CAPTURE(file.string());
    ++n.files;
    try {
      const gf::fuzz::Outcome o = gf::fuzz::run_one(t, slurp(file));
      if (o.parsed) ++n.parsed;
      else CHECK_MESSAGE(!o.error.empty(), "rejected without a message");
    } catch (const gf::fuzz::Finding& f) {
      FAIL_CHECK(f.what);
    }
  }
  return n;
}

const fs::path kSource(GRADFLOW_SOURCE_DIR);
// The inputs committed under tests/fuzz_regressions/ (docs/fuzzing.md lists them).
constexpr size_t kRegressionInputs = 0;

}  // namespace

TEST_CASE("fuzz seeds: every target has seeds, they run clean, and some of them parse") {
  for (const gf::fuzz::Target& t : gf::fuzz::targets()) {
    const std::string name = t.name;
    CAPTURE(name);
    const Tally n = run_folder(t, kSource / "fuzz/corpus" / t.name);
    MESSAGE(name << ": " << n.files << " seeds, " << n.parsed << " parse");
    CHECK(n.files >= 1);   // the folder is committed: an empty one means the test does nothing
    CHECK(n.parsed >= 1);  // valid inputs among the seeds, so the parsers' success paths run too
  }
}

TEST_CASE("fuzz regressions: every input that once crashed or broke a property now parses or is rejected cleanly") {
  size_t total = 0;
  for (const gf::fuzz::Target& t : gf::fuzz::targets()) {
    const std::string name = t.name;
    CAPTURE(name);
    const fs::path dir = kSource / "tests/fuzz_regressions" / t.name;
    const Tally n = run_folder(t, dir);
    if (fs::exists(dir)) CHECK(n.files >= 1);
    total += n.files;
  }
  MESSAGE(total << " regression inputs");
  // As many as docs/fuzzing.md lists: a lost folder or a wrong path must fail, not pass vacuously.
  CHECK(total >= kRegressionInputs);
}

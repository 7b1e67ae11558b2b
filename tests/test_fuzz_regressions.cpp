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

// Every input under tests/fuzz_regressions/, with what it must now give: a fragment of the
// rejection's message, or "" when it must parse. docs/fuzzing.md tells each one's story.
struct Regression {
  const char* target;
  const char* file;
  const char* expected;
};
const Regression kRegressions[] = {
    // found by the fuzzers
    {"cli", "valid_split_not_utf8", "--valid-split must be UTF-8 text"},
    {"run_config", "corpus_size_2e90_float_to_int", "'corpus_size' must be an integer in the int64 range"},
    {"utf8", "xml_escape_keeps_ufffe", "invalid UTF-8"},  // rejected by utf8::decode after xml_escape's check passed
    {"run_state", "batch_in_epoch_1e300_float_to_int", "'batch_in_epoch' must be an integer in the int64 range"},
    {"commands", "help_showed_given_value_as_default", ""},  // must parse: --help shows the defaults, not the values given
    {"subwords", "empty_piece_darts_exception.model", "is not a SentencePiece model: ./third_party/darts_clone/darts.h"},
    // found by reading the parsers while writing the targets, checked with the fuzz binaries
    {"cli", "max_len_int64_max_overflow", "--max-len must be at most 510"},
    {"run_config", "max_len_int64_max_overflow.json", "--max-len must be at most 510"},
    {"cli", "log_every_zero_divides", "--log-every must be at least 1"},
};

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

TEST_CASE("fuzz regressions: every input that once crashed or broke a property now gives its expected outcome") {
  // The table and the folders agree: no input without an expectation, no expectation without its input.
  size_t on_disk = 0;
  for (const gf::fuzz::Target& t : gf::fuzz::targets())
    for (const fs::path& file : files_in(kSource / "tests/fuzz_regressions" / t.name)) {
      ++on_disk;
      const std::string name = file.filename().string();
      CAPTURE(name);
      CHECK(std::any_of(std::begin(kRegressions), std::end(kRegressions),
                        [&](const Regression& r) { return r.target == std::string(t.name) && name == r.file; }));
    }
  CHECK(on_disk == std::size(kRegressions));
  for (const Regression& r : kRegressions) {
    const fs::path file = kSource / "tests/fuzz_regressions" / r.target / r.file;
    CAPTURE(file.string());
    REQUIRE(fs::is_regular_file(file));
    try {
      const gf::fuzz::Outcome o = gf::fuzz::run_one(gf::fuzz::target(r.target), slurp(file));
      MESSAGE(std::string(r.target) << "/" << r.file << ": " << (o.parsed ? std::string("parses") : "rejected: " + o.error));
      if (*r.expected == '\0') {
        CHECK(o.parsed);
      } else {
        CHECK(!o.parsed);
        CHECK(o.error.find(r.expected) != std::string::npos);
      }
    } catch (const gf::fuzz::Finding& f) {
      FAIL_CHECK(f.what);
    }
  }
}

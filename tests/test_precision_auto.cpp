// --precision auto (app/precision_choice.h): the rule as a function of (ISA, vendor) case by case;
// every command that takes --precision takes auto, by default; train's start-up line and
// config.json; translate --precision fp32 decoding in float32; eval --compare-precision.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "app/command_flags.h"
#include "app/precision_choice.h"
#include "tensor/kernels/bf16.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "tests/test_budget.h"
#include "train/data/parallel_text.h"
#include "train/eval/translator.h"
#include "train/eval/score.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {

app::PrecisionChoice choose(const std::string& isa, const std::string& vendor, const std::string& missing = "") {
  return app::choose_auto_precision({isa, vendor, missing});
}

}  // namespace

TEST_CASE("auto: bf16 with AMX, or with AVX512-BF16 on AMD; float32 on every other (ISA, vendor)") {
  SUBCASE("AMX tiles: bf16 whoever makes the CPU") {
    for (const char* vendor : {"GenuineIntel", "AuthenticAMD", ""}) {
      const app::PrecisionChoice c = choose("avx512_core_amx", vendor);
      CHECK(c.precision == Precision::BFloat16);
      CHECK(c.reason.find("avx512_core_amx") != std::string::npos);
    }
  }
  SUBCASE("AVX512-BF16 without AMX: the vendor decides") {
    const app::PrecisionChoice amd = choose("avx512_core_bf16", "AuthenticAMD");
    CHECK(amd.precision == Precision::BFloat16);
    CHECK(amd.reason == "oneDNN avx512_core_bf16, AMD: bf16 products measured 2.8x float32 in training");
    const app::PrecisionChoice intel = choose("avx512_core_bf16", "GenuineIntel");
    CHECK(intel.precision == Precision::Float32);
    CHECK(intel.reason.find("GenuineIntel") != std::string::npos);
    CHECK(intel.reason.find("0.77x") != std::string::npos);
    for (const char* other : {"HygonGenuine", "CentaurHauls", ""}) CHECK(choose("avx512_core_bf16", other).precision == Precision::Float32);
  }
  SUBCASE("no bf16 dot product: float32") {
    for (const char* isa : {"avx512_core_vnni", "avx512_core", "avx2_vnni", "avx2", "other"})
      for (const char* vendor : {"GenuineIntel", "AuthenticAMD"}) {
        const app::PrecisionChoice c = choose(isa, vendor);
        CHECK(c.precision == Precision::Float32);
        CHECK(c.reason == std::string("oneDNN ") + isa + ": no bf16 dot-product instructions");
      }
  }
  SUBCASE("native bf16 products that cannot run here (CPU or build): float32, with the reason, even where the ISA would say bf16") {
    for (const char* isa : {"avx512_core_amx", "avx512_core_bf16"}) {
      const app::PrecisionChoice c = choose(isa, "AuthenticAMD", "this build was compiled without AVX512-BF16");
      CHECK(c.precision == Precision::Float32);
      CHECK(c.reason == "no native bf16 products here: this build was compiled without AVX512-BF16");
    }
  }
}

TEST_CASE("resolve_precision: auto is this machine's rule, fp32 and bf16 stay explicit, anything else is a usage error") {
  const app::PrecisionChoice here = app::choose_auto_precision(app::this_cpu());
  const app::ResolvedPrecision a = app::resolve_precision("auto", "train");
  CHECK(a.requested == "auto");
  CHECK(a.precision == here.precision);
  CHECK(a.reason == here.reason);
  CHECK(app::precision_line(a) == std::string("precision: auto -> ") + precision_name(here.precision) + " (" + here.reason + ")");
  CHECK(app::resolve_precision("fp32", "eval").precision == Precision::Float32);
  const app::ResolvedPrecision b = app::resolve_precision("bf16", "eval");
  CHECK(b.precision == Precision::BFloat16);
  CHECK(app::precision_line(b) == "precision: bf16 (--precision bf16)");
  CHECK_THROWS_WITH_AS(app::resolve_precision("fp16", "bench"), "bench: --precision must be auto, fp32 or bf16, got 'fp16'", app::UsageError);
  // The rule reads oneDNN's ISA and the CPU as they are here.
  const app::CpuFacts cpu = app::this_cpu();
  CHECK(cpu.isa == kernels::bf16_isa());
  CHECK(cpu.bf16_missing.empty() == (kernels::bf16_path() == kernels::Bf16Path::Native));
  CHECK_FALSE(cpu.vendor.empty());
}

TEST_CASE("every command with --precision defaults to auto and accepts auto, fp32 and bf16 as values") {
  // The arguments each command needs besides --precision to pass its flag check.
  const std::map<std::string, std::vector<std::string>> needs = {
      {"train", {}}, {"translate", {"--model", "m"}}, {"eval", {"--model", "m"}}, {"bench", {"train", "--data", "d"}}};
  std::set<std::string> with_precision;
  for (const app::CommandFlags& c : app::command_flags()) {
    app::Flags declared = c.flags();
    if (!declared.has("precision")) continue;
    with_precision.insert(c.name);
    INFO(c.name);
    CHECK(declared.str("precision") == "auto");
    REQUIRE(needs.count(c.name) == 1);
    for (const std::string value : {"auto", "fp32", "bf16", "fp16"}) {
      std::vector<std::string> args = needs.at(c.name);
      args.insert(args.end(), {"--precision", value});
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      app::Flags f = c.flags();
      REQUIRE(f.parse(static_cast<int>(argv.size()), argv.data()));
      if (value == "fp16")
        CHECK_THROWS_WITH_AS(c.check(f), doctest::Contains("--precision must be auto, fp32 or bf16, got 'fp16'"), app::UsageError);
      else
        CHECK_NOTHROW(c.check(f));
    }
  }
  CHECK(with_precision == std::set<std::string>{"train", "translate", "eval", "bench"});
}

TEST_CASE("count_differing counts the sentences whose outputs differ") {
  CHECK(train::count_differing({"a b", "c", "d"}, {"a b", "c .", "e"}) == 2);
  CHECK(train::count_differing({"a"}, {"a"}) == 0);
  CHECK_THROWS_WITH_AS(train::count_differing({"a"}, {}), "count_differing: 1 outputs against 0", std::invalid_argument);
}

namespace {

std::string gradflow() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }

// A few dozen lines of made-up parallel text: {train,val,test}.{en,ko}.
void write_tiny_data(const test::TempDir& dir) {
  const char* en[] = {"i", "see", "a", "dog", "in", "the", "park", "you", "read", "book"};
  const char* ko[] = {"나", "는", "공원", "에서", "개", "를", "봅니다", "책", "을", "읽습니다"};
  for (const auto& [split, count] : {std::pair<const char*, int>{"train", 60}, {"val", 8}, {"test", 8}}) {
    std::ofstream se(dir.path / "data" / (std::string(split) + ".en")), sk(dir.path / "data" / (std::string(split) + ".ko"));
    for (int i = 0; i < count; ++i) {
      const int n = 3 + i % 5;
      for (int j = 0; j < n; ++j) se << (j ? " " : "") << en[(i + 3 * j) % 10], sk << (j ? " " : "") << ko[(i + 7 * j) % 10];
      se << "\n", sk << "\n";
    }
  }
}

const std::vector<std::string> kTinyRun = {"--src", "en", "--tgt", "ko", "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32",
                                           "--min-freq", "1", "--steps", "6", "--warmup", "2", "--samples", "0", "--quiet", "--threads", "1"};

test::Ran train_tiny(const test::TempDir& dir, const std::string& out, const std::vector<std::string>& more) {
  std::vector<std::string> args = {"train", "--data", (dir.path / "data").string(), "--out", (dir.path / out).string()};
  args.insert(args.end(), kTinyRun.begin(), kTinyRun.end());
  args.insert(args.end(), more.begin(), more.end());
  return test::run_child(gradflow(), args, dir.path / (out + "_log"), test::time_limit(120));
}

nlohmann::json config_of(const test::TempDir& dir, const std::string& out) {
  return nlohmann::json::parse(test::slurp(dir.path / out / "config.json"));
}

}  // namespace

TEST_CASE("train prints auto's choice and why, and config.json keeps the request and what it resolved to") {
  test::TempDir dir("gf_precision_auto");
  fs::create_directories(dir.path / "data");
  write_tiny_data(dir);
  const app::PrecisionChoice here = app::choose_auto_precision(app::this_cpu());
  const std::string resolved = precision_name(here.precision);

  const test::Ran a = train_tiny(dir, "auto", {});  // no --precision: auto
  INFO(a.out, a.err);
  REQUIRE(a.exit_code() == 0);
  CHECK(a.out.find("precision: auto -> " + resolved + " (" + here.reason + ")\n") != std::string::npos);
  CHECK(config_of(dir, "auto")["precision"] == "auto");
  CHECK(config_of(dir, "auto")["resolved_precision"] == resolved);

  const test::Ran f = train_tiny(dir, "fp32", {"--precision", "fp32"});
  INFO(f.out, f.err);
  REQUIRE(f.exit_code() == 0);
  CHECK(f.out.find("precision: fp32 (--precision fp32)\n") != std::string::npos);
  CHECK(config_of(dir, "fp32")["precision"] == "fp32");
  CHECK(config_of(dir, "fp32")["resolved_precision"] == "fp32");

  {  // translate --precision fp32 decodes in float32 whatever the run trained in; auto says what it chose.
    // The auto run trained in bf16 where this CPU runs it; this test process decodes in float32.
    const train::Translator t = train::Translator::load((dir.path / "auto").string());
    REQUIRE(kernels::precision() == Precision::Float32);
    const std::vector<std::string> sources = train::read_text_lines(dir.path / "data" / "test.en");
    const std::vector<std::string> expected = t.translate(sources, t.default_decode_options());
    std::string joined;
    for (const std::string& s : expected) joined += s + "\n";
    const test::Ran tr = test::run_child(gradflow(), {"translate", "--model", (dir.path / "auto").string(), "--input",
                                                      (dir.path / "data" / "test.en").string(), "--precision", "fp32", "--threads", "1"},
                                         dir.path / "translate_fp32", test::time_limit(60));
    INFO(tr.err);
    REQUIRE(tr.exit_code() == 0);
    CHECK(tr.out == joined);
    CHECK(tr.err == "precision: fp32 (--precision fp32)\n");
    const test::Ran ta = test::run_child(gradflow(), {"translate", "--model", (dir.path / "auto").string(), "--input",
                                                      (dir.path / "data" / "test.en").string(), "--threads", "1"},
                                         dir.path / "translate_auto", test::time_limit(60));
    REQUIRE(ta.exit_code() == 0);
    CHECK(ta.err == "precision: auto -> " + resolved + " (" + here.reason + ")\n");
  }

  {  // eval --compare-precision reports how many outputs differ between two decodings.
    const std::string run = (dir.path / "fp32").string();
    const test::Ran same = test::run_child(gradflow(), {"eval", "--model", run, "--precision", "fp32", "--compare-precision", "fp32"},
                                           dir.path / "eval_same", test::time_limit(60));
    INFO(same.out, same.err);
    REQUIRE(same.exit_code() == 0);
    CHECK(same.out.rfind("precision: fp32 (--precision fp32)\n", 0) == 0);
    CHECK(same.out.find("compared with fp32 decoding: 0 of 8 outputs differ (0.00%); fp32's BLEU = ") != std::string::npos);
    const test::Ran bf = test::run_child(gradflow(), {"eval", "--model", run, "--precision", "fp32", "--compare-precision", "bf16"},
                                         dir.path / "eval_bf16", test::time_limit(60));
    INFO(bf.out, bf.err);
    // bf16 runs on every CPU (natively or on the portable path), so the comparison always runs.
    REQUIRE(bf.exit_code() == 0);
    CHECK(bf.out.find("compared with bf16 decoding: ") != std::string::npos);
    CHECK(bf.out.find(" of 8 outputs differ (") != std::string::npos);
    const test::Ran bad = test::run_child(gradflow(), {"eval", "--model", run, "--compare-precision", "auto"}, dir.path / "eval_bad",
                                          test::time_limit(60));
    CHECK(bad.exit_code() == 2);
    CHECK(bad.err.find("eval: --compare-precision must be fp32 or bf16, got 'auto'") != std::string::npos);
  }
}

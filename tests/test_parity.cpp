// PyTorch parity: the standard reference cases (copied from ../shared/parity/cases), a variant set
// with other shapes and settings (scripts/make_parity_variant.py) and the extend set (RMSNorm,
// grouped-query attention: scripts/make_parity_extend.py), and whole training steps
// (../shared/parity/training), in float64 and float32.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/parity.h"
#include "tensor/io/safetensors.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {
std::string cases(const char* set) { return std::string(GRADFLOW_SOURCE_DIR) + "/tests/parity/" + set; }

// Every case of the folder runs and passes: the count comes from the folder, not from here.
void expect_all_pass(const char* set, DType dtype) {
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(cases(set))) files += e.path().extension() == ".safetensors";
  REQUIRE(files > 0);
  std::ostringstream out;
  int failed = app::run_parity_dir(cases(set), dtype, out);
  INFO(out.str());
  CHECK(failed == 0);
  CHECK(out.str().find(std::to_string(files) + " passed, 0 failed") != std::string::npos);
}
}  // namespace

TEST_CASE("standard cases pass in float64 (within 1e-9)") { expect_all_pass("standard", DType::Float64); }
TEST_CASE("standard cases pass in float32 (README tolerances)") { expect_all_pass("standard", DType::Float32); }
TEST_CASE("variant cases (GELU, 3 heads, 3 layers, odd sizes) pass in float64") { expect_all_pass("variant", DType::Float64); }
TEST_CASE("variant cases pass in float32") { expect_all_pass("variant", DType::Float32); }
// RMSNorm and grouped-query attention against formula-written PyTorch (scripts/make_parity_extend.py).
TEST_CASE("extend cases (RMSNorm, grouped-query and multi-query attention) pass in float64") { expect_all_pass("extend", DType::Float64); }
TEST_CASE("extend cases pass in float32") { expect_all_pass("extend", DType::Float32); }
// Whole training steps (loss, clipping, warm-up schedule, Adam), copied from ../shared/parity/training
// (make_training_parity.py): every step's loss, gradient norm and rate, and the final parameters.
TEST_CASE("training cases (6 Adam steps, Post-LN and Pre-LN) pass in float64 (within 1e-9)") { expect_all_pass("training", DType::Float64); }
TEST_CASE("training cases pass in float32, the parameters PyTorch left in place compared with their start") {
  expect_all_pass("training", DType::Float32);
  std::ostringstream out;
  app::run_parity_dir(cases("training"), DType::Float32, out);
  CHECK(out.str().find("parameter elements PyTorch left in place") != std::string::npos);
}

TEST_CASE("a training case fails when the optimizer differs from PyTorch's (beta2 0.999 instead of 0.98)") {
  fs::path dir = fs::temp_directory_path() / "gradflow_parity_train_bad";
  fs::create_directories(dir);
  SafetensorsFile f = load_safetensors(cases("training") + "/train_postnorm.safetensors");
  std::string meta = f.metadata.at("case");
  const size_t at = meta.find("0.98]");
  REQUIRE(at != std::string::npos);
  f.metadata["case"] = meta.replace(at, 4, "0.999");
  save_safetensors((dir / "train_postnorm.safetensors").string(), f.tensors, f.metadata);
  for (DType dt : {DType::Float64, DType::Float32}) {
    app::ParityCaseResult r = app::run_parity_case((dir / "train_postnorm.safetensors").string(), dt);
    CHECK(r.error.empty());
    CHECK_FALSE(r.passed);
    INFO(r.worst_where);
    CHECK((r.worst_where.find("out.") == 0 || r.worst_where.find("final.param.") == 0));  // a loss, norm or parameter
  }
  fs::remove_all(dir);
}

TEST_CASE("a wrong parameter makes a case fail, naming the worst element") {
  fs::path dir = fs::temp_directory_path() / "gradflow_parity_bad";
  fs::create_directories(dir);
  SafetensorsFile f = load_safetensors(cases("standard") + "/linear.safetensors");
  Tensor w = f.tensors.at("param.weight").clone();
  w.flat_set(3, w.flat_get(3) + 1e-3);
  f.tensors["param.weight"] = w;
  save_safetensors((dir / "linear.safetensors").string(), f.tensors, f.metadata);
  app::ParityCaseResult r = app::run_parity_case((dir / "linear.safetensors").string(), DType::Float64);
  CHECK_FALSE(r.passed);
  INFO(r.worst_where);
  CHECK((r.worst_where.find("out.output[") == 0 || r.worst_where.find("grad.in.input[") == 0));
  CHECK(r.worst_where.find("expected") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("unknown kinds and unreadable files are failures, not crashes") {
  fs::path dir = fs::temp_directory_path() / "gradflow_parity_errors";
  fs::remove_all(dir);
  fs::create_directories(dir);
  save_safetensors((dir / "a_unknown.safetensors").string(), {{"in.input", Tensor::zeros({2}, DType::Float64)}},
                   {{"case", R"({"kind": "conv2d", "config": {}})"}});
  {
    std::ofstream junk(dir / "b_junk.safetensors");
    junk << "not a safetensors file";
  }
  std::ostringstream out;
  int failed = app::run_parity_dir(dir.string(), DType::Float64, out);
  CHECK(failed == 2);
  CHECK(out.str().find("case kind 'conv2d' is unknown") != std::string::npos);
  CHECK(out.str().find("0 passed, 2 failed") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a folder without cases is an error") {
  fs::path dir = fs::temp_directory_path() / "gradflow_parity_empty";
  fs::create_directories(dir);
  std::ostringstream out;
  CHECK_THROWS_WITH(app::run_parity_dir(dir.string(), DType::Float64, out), doctest::Contains("no *.safetensors"));
  CHECK_THROWS_WITH(app::run_parity_dir((dir / "missing").string(), DType::Float64, out), doctest::Contains("not a directory"));
}

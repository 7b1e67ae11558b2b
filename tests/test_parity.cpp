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
#include "tensor/kernels/bf16.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {
std::string cases(const char* set) { return std::string(GRADFLOW_SOURCE_DIR) + "/tests/parity/" + set; }

// Every case of the folder runs and passes: the count comes from the folder, not from here.
void expect_all_pass(const char* set, DType dtype, Precision precision = Precision::Float32) {
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(cases(set))) files += e.path().extension() == ".safetensors";
  REQUIRE(files > 0);
  std::ostringstream out;
  int failed = app::run_parity_dir(cases(set), dtype, out, precision);
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

// bf16: the standard and variant cases and the training trajectories, each also run by PyTorch's CPU
// autocast to bfloat16 (scripts/make_parity_bf16.py); every case within twice autocast's distance
// from the float64 reference (app/parity.cpp, Bf16Comparison).
// Each on every bf16 path this machine has: the portable one everywhere, the native one where it runs.
std::vector<kernels::Bf16Path> bf16_paths() {
  if (kernels::bf16_native_available()) return {kernels::Bf16Path::Portable, kernels::Bf16Path::Native};
  MESSAGE("the native bf16 path cannot run here (", kernels::bf16_native_unavailable_reason(), "): the portable path only");
  return {kernels::Bf16Path::Portable};
}

TEST_CASE("bf16 cases: products in bfloat16 within twice PyTorch autocast's error, on each bf16 path") {
  for (kernels::Bf16Path p : bf16_paths()) {
    kernels::Bf16PathScope scope(p);
    INFO("bf16 path: ", std::string(kernels::bf16_path_name(p)));
    expect_all_pass("bf16", DType::Float32, Precision::BFloat16);
    CHECK(kernels::precision() == Precision::Float32);  // the run's precision does not outlive it
  }
}

TEST_CASE("bf16 parity fails on a wrong parameter, and needs autocast results in the case, on each bf16 path") {
  for (kernels::Bf16Path p : bf16_paths()) {
    kernels::Bf16PathScope scope(p);
    INFO("bf16 path: ", std::string(kernels::bf16_path_name(p)));
    fs::path dir = fs::temp_directory_path() / "gradflow_parity_bf16_bad";
    fs::remove_all(dir);
    fs::create_directories(dir);
    SafetensorsFile f = load_safetensors(cases("bf16") + "/standard_ffn.safetensors");
    REQUIRE(app::run_parity_case(cases("bf16") + "/standard_ffn.safetensors", DType::Float32, Precision::BFloat16).passed);
    Tensor w = f.tensors.at("param.linear1.weight").clone();  // (ff, d)
    for (int64_t j = 0; j < w.size(1); ++j) w.flat_set(j, w.flat_get(j) * 1.1);  // one row 10% larger: a small slip
    f.tensors["param.linear1.weight"] = w;
    save_safetensors((dir / "ffn.safetensors").string(), f.tensors, f.metadata);
    const app::ParityCaseResult r = app::run_parity_case((dir / "ffn.safetensors").string(), DType::Float32, Precision::BFloat16);
    CHECK(r.error.empty());
    CHECK_FALSE(r.passed);
    CHECK(r.bf16_gradients > 1.0);
    const app::ParityCaseResult plain = app::run_parity_case(cases("standard") + "/ffn.safetensors", DType::Float32, Precision::BFloat16);
    CHECK_FALSE(plain.passed);
    CHECK(plain.error.find("autocast") != std::string::npos);
    fs::remove_all(dir);
  }
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

// Checkpoint averaging: the mean itself, its layout checks, and the trainer's kept epochs.
#include <doctest/doctest.h>

#include <filesystem>

#include "temp_dir.h"
#include "tensor/io/safetensors.h"
#include "train/loop/average.h"
#include "train/loop/trainer.h"

#include "tiny_run.h"

using namespace gf;
using namespace gf::train;
namespace fs = std::filesystem;

using TempDir = gf::test::TempDir;

TEST_CASE("average_weights: the element-wise mean, in each tensor's dtype") {
  TempDir d;
  save_safetensors(d.file("a.safetensors"), {{"w", Tensor::of({1, 2, 3, 4}, {2, 2})}, {"b", Tensor::of({0.5}, {1}, DType::Float64)}});
  save_safetensors(d.file("b.safetensors"), {{"w", Tensor::of({3, 2, 1, 0}, {2, 2})}, {"b", Tensor::of({1.5}, {1}, DType::Float64)}});
  save_safetensors(d.file("c.safetensors"), {{"w", Tensor::of({2, 5, 8, 2}, {2, 2})}, {"b", Tensor::of({4.0}, {1}, DType::Float64)}});
  const auto m = average_weights({d.file("a.safetensors"), d.file("b.safetensors"), d.file("c.safetensors")}).tensors;
  REQUIRE(m.size() == 2);
  CHECK(m.at("w").dtype() == DType::Float32);
  CHECK(m.at("b").dtype() == DType::Float64);
  const float* w = m.at("w").data<float>();
  CHECK(w[0] == doctest::Approx(2.0));
  CHECK(w[1] == doctest::Approx(3.0));
  CHECK(w[2] == doctest::Approx(4.0));
  CHECK(w[3] == doctest::Approx(2.0));
  CHECK(m.at("b").data<double>()[0] == doctest::Approx(2.0));
}

TEST_CASE("average_weights: files of different models are refused, naming the tensor and both files") {
  TempDir d;
  save_safetensors(d.file("a.safetensors"), {{"w", Tensor::zeros({2, 2})}});
  save_safetensors(d.file("shape.safetensors"), {{"w", Tensor::zeros({2, 3})}});
  save_safetensors(d.file("name.safetensors"), {{"v", Tensor::zeros({2, 2})}});
  CHECK_THROWS_WITH_AS(average_weights({d.file("a.safetensors"), d.file("shape.safetensors")}),
                       doctest::Contains("w is (2, 2) float32 in"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(average_weights({d.file("a.safetensors"), d.file("name.safetensors")}), doctest::Contains("holds w but"),
                       std::invalid_argument);
  CHECK_THROWS_AS(average_weights({}), std::invalid_argument);
}

TEST_CASE("train --average-last K keeps the last K epochs and writes their mean") {
  TempDir d;
  RunConfig c = gf::test::tiny_run(400);
  c.epochs = 3;
  c.average_last = 2;
  const TrainOptions o = gf::test::quiet_options(d.file("run"));
  train_translator(c, o);
  const std::vector<std::string> kept = epoch_weight_files(o.out);
  REQUIRE(kept.size() == 2);
  CHECK(fs::path(kept[0]).filename() == "epoch-0002.safetensors");
  CHECK(fs::path(kept[1]).filename() == "epoch-0003.safetensors");
  const auto a = load_safetensors(kept[0]).tensors, b = load_safetensors(kept[1]).tensors;
  const auto avg = load_safetensors(d.file("run/average.safetensors")).tensors;
  REQUIRE(avg.size() == a.size());
  const std::string name = "transformer.decoder.layers.0.linear1.weight";
  REQUIRE(avg.count(name));
  const float *pa = a.at(name).data<float>(), *pb = b.at(name).data<float>(), *pm = avg.at(name).data<float>();
  double max_diff = 0, changed = 0;
  for (int64_t k = 0; k < avg.at(name).numel(); ++k) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(pm[k]) - (static_cast<double>(pa[k]) + pb[k]) / 2));
    changed += pa[k] != pb[k];
  }
  CHECK(changed > 0);  // the two epochs differ, so the mean is a new point
  CHECK(max_diff < 1e-6);
}

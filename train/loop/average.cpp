#include "train/loop/average.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "tensor/check.h"
#include "tensor/io/safetensors.h"

namespace gf::train {
namespace fs = std::filesystem;

namespace {

void check_same_layout(const std::map<std::string, Tensor>& a, const std::string& file_a, const std::map<std::string, Tensor>& b,
                       const std::string& file_b) {
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    GF_CHECK(it != b.end(), "average: '{}' holds {} but '{}' does not", file_a, name, file_b);
    GF_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(), "average: {} is {} {} in '{}' but {} {} in '{}'", name,
             shape_str(t.shape()), dtype_name(t.dtype()), file_a, shape_str(it->second.shape()), dtype_name(it->second.dtype()), file_b);
  }
  for (const auto& [name, t] : b) GF_CHECK(a.count(name), "average: '{}' holds {} but '{}' does not", file_b, name, file_a);
}

}  // namespace

SafetensorsFile average_weights(const std::vector<std::string>& files) {
  GF_CHECK(!files.empty(), "average: no files to average");
  SafetensorsFile mean;
  std::map<std::string, Tensor> first;
  {
    SafetensorsFile f = load_safetensors(files[0]);
    first = std::move(f.tensors);
    mean.metadata = std::move(f.metadata);
  }
  std::map<std::string, Tensor> sum;  // float64 running sums
  for (const auto& [name, t] : first) sum[name] = t.to(DType::Float64).contiguous().clone();
  for (size_t i = 1; i < files.size(); ++i) {
    const std::map<std::string, Tensor> next = load_safetensors(files[i]).tensors;
    check_same_layout(first, files[0], next, files[i]);
    for (const auto& [name, t] : next) {
      const Tensor add = t.to(DType::Float64).contiguous();
      double* s = sum[name].data<double>();
      const double* x = add.data<double>();
      for (int64_t k = 0; k < add.numel(); ++k) s[k] += x[k];
    }
  }
  for (auto& [name, s] : sum) {
    double* p = s.data<double>();
    for (int64_t k = 0; k < s.numel(); ++k) p[k] /= static_cast<double>(files.size());
    mean.tensors[name] = s.to(first.at(name).dtype()).contiguous();
  }
  return mean;
}

std::string epoch_weight_file(const std::string& dir, int64_t epoch) { return (fs::path(dir) / fmt::format("epoch-{:04d}.safetensors", epoch)).string(); }

std::vector<std::string> epoch_weight_files(const std::string& dir, size_t last) {
  static const std::regex name("epoch-[0-9]{4,}\\.safetensors");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), name)) files.push_back(e.path().string());
  // Same width names sort by number; wider (epoch 10000+) after narrower.
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; });
  if (files.size() > last) files.erase(files.begin(), files.end() - static_cast<std::ptrdiff_t>(last));
  return files;
}

}  // namespace gf::train

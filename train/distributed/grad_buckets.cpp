#include "train/distributed/grad_buckets.h"

#include <algorithm>
#include <chrono>

#include "tensor/check.h"
#include "train/distributed/comm.h"

namespace gf::train::distributed {

GradientBuckets::GradientBuckets(std::vector<Variable> params, size_t bucket_bytes) : params_(std::move(params)) {
  const size_t per_bucket = std::max<size_t>(1, bucket_bytes / sizeof(float));
  Bucket cur;
  size_t elements = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    GF_CHECK(params_[i].dtype() == DType::Float32, "GradientBuckets: parameter {} {} is {}; gradients are reduced as float32", i,
             shape_str(params_[i].shape()), dtype_name(params_[i].dtype()));
    if (elements > 0 && elements + static_cast<size_t>(params_[i].numel()) > per_bucket) {
      cur.last = i;
      cur.flat.resize(elements);
      buckets_.push_back(std::move(cur));
      cur = Bucket{};
      cur.first = i;
      elements = 0;
    }
    elements += static_cast<size_t>(params_[i].numel());
  }
  if (elements > 0) {
    cur.last = params_.size();
    cur.flat.resize(elements);
    buckets_.push_back(std::move(cur));
  }
}

size_t GradientBuckets::bytes() const {
  size_t n = 0;
  for (const Bucket& b : buckets_) n += b.flat.size() * sizeof(float);
  return n;
}

void GradientBuckets::pack(Bucket& b) const {
  float* at = b.flat.data();
  for (size_t i = b.first; i < b.last; ++i) {
    const Tensor& g = params_[i].grad();
    const size_t n = static_cast<size_t>(params_[i].numel());
    if (g.defined()) {
      const Tensor c = g.contiguous();
      std::copy_n(c.data<float>(), n, at);
    } else {
      std::fill_n(at, n, 0.0f);
    }
    at += n;
  }
}

void GradientBuckets::unpack(const Bucket& b) {
  const float* at = b.flat.data();
  for (size_t i = b.first; i < b.last; ++i) {
    Tensor& g = params_[i].mutable_grad();
    if (!g.defined() || !g.is_contiguous()) g = Tensor::empty(params_[i].shape(), DType::Float32);
    const size_t n = static_cast<size_t>(params_[i].numel());
    std::copy_n(at, n, g.data<float>());
    at += n;
  }
}

void GradientBuckets::allreduce() {
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    pack(b);
    allreduce_sum(std::span<float>(b.flat));
    unpack(b);
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace gf::train::distributed

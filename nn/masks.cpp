#include "nn/masks.h"

#include <mutex>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::nn {

Tensor make_pad_mask(const Tensor& ids, int64_t pad) {
  check_dtype(ids, DType::Int64, "make_pad_mask");
  GF_CHECK(ids.ndim() == 2, "make_pad_mask: expected ids (B, S), got {}", shape_str(ids.shape()));
  Tensor c = ids.contiguous();
  Tensor mask = Tensor::empty(ids.shape(), DType::Bool);  // (B, S)
  const int64_t* p = c.data<int64_t>();
  bool* m = mask.data<bool>();
  for (int64_t i = 0; i < c.numel(); ++i) m[i] = p[i] == pad;
  return mask;
}

Tensor make_causal_mask(int64_t n) {
  static std::mutex mu;
  static Tensor cached;  // (N, N) for the longest N so far
  std::lock_guard<std::mutex> lock(mu);
  GF_CHECK(n >= 0, "make_causal_mask: negative size {}", n);
  if (!cached.defined() || cached.size(0) < n) {
    int64_t N = std::max<int64_t>(n, 64);
    Tensor t = Tensor::empty({N, N}, DType::Bool);
    bool* m = t.data<bool>();
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) m[i * N + j] = j > i;
    cached = t;
  }
  return cached.narrow(0, 0, n).narrow(1, 0, n);  // (n, n) view
}

}  // namespace gf::nn

#include "nn/positional_encoding.h"

#include <cmath>
#include <stdexcept>

#include "autograd/ops/arith.h"
#include "tensor/check.h"

namespace gf::nn {

PositionalEncoding::PositionalEncoding(int64_t d, int64_t max_len_) : d_model(d), max_len(max_len_) {
  // Computed in float64 (as the reference does under float64) and rounded for the float32 buffer.
  pe64_ = Tensor::zeros({max_len, d}, DType::Float64);  // (max_len, D)
  double* p = pe64_.data<double>();
  for (int64_t pos = 0; pos < max_len; ++pos)
    for (int64_t i = 0; i < d; i += 2) {
      double div = std::exp(static_cast<double>(i) * (-std::log(10000.0) / static_cast<double>(d)));
      double angle = static_cast<double>(pos) * div;
      p[pos * d + i] = std::sin(angle);
      if (i + 1 < d) p[pos * d + i + 1] = std::cos(angle);
    }
  register_buffer("pe", pe64_.to(DType::Float32));  // (max_len, D)
}

Tensor PositionalEncoding::table(int64_t offset, int64_t length, DType dtype) const {
  const Tensor& pe = dtype == DType::Float64 ? pe64_ : buffer("pe");
  GF_CHECK(offset + length <= pe.size(0), "PositionalEncoding: positions up to {} requested, but the table holds {}",
           offset + length, pe.size(0));
  return pe.narrow(0, offset, length).to(dtype);  // (length, D)
}

Variable PositionalEncoding::forward(const Variable& x, int64_t offset) const {
  GF_CHECK(x.ndim() == 3 && x.size(2) == d_model, "PositionalEncoding: expected (B, L, {}), got {}", d_model,
           shape_str(x.shape()));
  return x + Variable(table(offset, x.size(1), x.dtype()));  // (B, L, D)
}

}  // namespace gf::nn

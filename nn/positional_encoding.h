#pragma once
// Sinusoidal positions (Vaswani et al. 2017): pe[pos, 2i] = sin(pos / 10000^(2i/d)),
// pe[pos, 2i+1] = cos(pos / 10000^(2i/d)). A persistent buffer `pe`, as the reference keeps it.
#include "nn/module.h"

namespace gf::nn {

class PositionalEncoding : public Module {
 public:
  explicit PositionalEncoding(int64_t d_model, int64_t max_len = 512);
  // x + pe[offset : offset + L]; offset lets incremental decoding add one position at a time.
  Variable forward(const Variable& x, int64_t offset = 0) const;  // (B, L, D) -> (B, L, D)
  Tensor table(int64_t offset, int64_t length, DType dtype) const;  // (length, D)

  int64_t d_model, max_len;

 private:
  Tensor pe64_;  // (max_len, D) float64: exact positions for float64 runs
};

}  // namespace gf::nn

#pragma once
// A lookup table of vectors, as nn.Embedding: the padding_idx row starts at zero and never gets a
// gradient, so it stays zero.
#include "nn/module.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Generator& gen = default_generator());
  Variable forward(const Tensor& ids) const;  // int64 (...) -> (..., dim)

  Variable weight;  // (num_embeddings, dim)
  int64_t num_embeddings, embedding_dim, padding_idx;
};

}  // namespace gf::nn

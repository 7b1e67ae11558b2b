#include "nn/embedding.h"

#include <stdexcept>

#include "autograd/ops/indexing.h"
#include "tensor/check.h"

namespace gf::nn {

Embedding::Embedding(int64_t num, int64_t dim, int64_t pad, Generator& gen)
    : num_embeddings(num), embedding_dim(dim), padding_idx(pad) {
  GF_CHECK(pad < num, "Embedding: padding_idx {} >= num_embeddings {}", pad, num);
  Tensor w = kernels::randn({num, dim}, gen);  // (num, dim)
  if (pad >= 0) w.select(0, pad).zero_();
  weight = register_parameter("weight", w);
}

Variable Embedding::forward(const Tensor& ids) const { return index_select(weight, ids, padding_idx); }

}  // namespace gf::nn

#pragma once
// The position-wise feed-forward block: linear2(dropout(act(linear1(x)))). Transformer layers
// own linear1/linear2 directly (PyTorch's names) and call feed_forward(); FFN is the same block
// as a module of its own.
#include <memory>

#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/linear.h"

namespace gf::nn {

Variable feed_forward(const Variable& x, const Linear& linear1, const Linear& linear2, const ActivationKind& act, const Dropout* dropout);

class FFN : public Module {
 public:
  // activation: a name from nn/activation.h's list.
  FFN(int64_t d_model, int64_t dim_feedforward, const std::string& activation = "relu", double dropout = 0.0,
      Generator& gen = default_generator());
  Variable forward(const Variable& x) const;  // (..., d_model) -> (..., d_model)

  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout;
  const ActivationKind* activation;
};

}  // namespace gf::nn

#pragma once
// The Transformer encoder: layers as nn.TransformerEncoderLayer (batch-first; post-norm by default,
// pre-norm with norm_first) and the stack with its final LayerNorm, as nn.Transformer builds it.
#include <memory>

#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/module_list.h"
#include "nn/multihead_attention.h"

namespace gf::nn {

struct TransformerLayerOptions {
  int64_t d_model = 256, nhead = 4, dim_feedforward = 1024;
  double dropout = 0.1;
  Activation activation = Activation::ReLU;
  bool norm_first = false;
  double layer_norm_eps = 1e-5;
};

class TransformerEncoderLayer : public Module {
 public:
  // gen draws the initial weights (a seeded model is reproducible whatever else has drawn).
  explicit TransformerEncoderLayer(const TransformerLayerOptions& opt, Generator& gen = default_generator());
  // src (B, S, D); src_key_padding_mask (B, S); src_mask (S, S) optional.
  Variable forward(const Variable& src, const Tensor& src_key_padding_mask = Tensor(), const Tensor& src_mask = Tensor()) const;

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  TransformerLayerOptions options;
};

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& opt, int64_t num_layers, bool final_norm = true,
                     Generator& gen = default_generator());
  Variable forward(const Variable& src, const Tensor& src_key_padding_mask = Tensor(), const Tensor& mask = Tensor()) const;

  std::shared_ptr<ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

}  // namespace gf::nn

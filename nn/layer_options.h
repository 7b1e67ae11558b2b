#pragma once
// One description of a Transformer layer stack, shared by every model built from the layers (the
// encoder-decoder, the decoder-only model) and by the run config, which embeds it as is. Field
// names follow PyTorch's nn.TransformerEncoderLayer arguments where it has them.
#include <cstdint>
#include <string>

namespace gf::nn {

struct TransformerLayerOptions {
  int64_t d_model = 256;
  int64_t nhead = 4;
  // Key/value heads: 0 or nhead = multi-head attention; 1 = multi-query; between them, grouped-query
  // (each group of nhead / kv_heads query heads shares one key/value head). Must divide nhead.
  int64_t kv_heads = 0;
  int64_t dim_feedforward = 1024;
  std::string activation = "relu";  // a name from nn/activation.h's list
  std::string feedforward = "standard";  // a name from nn/ffn.h's list: the feed-forward block
  std::string norm = "layernorm";   // a name from nn/norm.h's list
  bool norm_first = false;          // true: Pre-LN (norm before each sub-layer); false: Post-LN
  double dropout = 0.1;
  double layer_norm_eps = 1e-5;     // the norm's eps (PyTorch's name, whatever the norm kind)

  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : nhead; }
  // Throws std::invalid_argument naming the first bad field and its value.
  void validate() const;
};

}  // namespace gf::nn

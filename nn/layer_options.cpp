#include "nn/layer_options.h"

#include "nn/activation.h"
#include "nn/ffn.h"
#include "nn/norm.h"
#include "tensor/check.h"

namespace gf::nn {

void TransformerLayerOptions::validate() const {
  GF_CHECK(d_model > 0, "layer options: d_model must be positive, got {}", d_model);
  GF_CHECK(nhead > 0, "layer options: nhead must be positive, got {}", nhead);
  GF_CHECK(d_model % nhead == 0, "layer options: d_model {} is not divisible by nhead {}", d_model, nhead);
  GF_CHECK(kv_heads == 0 || (kv_heads > 0 && nhead % kv_heads == 0),
           "layer options: kv_heads must divide nhead {} (1 = multi-query, {} = multi-head), got {}", nhead, nhead, kv_heads);
  GF_CHECK(dim_feedforward > 0, "layer options: dim_feedforward must be positive, got {}", dim_feedforward);
  GF_CHECK(dropout >= 0 && dropout < 1, "layer options: dropout must be in [0, 1), got {}", dropout);
  GF_CHECK(layer_norm_eps > 0, "layer options: layer_norm_eps must be positive, got {}", layer_norm_eps);
  find_activation(activation);      // throws naming the known ones
  find_feedforward(feedforward);    // idem
  make_norm(norm, 1, layer_norm_eps);  // idem
}

}  // namespace gf::nn

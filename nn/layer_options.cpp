#include "nn/layer_options.h"

#include <fmt/format.h>

#include <stdexcept>

#include "nn/activation.h"
#include "nn/norm.h"

namespace gf::nn {

void TransformerLayerOptions::validate() const {
  auto fail = [](const std::string& msg) { throw std::invalid_argument("layer options: " + msg); };
  if (d_model <= 0) fail(fmt::format("d_model must be positive, got {}", d_model));
  if (nhead <= 0) fail(fmt::format("nhead must be positive, got {}", nhead));
  if (d_model % nhead != 0) fail(fmt::format("d_model {} is not divisible by nhead {}", d_model, nhead));
  if (kv_heads < 0 || (kv_heads > 0 && nhead % kv_heads != 0))
    fail(fmt::format("kv_heads must divide nhead {} (1 = multi-query, {} = multi-head), got {}", nhead, nhead, kv_heads));
  if (dim_feedforward <= 0) fail(fmt::format("dim_feedforward must be positive, got {}", dim_feedforward));
  if (dropout < 0 || dropout >= 1) fail(fmt::format("dropout must be in [0, 1), got {}", dropout));
  if (!(layer_norm_eps > 0)) fail(fmt::format("layer_norm_eps must be positive, got {}", layer_norm_eps));
  find_activation(activation);      // throws naming the known ones
  make_norm(norm, 1, layer_norm_eps);  // idem
}

}  // namespace gf::nn

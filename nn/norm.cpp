#include "nn/norm.h"

#include "autograd/ops/arith.h"
#include "nn/dropout.h"
#include "nn/layer_norm.h"
#include "nn/registry.h"
#include "nn/rms_norm.h"
#include "nn/scale_norm.h"

namespace gf::nn {

namespace {

std::deque<NormKind>& kinds() {
  static std::deque<NormKind> kinds = {
      {"layernorm", "LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias (nn.LayerNorm)",
       [](int64_t d, double eps) -> std::shared_ptr<Norm> { return std::make_shared<LayerNorm>(d, eps); }},
      {"rmsnorm", "RMSNorm: x / sqrt(mean(x^2) + eps) * weight (Zhang and Sennrich 2019)",
       [](int64_t d, double eps) -> std::shared_ptr<Norm> { return std::make_shared<RMSNorm>(d, eps); }},
      {"scalenorm", "ScaleNorm: x * scale / sqrt(sum(x^2) + eps), one learned scalar (Nguyen and Salazar 2019)",
       [](int64_t d, double eps) -> std::shared_ptr<Norm> { return std::make_shared<ScaleNorm>(d, eps); }},
  };
  return kinds;
}

}  // namespace

Variable Norm::forward_residual(const Variable& x, const Variable& y, const Dropout& dropout) const { return forward(x + dropout.forward(y)); }

const std::deque<NormKind>& norm_kinds() { return kinds(); }

void register_norm(NormKind kind) { registry_add(kinds(), std::move(kind), "norm"); }

std::shared_ptr<Norm> make_norm(const std::string& name, int64_t d, double eps) { return registry_find(norm_kinds(), name, "norm").make(d, eps); }

std::string norm_names() { return registry_names(norm_kinds()); }

}  // namespace gf::nn

#pragma once
// y = x W^T + b, as nn.Linear: weight (out, in), bias (out).
#include "nn/module.h"
#include "tensor/kernels/random.h"

namespace gf::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator& gen = default_generator());
  Variable forward(const Variable& x) const;  // (..., in) -> (..., out)

  // σReparam (Zhai et al. 2023; nn/sigma_reparam.h): after use_sigma_reparam(), forward() uses
  // (γ / σ(W)) W, γ a new parameter "sigma_gamma" (1) initialised to σ(W), with the power
  // iteration's vector in the buffer "sigma_u" (in), advanced by training forwards that record a
  // graph. Call it before an optimizer is built from the parameters; twice is an error. Code that
  // reads `weight` directly (a fused loss) does not see the reparametrisation.
  void use_sigma_reparam();
  bool sigma_reparam() const { return sigma_reparam_; }
  Variable effective_weight() const;  // the weight forward() uses: W, or (γ / σ(W)) W (advancing u as forward does)

  Variable weight;  // (out, in)
  Variable bias;    // (out) or undefined
  int64_t in_features, out_features;

 private:
  bool sigma_reparam_ = false;
};

}  // namespace gf::nn

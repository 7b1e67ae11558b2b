#pragma once
// Finite-difference gradient checking, in float64.
#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace gf {

struct GradcheckResult {
  bool ok = true;
  double worst_abs = 0;   // largest |analytic - numeric|
  double worst_rel = 0;   // that error over max(|numeric|, tiny)
  std::string report;     // the worst element: input, index, analytic, numeric (or the failure)
};

// fn maps the inputs to one output. Analytic gradients of sum(output * v) for a fixed random v
// (v = 1 for a scalar output) are compared with central differences (f(x+eps) - f(x-eps)) / 2eps
// for every element of every float64 input that requires grad; inputs may be non-contiguous
// views. An element passes when |a - n| <= atol + rtol * |n|.
GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& fn,
                          const std::vector<Variable>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-3);

}  // namespace gf

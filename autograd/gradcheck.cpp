#include "autograd/gradcheck.h"

#include <cmath>
#include <random>
#include <sstream>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "tensor/check.h"

namespace gf {
namespace {

// sum(out * v) in float64.
double weighted_sum(const Tensor& out, const Tensor& v) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += out.flat_get(i) * v.flat_get(i);
  return s;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& fn,
                          const std::vector<Variable>& inputs, double eps, double atol, double rtol) {
  GradcheckResult r;
  for (const auto& in : inputs)
    GF_CHECK(!in.requires_grad() || in.dtype() == DType::Float64,
             "gradcheck: inputs that require grad must be float64, got {} {}", dtype_name(in.dtype()), shape_str(in.shape()));
  for (const auto& in : inputs)
    if (in.requires_grad()) const_cast<Variable&>(in).zero_grad();

  Variable out = fn(inputs);
  GF_CHECK(out.dtype() == DType::Float64, "gradcheck: output must be float64, got {} {}", dtype_name(out.dtype()),
           shape_str(out.shape()));
  Tensor v = Tensor::ones(out.shape(), DType::Float64);
  if (out.numel() > 1) {
    std::mt19937_64 rng(1234);
    std::normal_distribution<double> nd;
    for (int64_t i = 0; i < v.numel(); ++i) v.flat_set(i, nd(rng));
  }
  out.backward(v);

  double worst_excess = -INFINITY;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Variable& in = inputs[k];
    if (!in.requires_grad()) continue;
    Tensor data = in.data();  // shares storage: flat_set perturbs the input in place
    Tensor analytic = in.grad();
    for (int64_t i = 0; i < data.numel(); ++i) {
      const double x0 = data.flat_get(i);
      double fp, fm;
      {
        NoGradGuard ng;
        data.flat_set(i, x0 + eps);
        fp = weighted_sum(fn(inputs).data(), v);
        data.flat_set(i, x0 - eps);
        fm = weighted_sum(fn(inputs).data(), v);
        data.flat_set(i, x0);
      }
      const double numeric = (fp - fm) / (2 * eps);
      const double a = analytic.defined() ? analytic.flat_get(i) : 0.0;
      const double err = std::abs(a - numeric);
      // How far past its tolerance this element is; the worst one is reported.
      const double excess = std::isnan(err) ? INFINITY : err - (atol + rtol * std::abs(numeric));
      r.worst_abs = std::max(r.worst_abs, std::isnan(err) ? INFINITY : err);
      r.worst_rel = std::max(r.worst_rel, err / std::max(std::abs(numeric), 1e-12));
      if (excess > worst_excess) {
        worst_excess = excess;
        std::ostringstream os;
        os.precision(10);
        os << "input " << k << " " << shape_str(data.shape()) << " element " << i << ": analytic " << a << ", numeric "
           << numeric << ", |diff| " << err;
        r.report = os.str();
      }
    }
  }
  r.ok = worst_excess <= 0;
  if (r.report.empty()) r.report = "no input requires grad";
  return r;
}

}  // namespace gf

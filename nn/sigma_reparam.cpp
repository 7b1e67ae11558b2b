#include "nn/sigma_reparam.h"

#include <cmath>

#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "tensor/check.h"

namespace gf::nn::sigma_reparam {
namespace {

void normalise(std::vector<double>& x) {
  double n = 0;
  for (double e : x) n += e * e;
  n = std::sqrt(n);
  if (n > 0)
    for (double& e : x) e /= n;
}

// One power-iteration step on w (R, C) from u (C): v = w u / |w u|, then u = w^T v / |w^T v|.
// Returns v^T w u, the spectral norm estimate. A zero vector stays zero (and the estimate is 0).
double power_step(const Tensor& w, std::vector<double>& u, std::vector<double>& v) {
  const int64_t R = w.size(0), C = w.size(1);
  const double* p = w.data<double>();
  v.assign(static_cast<size_t>(R), 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) v[i] += p[i * C + j] * u[j];
  normalise(v);
  std::fill(u.begin(), u.end(), 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) u[j] += p[i * C + j] * v[i];
  normalise(u);
  double s = 0;
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) s += v[i] * p[i * C + j] * u[j];
  return s;
}

}  // namespace

double initial_sigma(const Tensor& w_in, std::vector<double>& u) {
  GF_CHECK(w_in.ndim() == 2, "σReparam: the weight must be a matrix, got {}", shape_str(w_in.shape()));
  const Tensor w = w_in.to(DType::Float64).contiguous();  // (rows, cols)
  const int64_t C = w.size(1);
  // A start with no special direction, then enough steps to converge: the spectral gap of a random
  // square matrix is small, and each step shrinks the error by about (second / first singular value)^2.
  u.assign(static_cast<size_t>(C), 0.0);
  for (int64_t j = 0; j < C; ++j) u[j] = 1.0 + 0.5 * std::sin(1.7 * static_cast<double>(j + 1));
  std::vector<double> v;
  double sigma = 0;
  for (int it = 0; it < 200; ++it) sigma = power_step(w, u, v);
  GF_CHECK(sigma > 0, "σReparam: the weight {} is zero", shape_str(w_in.shape()));
  return sigma;
}

Variable reparametrise(const Variable& w, Tensor u_stored, const Variable& gamma, bool advance) {
  const Tensor wd = w.data().to(DType::Float64).contiguous();  // (rows, cols)
  const int64_t R = wd.size(0), C = wd.size(1);
  GF_CHECK(u_stored.numel() == C, "σReparam: the stored vector has {} values for a weight {}", u_stored.numel(), shape_str(w.shape()));
  std::vector<double> u(static_cast<size_t>(C)), v;
  for (int64_t j = 0; j < C; ++j) u[j] = u_stored.flat_get(j);
  power_step(wd, u, v);
  if (advance)
    for (int64_t j = 0; j < C; ++j) u_stored.flat_set(j, u[j]);
  Tensor outer = Tensor::empty({R, C}, DType::Float64);  // (rows, cols): v u^T, constant
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) outer.data<double>()[i * C + j] = v[i] * u[j];
  const Variable sigma = sum(w * Variable(outer.to(w.dtype())));  // (): v^T W u
  return w * (gamma / sigma);                                      // (rows, cols)
}

}  // namespace gf::nn::sigma_reparam

#include "tensor/kernels/unary.h"

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "tensor/kernels/fast_math.h"
#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::kernels {
namespace {

// Transcendental functions cost several adds per element even vectorised, so they go parallel sooner.
constexpr int64_t kCheapGrain = kSerialGrain;
constexpr int64_t kCostlyGrain = kSerialGrain / 4;

// out[i] = f(x[i]); f is a generic lambda called with T = float or double.
template <class F>
Tensor map1(const Tensor& x_in, const char* op, int64_t grain, F f) {
  check_defined(x_in, op);
  return dispatch_float(x_in.dtype(), op, [&]<class T>() {
    Tensor x = x_in.contiguous();  // dense rows: free when already row-major
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(px[i]);
    });
    return out;
  });
}

// out[i] = f(g[i], s[i]) for an upstream gradient g and a saved tensor s of the same shape.
template <class F>
Tensor map2(const Tensor& g_in, const Tensor& s_in, const char* op, int64_t grain, F f) {
  check_same_dtype(g_in, s_in, op);
  GF_CHECK(g_in.shape() == s_in.shape(), "{}: gradient {} and saved tensor {} differ in shape", op, shape_str(g_in.shape()),
           shape_str(s_in.shape()));
  return dispatch_float(g_in.dtype(), op, [&]<class T>() {
    Tensor g = g_in.contiguous(), s = s_in.contiguous();
    Tensor out = Tensor::empty(g.shape(), g.dtype());
    const T* pg = g.data<T>();
    const T* ps = s.data<T>();
    T* po = out.data<T>();
    parallel_for(g.numel(), grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pg[i], ps[i]);
    });
    return out;
  });
}

constexpr double kInvSqrt2 = 0.70710678118654752440;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// float32 takes the vectorisable versions; float64 the std:: ones (fast::exp has both overloads).
template <class T>
T tanh_of(T v) {
  if constexpr (std::is_same_v<T, float>) return fast::tanh(v);
  else return std::tanh(v);
}
template <class T>
T normal_cdf_of(T v) {  // Phi(v)
  if constexpr (std::is_same_v<T, float>) return fast::normal_cdf(v);
  else return 0.5 * (1.0 + std::erf(v * kInvSqrt2));
}

}  // namespace

Tensor exp(const Tensor& x) {
  return map1(x, "exp", kCostlyGrain, [](auto v) { return fast::exp(v); });
}

Tensor log(const Tensor& x) {
  return map1(x, "log", kCostlyGrain, [](auto v) { return std::log(v); });
}

Tensor sqrt(const Tensor& x) {
  return map1(x, "sqrt", kCheapGrain, [](auto v) { return std::sqrt(v); });
}

Tensor pow(const Tensor& x, double p) {
  // Squares are common (variances, L2 terms): skip the general pow for them.
  if (p == 2.0) return map1(x, "pow", kCheapGrain, [](auto v) { return v * v; });
  if (p == 1.0) return map1(x, "pow", kCheapGrain, [](auto v) { return v; });
  return map1(x, "pow", kCostlyGrain, [p](auto v) {
    using T = decltype(v);
    return static_cast<T>(std::pow(static_cast<double>(v), p));
  });
}

Tensor tanh(const Tensor& x) {
  return map1(x, "tanh", kCostlyGrain, [](auto v) { return tanh_of(v); });
}

Tensor relu(const Tensor& x) {
  // Testing v < 0 (not v > 0) lets NaN pass through, as PyTorch's relu does.
  return map1(x, "relu", kCheapGrain, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
}

Tensor gelu(const Tensor& x) {
  return map1(x, "gelu", kCostlyGrain, [](auto v) { return v * normal_cdf_of(v); });
}

Tensor sigmoid(const Tensor& x) {
  return map1(x, "sigmoid", kCostlyGrain, [](auto v) {
    using T = decltype(v);
    // e^-|v| never overflows; both branches are the same function.
    const T e = fast::exp(-std::abs(v));
    return v >= 0 ? static_cast<T>(1) / (static_cast<T>(1) + e) : e / (static_cast<T>(1) + e);
  });
}

Tensor exp_backward(const Tensor& g, const Tensor& y) {
  return map2(g, y, "exp_backward", kCheapGrain, [](auto gv, auto yv) { return gv * yv; });
}

Tensor log_backward(const Tensor& g, const Tensor& x) {
  return map2(g, x, "log_backward", kCheapGrain, [](auto gv, auto xv) { return gv / xv; });
}

Tensor sqrt_backward(const Tensor& g, const Tensor& y) {
  return map2(g, y, "sqrt_backward", kCheapGrain, [](auto gv, auto yv) { return gv / (yv + yv); });
}

Tensor pow_backward(const Tensor& g, const Tensor& x, double p) {
  // p = 0 would give 0 * x^-1 = NaN at x = 0; the true derivative is 0 everywhere.
  if (p == 0.0) return map2(g, x, "pow_backward", kCheapGrain, [](auto gv, auto) { return gv * 0; });
  if (p == 1.0) return map2(g, x, "pow_backward", kCheapGrain, [](auto gv, auto) { return gv; });
  if (p == 2.0) return map2(g, x, "pow_backward", kCheapGrain, [](auto gv, auto xv) { return 2 * gv * xv; });
  return map2(g, x, "pow_backward", kCostlyGrain, [p](auto gv, auto xv) {
    using T = decltype(gv);
    return static_cast<T>(static_cast<double>(gv) * p * std::pow(static_cast<double>(xv), p - 1.0));
  });
}

Tensor tanh_backward(const Tensor& g, const Tensor& y) {
  return map2(g, y, "tanh_backward", kCheapGrain, [](auto gv, auto yv) { return gv * (1 - yv * yv); });
}

Tensor relu_backward(const Tensor& g, const Tensor& y) {
  return map2(g, y, "relu_backward", kCheapGrain, [](auto gv, auto yv) { return yv > 0 ? gv : decltype(gv)(0); });
}

Tensor gelu_backward(const Tensor& g, const Tensor& x) {
  return map2(g, x, "gelu_backward", kCostlyGrain, [](auto gv, auto xv) {
    using T = decltype(gv);
    const T pdf = static_cast<T>(kInvSqrt2Pi) * fast::exp(static_cast<T>(-0.5) * xv * xv);  // phi(x)
    return gv * (normal_cdf_of(xv) + xv * pdf);
  });
}

Tensor sigmoid_backward(const Tensor& g, const Tensor& y) {
  return map2(g, y, "sigmoid_backward", kCheapGrain, [](auto gv, auto yv) { return gv * yv * (1 - yv); });
}

}  // namespace gf::kernels

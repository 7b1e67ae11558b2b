#pragma once
// float32 exp, tanh and erfc as straight-line arithmetic, so that GCC vectorises loops over them
// (16 lanes with AVX-512). glibc's expf/tanhf/erff are opaque calls that the compiler vectorises
// only under -ffast-math, which this project does not use. The float64 paths of the kernels keep
// the std:: functions (they serve gradient checks, where accuracy matters more than speed).
//
// fast::exp is the library's one float32 exp: softmax, log-softmax, cross-entropy, the fused
// attention op, cached decoding's attend_one and the unary ops all call it, so training and
// decoding compute a softmax with the same arithmetic. fast::exp(double) is std::exp, so a kernel
// templated on T calls fast::exp for both precisions.
//
// Relative error against double-precision references: exp below 1.5e-7 (about 1 ulp) wherever
// the result is a normal float, checked over a sweep of the whole float range in
// tests/test_fast_math.cpp; subnormal results (x in [-103.3, -87.3]) keep their bits rather than
// flushing to 0, with an absolute error of at most 1 subnormal step. tanh about 1 ulp;
// normal_cdf below 2.5e-6 for |x| < 5 (1.8e-6 when the compiler fuses multiply-adds into FMAs,
// 2.25e-6 when it does not), growing to 2e-5 where Phi(x) nears float's underflow (x = -13),
// because z^2 is rounded before the exponential (tests/test_unary.cpp). +-inf and NaN behave
// like the std:: functions.
#include <bit>
#include <cmath>
#include <cstdint>

namespace gf::fast {

// e^x. Write x = n ln2 + r with |r| <= ln2/2; e^r comes from a degree-7 polynomial (Cephes'
// minimax coefficients) and 2^n from exponent bits. ln2 is split in a short high part and a low
// part (Cody-Waite) so that n * ln2_hi is exact and r keeps full precision. 2^n is applied as two
// halves so that every factor is a normal float even when the result is subnormal.
inline float exp(float x) {
  const bool nan = x != x;
  // Beyond this range the result is 0 or inf anyway; clamping keeps n's conversion defined.
  float xc = nan ? 0.0f : (x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x));
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * z + r + 1.0f;
  const int32_t k = static_cast<int32_t>(n);  // in [-151, 129]
  const int32_t k1 = k >> 1, k2 = k - k1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  const float y = er * s1 * s2;
  return nan ? x : y;
}
// The float64 path: libm's exp (float64 is the precision reference of the gradient checks).
inline double exp(double x) { return std::exp(x); }

// tanh(x): an odd polynomial near 0 (Cephes' coefficients; avoids the cancellation in 1 - e),
// else 1 - 2 / (e^{2|x|} + 1) with x's sign.
inline float tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float big = std::copysign(1.0f - 2.0f / (exp(2.0f * a) + 1.0f), x);
  return a < 0.625f ? std::copysign(small, x) : big;  // copysign keeps tanh(-0) = -0
}

// erfc(z) for z >= 0 with small relative error even far in the tail: the Chebyshev-fitted form
// erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), whose relative error is below 1.2e-7 in exact
// arithmetic (Press et al., Numerical Recipes, sec. 6.2).
inline float erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp(p - z * z);
}

// Phi(x), the standard normal CDF, accurate in relative terms in the lower tail too.
inline float normal_cdf(float x) {
  const float c = erfc_nonneg(std::fabs(x) * 0.70710678118654752f);  // erfc(|x| / sqrt 2)
  return x >= 0.0f ? 1.0f - 0.5f * c : 0.5f * c;
}

}  // namespace gf::fast

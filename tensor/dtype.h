#pragma once
// Element types a Tensor can hold. float32 trains, float64 checks gradients and parity,
// int64 holds token ids and bool holds masks (true = blocked). bfloat16 holds the operands of
// matrix products under --precision bf16 (tensor/kernels/bf16.h): a storage format only, so it is
// not is_floating() and no op but those products and conversions accepts it.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tensor/check.h"

namespace gf {

// bfloat16: float32's sign and 8-bit exponent with 7 stored significand bits (unit roundoff 2^-8).
// From float32 by round to nearest even; float32 subnormals (below 2^-126) become a signed zero, as
// AVX512-BF16's conversion instructions make them, so that this scalar form and the vector kernels
// (tensor/kernels/bf16.cpp) give the same bits. NaN stays NaN. From float64 the rounding is exact too
// (round to odd into float32 first, which a second rounding to 8 bits cannot spoil).
inline uint16_t bf16_bits_from_float(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero or subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN, kept quiet
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (overflows to infinity as it should)
  return static_cast<uint16_t>(u >> 16);
}
inline float float_from_bf16_bits(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// float32 nearest to d by round to odd: rounding that to 8 bits gives d rounded once (float32 keeps
// more than 8 + 2 bits, so no tie of the second rounding is an artefact of the first).
inline float round_to_odd_float(double d) {
  const float f = static_cast<float>(d);
  if (!std::isfinite(f) || static_cast<double>(f) == d) return f;
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::abs(static_cast<double>(f)) > std::abs(d)) --u;  // the neighbour towards zero: truncation
  return std::bit_cast<float>(u | 1u);
}

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  template <class V>
    requires std::is_arithmetic_v<V>
  explicit bfloat16(V v)
      : bits(bf16_bits_from_float(std::is_same_v<V, double> ? round_to_odd_float(static_cast<double>(v)) : static_cast<float>(v))) {}
  explicit operator float() const { return float_from_bf16_bits(bits); }
  template <class V>
    requires std::is_arithmetic_v<V>
  explicit operator V() const {
    return static_cast<V>(float_from_bf16_bits(bits));
  }
};

enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
    case DType::BFloat16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BFloat16; }

// Calls f.template operator()<T>() with T = float or double; anything else is an error naming op.
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: GF_FAIL("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(t));
  }
}

// Like dispatch_float, plus int64, bool and bfloat16 (for copies, views, conversions and comparisons).
template <class F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Bool: return f.template operator()<bool>();
    case DType::BFloat16: return f.template operator()<bfloat16>();
  }
  GF_FAIL_AS(std::logic_error, "dispatch_all: bad dtype {}", static_cast<int>(t));
}

}  // namespace gf

#pragma once
// Element types a Tensor can hold. float32 trains, float64 checks gradients and parity,
// int64 holds token ids and bool holds masks (true = blocked).
#include <cstddef>
#include <cstdint>

#include "tensor/check.h"

namespace gf {

enum class DType : uint8_t { Float32, Float64, Int64, Bool };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// Calls f.template operator()<T>() with T = float or double; anything else is an error naming op.
template <class F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    default: GF_FAIL("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(t));
  }
}

// Like dispatch_float, plus int64 and bool (for copies, views and comparisons).
template <class F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Bool: return f.template operator()<bool>();
  }
  GF_FAIL_AS(std::logic_error, "dispatch_all: bad dtype {}", static_cast<int>(t));
}

}  // namespace gf

#include "tensor/kernels/random.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/parallel.h"

namespace gf {

uint64_t Generator::next_below(uint64_t n) {
  GF_CHECK(n > 0, "Generator::next_below: n must be positive, got 0");
  // Reject the top partial block of 2^64 so that every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    uint64_t x = next_u64();
    if (x < limit) return x % n;
  }
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

namespace kernels {
namespace {

// Runs fill(dense_pointer, count) on a dense buffer, then copies into t if t is a strided view.
template <class F>
void fill_dense(Tensor& t, const char* op, F&& fill) {
  Tensor dense = t.is_contiguous() ? t : Tensor::empty(t.shape(), t.dtype());
  dispatch_float(t.dtype(), op, [&]<class T>() { fill(dense.data<T>(), dense.numel()); });
  if (!t.is_contiguous()) t.copy_(dense);
}

// out[i] = x[i] * (mask[i] ? s : 0) for i in [b, e), written as x * (s * 0 or 1): the same
// value bit for bit, but the compiler vectorises a byte-to-float conversion and not the select
// (3x faster). x * 0 rather than a plain 0 for a dropped element keeps a NaN input visible, as
// in PyTorch.
template <class T>
void scale_by_mask(const T* x, const bool* mask, T s, T* out, int64_t b, int64_t e) {
  static_assert(sizeof(bool) == 1);
  const auto* m = reinterpret_cast<const unsigned char*>(mask);  // a bool is one byte, 0 or 1
  for (int64_t i = b; i < e; ++i) out[i] = x[i] * (s * static_cast<T>(m[i]));
}

// out[i] = g[i] * s where y[i] > 0, else 0, for i in [b, e). A function of its own, with s by
// value: inside a lambda capturing s by reference the compiler must assume each store to out may
// change s, and the loop ran 16x slower, unvectorised.
template <class T>
void pass_where_positive(const T* g, const T* y, T s, T* out, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = y[i] > 0 ? g[i] * s : T(0);
}

// The same from a bfloat16 output's bits: positive is sign 0, not zero, not NaN (magnitude in
// (0, 0x7f80]: +inf counts, as inf > 0).
void pass_where_positive_bits(const float* g, const uint16_t* y, float s, float* out, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) {
    const uint16_t v = y[i];
    out[i] = v != 0 && v <= 0x7f80u ? g[i] * s : 0.0f;
  }
}

constexpr int64_t kMaskChunk = 1024;  // elements per mask-then-apply chunk: stays in L1

}  // namespace

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  check_defined(t, "uniform_");
  GF_CHECK(lo <= hi, "uniform_: lo {} exceeds hi {} (tensor {})", lo, hi, shape_str(t.shape()));
  fill_dense(t, "uniform_", [&]<class T>(T* p, int64_t n) {
    const uint64_t base = gen.reserve(static_cast<uint64_t>(n));
    const double width = hi - lo;
    parallel_for(n, kSerialGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(lo + width * Generator::to_unit(gen.at(base + i)));
    });
  });
}

void normal_(Tensor& t, double mean, double stddev, Generator& gen) {
  check_defined(t, "normal_");
  GF_CHECK(stddev >= 0, "normal_: stddev {} is negative (tensor {})", stddev, shape_str(t.shape()));
  fill_dense(t, "normal_", [&]<class T>(T* p, int64_t n) {
    // Box-Muller turns the two uniforms of pair j into elements 2j and 2j+1.
    const int64_t pairs = (n + 1) / 2;
    const uint64_t base = gen.reserve(2 * static_cast<uint64_t>(pairs));
    parallel_for(pairs, kSerialGrain / 2, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const double u1 = 1.0 - Generator::to_unit(gen.at(base + 2 * j));  // (0, 1]: log stays finite
        const double u2 = Generator::to_unit(gen.at(base + 2 * j + 1));
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double angle = 2.0 * std::numbers::pi * u2;
        p[2 * j] = static_cast<T>(mean + stddev * r * std::cos(angle));
        if (2 * j + 1 < n) p[2 * j + 1] = static_cast<T>(mean + stddev * r * std::sin(angle));
      }
    });
  });
}

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);  // (shape)
  uniform_(t, lo, hi, gen);
  return t;
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);  // (shape)
  normal_(t, 0.0, 1.0, gen);
  return t;
}

Tensor keep_mask(const Shape& shape, double p, Generator& gen) {
  GF_CHECK(p >= 0.0 && p <= 1.0, "keep_mask: drop probability {} is outside [0, 1] (shape {})", p, shape_str(shape));
  Tensor mask = Tensor::empty(shape, DType::Bool);  // (shape)
  bool* m = mask.data<bool>();
  const int64_t n = mask.numel();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(n)), threshold = keep_threshold(p);
  parallel_for(n, kSerialGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) m[i] = keeps(gen.at(base + i), threshold);
  });
  return mask;
}

Tensor apply_mask(const Tensor& x, const Tensor& mask, double scale) {
  check_dtype(mask, DType::Bool, "apply_mask");
  GF_CHECK(mask.shape() == x.shape(), "apply_mask: mask {} does not match input {}", shape_str(mask.shape()),
           shape_str(x.shape()));
  Tensor xc = x.contiguous(), mc = mask.contiguous();  // (shape), (shape)
  Tensor out = Tensor::empty(x.shape(), x.dtype());     // (shape)
  dispatch_float(x.dtype(), "apply_mask", [&]<class T>() {
    const T* px = xc.data<T>();
    const bool* pm = mc.data<bool>();
    T* po = out.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for(out.numel(), kSerialGrain, [&](int64_t b, int64_t e) { scale_by_mask(px, pm, s, po, b, e); });
  });
  return out;
}

Tensor dropout_forward(const Tensor& x, double p, double scale, Generator& gen, Tensor& mask) {
  GF_CHECK(p >= 0.0 && p <= 1.0, "dropout_forward: drop probability {} is outside [0, 1] (input {})", p, shape_str(x.shape()));
  Tensor xc = x.contiguous();                         // (shape)
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // (shape)
  mask = Tensor::empty(x.shape(), DType::Bool);      // (shape)
  bool* m = mask.data<bool>();
  const uint64_t base = gen.reserve(static_cast<uint64_t>(out.numel())), threshold = keep_threshold(p);
  dispatch_float(x.dtype(), "dropout_forward", [&]<class T>() {
    const T* px = xc.data<T>();
    T* po = out.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for(out.numel(), kSerialGrain, [&](int64_t b, int64_t e) {
      // Two tight loops per cache-sized chunk vectorise; one loop doing both ran 5x slower.
      for (int64_t c = b; c < e; c += kMaskChunk) {
        const int64_t ce = std::min(c + kMaskChunk, e);
        for (int64_t i = c; i < ce; ++i) m[i] = keeps(gen.at(base + i), threshold);
        scale_by_mask(px, m, s, po, c, ce);
      }
    });
  });
  return out;
}

Tensor relu_dropout_forward(const Tensor& x, double p, double scale, Generator& gen, Tensor* out_bf16) {
  GF_CHECK(p >= 0.0 && p <= 1.0, "relu_dropout_forward: drop probability {} is outside [0, 1] (input {})", p, shape_str(x.shape()));
  GF_CHECK(!out_bf16 || x.dtype() == DType::Float32, "relu_dropout_forward: a bfloat16 copy of the output needs float32 input, got {}",
           dtype_name(x.dtype()));
  Tensor xc = x.contiguous();                         // (shape)
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // (shape)
  if (out_bf16) *out_bf16 = Tensor::empty(x.shape(), DType::BFloat16);  // (shape)
  bfloat16* pb = out_bf16 ? out_bf16->data<bfloat16>() : nullptr;
  const uint64_t base = gen.reserve(static_cast<uint64_t>(out.numel())), threshold = keep_threshold(p);
  dispatch_float(x.dtype(), "relu_dropout_forward", [&]<class T>() {
    const T* px = xc.data<T>();
    T* po = out.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for(out.numel(), kSerialGrain, [&](int64_t b, int64_t e) {
      unsigned char keep[kMaskChunk];
      for (int64_t c = b; c < e; c += kMaskChunk) {
        const int64_t ce = std::min(c + kMaskChunk, e);
        for (int64_t i = c; i < ce; ++i) keep[i - c] = keeps(gen.at(base + i), threshold);
        // relu as kernels::relu (v < 0 ? 0 : v lets NaN through), then dropout's x * (s * 0 or 1).
        for (int64_t i = c; i < ce; ++i) po[i] = (px[i] < 0 ? T(0) : px[i]) * (s * static_cast<T>(keep[i - c]));
        if constexpr (std::is_same_v<T, float>)
          if (pb) to_bf16(po + c, pb + c, ce - c);
      }
    });
  });
  return out;
}

Tensor relu_dropout_backward(const Tensor& g, const Tensor& out, double scale) {
  GF_CHECK(g.shape() == out.shape(), "relu_dropout_backward: gradient {} does not match output {}", shape_str(g.shape()),
           shape_str(out.shape()));
  Tensor gc = g.contiguous(), oc = out.contiguous();  // (shape), (shape)
  Tensor gx = Tensor::empty(g.shape(), g.dtype());     // (shape)
  if (out.dtype() == DType::BFloat16) {  // the output's bfloat16 copy: its sign is the float32 output's
    check_dtype(g, DType::Float32, "relu_dropout_backward");
    const float* pg = gc.data<float>();
    const uint16_t* po = reinterpret_cast<const uint16_t*>(oc.data<bfloat16>());
    float* px = gx.data<float>();
    const float s = static_cast<float>(scale);
    parallel_for(gx.numel(), kSerialGrain, [&](int64_t b, int64_t e) { pass_where_positive_bits(pg, po, s, px, b, e); });
    return gx;
  }
  check_same_dtype(g, out, "relu_dropout_backward");
  dispatch_float(g.dtype(), "relu_dropout_backward", [&]<class T>() {
    const T *pg = gc.data<T>(), *po = oc.data<T>();
    T* px = gx.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for(gx.numel(), kSerialGrain, [&](int64_t b, int64_t e) { pass_where_positive(pg, po, s, px, b, e); });
  });
  return gx;
}

}  // namespace kernels
}  // namespace gf

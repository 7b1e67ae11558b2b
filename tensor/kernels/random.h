#pragma once
// Seeded random numbers: a small counter-based Generator and the tensor fills built on it
// (weight init, dropout masks, test data).
//
// The generator is SplitMix64 (Steele, Lea and Flood, 2014) read as a counter-based generator:
// the n-th number of a stream is mix64(seed + n * gamma) (tensor/mix64.h). Any element can therefore be computed
// on its own, so a fill split across threads gives exactly the numbers of a serial fill: results
// depend on the seed and the order of calls, never on the thread count.
#include <cmath>
#include <cstdint>

#include "tensor/mix64.h"
#include "tensor/tensor.h"

namespace gf {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x2545F4914F6CDD1DULL) { this->seed(seed); }

  // Restarts the stream.
  void seed(uint64_t s) {
    seed_ = s;
    counter_ = 0;
  }
  uint64_t initial_seed() const { return seed_; }
  // How many numbers have been drawn since seed() (the stream position).
  uint64_t offset() const { return counter_; }

  // Claims the next n numbers of the stream and returns the position of the first; a parallel
  // fill then computes number (base + i) with at(base + i).
  uint64_t reserve(uint64_t n) {
    uint64_t base = counter_;
    counter_ += n;
    return base;
  }
  // The stream's number at a position (no state change).
  uint64_t at(uint64_t position) const { return mix64(seed_ + (position + 1) * kGamma); }

  // Serial draws, for small uses (shuffles, sampling).
  uint64_t next_u64() { return at(reserve(1)); }
  double next_double() { return to_unit(next_u64()); }  // [0, 1)
  // Uniform integer in [0, n) (n > 0), by rejection so that every value is equally likely.
  uint64_t next_below(uint64_t n);

  // 53 random bits as a double in [0, 1).
  static double to_unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

 private:
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;  // 2^64 / golden ratio, odd
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;
};

// A process-wide generator for callers that do not carry their own.
Generator& default_generator();

namespace kernels {

// In place, any layout: uniform in [lo, hi), and normal(mean, stddev) by Box-Muller.
void uniform_(Tensor& t, double lo, double hi, Generator& gen);
void normal_(Tensor& t, double mean, double stddev, Generator& gen);

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::Float32);  // standard normal

// Dropout's pieces. keep_mask: a bool tensor, true (kept) with probability 1 - p. apply_mask:
// x * scale where mask is true, 0 where it is false (mask of x's shape), in one pass.
Tensor keep_mask(const Shape& shape, double p, Generator& gen);
Tensor apply_mask(const Tensor& x, const Tensor& mask, double scale);
// Both in one pass: the mask keep_mask(x.shape(), p, gen) would draw (into `mask`) and
// apply_mask(x, mask, scale), with the same numbers of the stream.
Tensor dropout_forward(const Tensor& x, double p, double scale, Generator& gen, Tensor& mask);

// dropout(relu(x)) in one pass, drawing what dropout_forward(relu(x), ...) would: out =
// relu(x) * (scale or 0). Its backward needs only out: an element passes the gradient (times
// scale) exactly where out > 0, i.e. where relu passed and dropout kept it. The feed-forward
// layer's hidden activation thus keeps one tensor for backward, not relu's output and a mask.
// out_bf16, if given (float32 x only), receives the output rounded to bfloat16 (as to_bf16), chunk
// by chunk as it is written.
Tensor relu_dropout_forward(const Tensor& x, double p, double scale, Generator& gen, Tensor* out_bf16 = nullptr);
// g * scale where out > 0, else 0. out may be the output's bfloat16 copy (float32 g): rounding keeps
// every sign, and only a float32 output below 2^-126, which bfloat16 flushes to 0, stops its
// gradient (under --precision bf16 the op keeps that copy, not the float32 output).
Tensor relu_dropout_backward(const Tensor& g, const Tensor& out, double scale);

// One element's keep decision, to_unit(bits) >= p, made on the integer: to_unit is
// (bits >> 11) * 2^-53 and p * 2^53 is exact, so (bits >> 11) >= ceil(p * 2^53) is the same test
// without a conversion. Fused kernels that regenerate dropout masks use it to agree with keep_mask.
inline uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ceil(p * 0x1.0p53)); }
inline bool keeps(uint64_t bits, uint64_t threshold) { return (bits >> 11) >= threshold; }

}  // namespace kernels
}  // namespace gf

#pragma once
// Cross-entropy loss of logits against class indices, exactly PyTorch's
// F.cross_entropy(logits, target, ignore_index, label_smoothing) with reduction='mean':
// the mean over rows whose target is not ignore_index of
//   (1 - label_smoothing) * -log p[target] + label_smoothing * mean over classes of -log p.
// When every target is ignored PyTorch returns NaN (0 / 0); this returns 0 with zero gradient.
#include <cstdint>

#include "autograd/variable.h"

namespace gf {

// logits (N, C) float, target (N,) int64 with values in [0, C) or ignore_index -> () scalar.
Variable cross_entropy(const Variable& logits, const Tensor& target, int64_t ignore_index = -100,
                       double label_smoothing = 0.0);
Variable cross_entropy(const Variable& logits, const Variable& target, int64_t ignore_index = -100,
                       double label_smoothing = 0.0);

// cross_entropy(linear(h, weight, bias), target, ...) without ever holding the (N, V) logits:
// rows are taken in chunks of about kLinearCrossEntropyChunk logits each; each chunk's logits
// give its rows' losses and, at once, their gradient, which goes straight into the gradients of
// h, weight and bias (the GEMMs backward would run, run now). Backward only scales those by the
// upstream gradient. Same FLOPs as the two ops; the step's largest tensor is gone (Liger
// Kernel's fused linear cross-entropy does the same). h (N, D), weight (V, D), bias (V) or
// undefined, target (N,) -> () scalar. rows_per_chunk > 0 overrides the chunking (tests).
inline constexpr int64_t kLinearCrossEntropyChunk = int64_t{1} << 22;  // logits per chunk: 16 MiB in float32
Variable linear_cross_entropy(const Variable& h, const Variable& weight, const Variable& bias, const Tensor& target,
                              int64_t ignore_index = -100, double label_smoothing = 0.0, int64_t rows_per_chunk = 0);

}  // namespace gf

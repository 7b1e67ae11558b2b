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

}  // namespace gf

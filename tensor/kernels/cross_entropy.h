#pragma once
// Cross-entropy of logits against class indices, fused with log-softmax. Matches PyTorch's
// F.cross_entropy(logits, target, ignore_index=..., label_smoothing=..., reduction='mean'):
//   loss_i = (1 - ls) * (lse_i - x[i, t_i]) + ls * mean_c (lse_i - x[i, c])
//   loss   = sum of loss_i over rows whose target is not ignore_index, divided by their count.
// Unlike PyTorch, which returns NaN (0 / 0) when every target is ignored, this returns 0 loss
// and zero gradient then, so that a batch of padding alone cannot poison training.
#include <cstdint>

#include "tensor/tensor.h"

namespace gf::kernels {

struct CrossEntropyResult {
  Tensor loss;        // () scalar, the logits' dtype
  Tensor lse;         // (N,) log-sum-exp of each counted row (0 where ignored): with the
                      // logits, all that backward needs
  int64_t count = 0;  // rows whose target is not ignore_index
  double total = 0;   // the counted rows' losses summed in row order (loss = total / count)
};

// The rows of target (N,) int64 that count (not ignore_index), each checked to be in [0, classes);
// an error names op, the row, and `against` (what gives the classes) with its shape.
int64_t count_targets(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op, const char* against,
                      const Shape& against_shape);

// logits (N, C) float, target (N,) int64 with values in [0, C) or ignore_index.
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                 double label_smoothing);

// d loss / d logits scaled by `scale` (the upstream gradient over count):
// (softmax - ((1 - ls) * onehot + ls / C)) * scale; ignored rows get 0. Returns (N, C). The softmax
// is exp(x - max) / sum, as cross_entropy_and_backward makes it (the same bits): each row's max and
// sum are made again from the logits (lse, the forward's, is checked for its shape only).
// With in_place, the gradient is written over the logits' own buffer (contiguous logits only)
// and returned as a view of it: autograd does so on the last backward through a loss whose
// logits nothing else holds, so the step's largest tensor is not allocated twice.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& lse, const Tensor& target, int64_t ignore_index,
                              double label_smoothing, double scale, bool in_place = false);

// Both at once, one row at a time while it is in cache (linear_cross_entropy's chunks): the loss
// as cross_entropy, and the gradient (as cross_entropy_backward's, the same bits) written over the
// logits (contiguous). Three passes over a row: its max (with the sum of its logits under label
// smoothing); exp(x - max) written over it, and its sum; the gradient e / sum - target, with its
// column sums and rounding below, from one exp per logit. column_sums, if given ((C,), the logits' dtype), receives the gradient's
// sum over rows, the bias gradient of a linear layer before the loss: the same bits as
// sum(gradient, {0}). With rows_to_bf16 (float32 logits only), each row of the gradient is then
// rounded to bfloat16 in place: row i's C values fill the first half of its own bytes, so the
// buffer reads as a bfloat16 matrix with a leading dim of 2C (linear_cross_entropy under bf16: its
// two products take the gradient in bfloat16 without a second buffer).
CrossEntropyResult cross_entropy_and_backward(Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                                              double scale, Tensor* column_sums = nullptr, bool rows_to_bf16 = false);

}  // namespace gf::kernels

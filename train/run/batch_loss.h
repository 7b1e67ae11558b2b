#pragma once
// The teacher-forced loss of a batch, shared by training, validation and eval.
#include "autograd/variable.h"
#include "nn/linear.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::train {

// The batch as tensors: src (B, S), decoder input tgt[:, :-1] (B, T-1), labels tgt[:, 1:] (B*(T-1)).
struct BatchTensors {
  Tensor src, tgt_in, labels;
};
BatchTensors to_tensors(const Batch& b);
// The same from tensors: src (B, S) and tgt (B, T) = <bos> .. <eos> PAD, split for teacher forcing.
BatchTensors teacher_forced(const Tensor& src, const Tensor& tgt);

// Label-smoothed cross-entropy over the non-PAD labels, mean per token.
Variable batch_loss(const nn::Seq2SeqTransformer& model, const BatchTensors& t, double label_smoothing);

// The same loss from a model's last states (B, T, D), its output projection `out` (V, D) and the
// labels (B*T,): the projection and the loss run as one op (linear_cross_entropy) on the positions
// whose label is not PAD only, so PAD positions' logits are never computed and the (tokens, V)
// logits are never held whole. Both model kinds' training losses use it.
Variable projected_loss(const Variable& states, const nn::Linear& out, const Tensor& labels, double label_smoothing);

// Mean NLL per target token over every batch of a plan (no smoothing, eval mode, no graph); the
// model is left in the mode it was in.
double evaluate_loss(nn::Seq2SeqTransformer& model, const BatchPlan& plan);

}  // namespace gf::train

#include "train/run/batch_loss.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/shape.h"
#include "tensor/kernels/indexing.h"
#include "train/data/vocab.h"

namespace gf::train {

BatchTensors to_tensors(const Batch& b) {
  return teacher_forced(Tensor::from_vector(b.src, {b.rows, b.src_len}),   // (B, S)
                        Tensor::from_vector(b.tgt, {b.rows, b.tgt_len}));  // (B, T)
}

BatchTensors teacher_forced(const Tensor& src, const Tensor& tgt) {
  const int64_t T = tgt.size(1);
  BatchTensors t;
  t.src = src;                                                   // (B, S)
  t.tgt_in = tgt.narrow(1, 0, T - 1).contiguous();               // (B, T-1)
  t.labels = tgt.narrow(1, 1, T - 1).contiguous().reshape({-1});  // (B*(T-1))
  return t;
}

namespace {

// The positions whose label is not padding, in order: (N,) int64.
Tensor scored_rows(const Tensor& labels) {  // labels: (B*(T-1),)
  std::vector<int64_t> rows;
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (l[i] != Vocab::kPad) rows.push_back(i);
  return Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())});
}

}  // namespace

Variable projected_loss(const Variable& h, const nn::Linear& out, const Tensor& all_labels, double label_smoothing) {
  Variable states = reshape(h, {-1, h.size(h.ndim() - 1)});  // (B*T, D)
  Tensor labels = all_labels.contiguous();                   // (B*T,)
  // Padded positions are ignored by the loss, so their logits are not computed at all: the loss
  // sees only the scored rows (about 7% of Multi30k's target positions are padding; a
  // decoder-only model's prompt positions are not scored either). Their states get zero gradient
  // either way.
  Tensor rows = scored_rows(labels);  // (N,)
  if (rows.numel() > 0 && rows.numel() < labels.numel()) {
    states = index_select(states, rows);           // (N, D)
    labels = kernels::index_select(labels, rows);  // (N,)
  }
  return linear_cross_entropy(states, out.weight, out.bias, labels, Vocab::kPad, label_smoothing);
}

Variable batch_loss(const nn::Seq2SeqTransformer& model, const BatchTensors& t, double label_smoothing) {
  return projected_loss(model.decoder_states(t.src, t.tgt_in), *model.out, t.labels, label_smoothing);  // states (B, T-1, D)
}

double evaluate_loss(nn::Seq2SeqTransformer& model, const BatchPlan& plan) {
  NoGradGuard ng;
  const bool was_training = model.is_training();
  model.eval();
  double total = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    Batch b = plan.batch(i);
    total += batch_loss(model, to_tensors(b), 0.0).item() * static_cast<double>(b.tgt_tokens);
    tokens += b.tgt_tokens;
  }
  model.train(was_training);
  return tokens ? total / static_cast<double>(tokens) : 0.0;
}

}  // namespace gf::train

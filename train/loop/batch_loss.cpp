#include "train/loop/batch_loss.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
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

Variable batch_loss(const nn::Seq2SeqTransformer& model, const BatchTensors& t, double label_smoothing) {
  // The output projection and the loss as one op: the (B*(T-1), V) logits are never held whole.
  Variable h = model.decoder_states(t.src, t.tgt_in);  // (B, T-1, D)
  return linear_cross_entropy(reshape(h, {-1, h.size(2)}), model.out->weight, model.out->bias, t.labels, Vocab::kPad, label_smoothing);
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

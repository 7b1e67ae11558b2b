// The training loss of a batch (train::batch_loss): the output projection and the loss over the
// scored positions only equal linear then cross_entropy over every position with PAD ignored.
#include <doctest/doctest.h>

#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "nn/decoder_only.h"
#include "nn/linear.h"
#include "nn/seq2seq.h"
#include "nn_test_util.h"
#include "train/data/vocab.h"
#include "train/run/batch_loss.h"

using namespace gf;
using namespace gf::testing;

namespace {

// Every parameter's gradient, in the module's order.
std::vector<Tensor> grads_of(nn::Module& m) {
  std::vector<Tensor> g;
  for (auto& [name, p] : m.named_parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return g;
}

// The loss from `fused` and from `plain`, each followed by backward from zeroed gradients, agree:
// the value and every parameter's gradient to 1e-12 (float64).
template <class Fused, class Plain>
void check_same_loss_and_grads(nn::Module& model, Fused fused, Plain plain) {
  model.zero_grad();
  Variable a = fused();
  a.backward();
  const std::vector<Tensor> g_fused = grads_of(model);
  model.zero_grad();
  Variable b = plain();
  b.backward();
  const std::vector<Tensor> g_plain = grads_of(model);
  CHECK(std::abs(a.item() - b.item()) < 1e-12);
  REQUIRE(g_fused.size() == g_plain.size());
  for (size_t i = 0; i < g_plain.size(); ++i) {
    REQUIRE(g_fused[i].defined() == g_plain[i].defined());
    if (g_plain[i].defined()) CHECK(max_abs_diff(g_fused[i], g_plain[i]) < 1e-12);
  }
}

}  // namespace

TEST_CASE("batch_loss skips padded positions and still equals linear + cross_entropy over all of them") {
  const int64_t pad = train::Vocab::kPad;
  for (double smoothing : {0.0, 0.1}) {
    CAPTURE(smoothing);
    nn::Seq2SeqTransformer model(tiny_options(2), 11);
    model.to(DType::Float64);
    // Row 0 is one token shorter than row 1: its last label is PAD; row 2 has two PADs.
    Tensor src = Tensor::of({3, 4, 5, 6, 1, 2, 3, pad, 4, 5, pad, pad}, {3, 4}, DType::Int64);
    Tensor tgt = Tensor::of({1, 7, 8, 2, pad, 1, 5, 6, 7, 2, 1, 3, 2, pad, pad}, {3, 5}, DType::Int64);
    train::BatchTensors t = train::teacher_forced(src, tgt);

    check_same_loss_and_grads(
        model, [&] { return train::batch_loss(model, t, smoothing); },
        [&] {
          Variable h = model.decoder_states(t.src, t.tgt_in);                  // (3, 4, D)
          Variable logits = model.out->forward(reshape(h, {-1, h.size(2)}));  // (12, V)
          return cross_entropy(logits, t.labels, pad, smoothing);             // PAD rows ignored
        });
  }
}

TEST_CASE("projected_loss of a decoder-only model (prompt positions unscored) equals cross_entropy over its logits, tied or not") {
  const int64_t pad = train::Vocab::kPad;
  for (bool tie : {false, true}) {
    CAPTURE(tie);
    nn::DecoderOnlyOptions o;
    o.vocab = 9;
    o.layer.d_model = 4, o.layer.nhead = 2, o.layer.dim_feedforward = 6, o.layer.dropout = 0.0;
    o.num_layers = 2, o.max_len = 16, o.tie_output = tie, o.pad = pad;
    nn::DecoderOnlyTransformer model(o, 21);
    model.to(DType::Float64);
    // Two sequences "source <sep> target": only the target positions have labels.
    Tensor ids = Tensor::of({3, 4, 8, 5, 6, 3, 8, 7, pad, pad}, {2, 5}, DType::Int64);
    Tensor labels = Tensor::of({pad, pad, 5, 6, 2, pad, 7, 2, pad, pad}, {10}, DType::Int64);
    check_same_loss_and_grads(
        model, [&] { return train::projected_loss(model.hidden_states(ids), *model.out, labels, 0.1); },
        [&] {
          Variable logits = model.forward(ids);  // (2, 5, 9)
          return cross_entropy(reshape(logits, {-1, logits.size(2)}), labels, pad, 0.1);
        });
  }
}

// The exact properties behind the mask labs (lab/labs/leak.cpp, padding.cpp, nan.cpp), each
// checked against its counterpart so that the test can fail: with the causal mask d logit_t /
// d input_t' is exactly 0 for every t' > t (and is not without it); masked keys get exactly zero
// gradient (and do not without the mask); a fully masked row gives no NaN with the guarded
// softmax (and does with the naive one).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "lab/leak.h"
#include "nn/masks.h"
#include "nn/multihead_attention.h"
#include "nn_test_util.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"

using namespace gf;
using namespace gf::testing;

namespace {

// J[t][t'] = || d logits[0, t, :] / d (decoder input embedding)[0, t', :] ||_F, by one backward per
// logit entry, the decoder run as Seq2SeqTransformer::forward runs it.
std::vector<std::vector<double>> decoder_jacobian(const nn::Seq2SeqTransformer& model, const Tensor& src, const Tensor& tgt) {
  const int64_t T = tgt.size(1);
  Variable emb = model.embed_tgt(tgt);  // (1, T, D)
  emb.retain_grad();
  Tensor causal = model.masks.causal ? nn::make_causal_mask(T) : Tensor();  // (T, T)
  Variable logits = model.project(model.transformer->decoder->forward(emb, model.encode(src, Tensor()), causal).output);  // (1, T, V)
  const int64_t V = logits.size(2), D = emb.size(2);
  std::vector<std::vector<double>> J(T, std::vector<double>(T, 0.0));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      Tensor up = Tensor::zeros({1, T, V}, logits.dtype());  // (1, T, V)
      up.flat_set(t * V + v, 1.0);
      emb.zero_grad();
      logits.backward(up, /*retain_graph=*/true);
      for (int64_t s = 0; s < T; ++s)
        for (int64_t d = 0; d < D; ++d) J[t][s] += std::pow(emb.grad().flat_get(s * D + d), 2);
    }
  return J;
}

// A float64 tiny translator in eval mode.
std::unique_ptr<nn::Seq2SeqTransformer> tiny_model(uint64_t seed = 3) {
  auto m = std::make_unique<nn::Seq2SeqTransformer>(tiny_options(2), seed);
  m->to(DType::Float64);
  m->eval();
  return m;
}

}  // namespace

TEST_CASE("causal mask: d logit_t / d input_t' is exactly 0 for every t' > t, and non-zero without the mask") {
  for (bool pre_ln : {false, true}) {
    CAPTURE(pre_ln);
    nn::Seq2SeqTransformer model(tiny_options(2, pre_ln), 5);
    model.to(DType::Float64);
    model.eval();
    Tensor src = Tensor::from_vector(std::vector<int64_t>{4, 5, 6, 4, 5}, {1, 5});     // (1, 5)
    Tensor tgt = Tensor::from_vector(std::vector<int64_t>{2, 4, 7, 8, 5, 6}, {1, 6});  // (1, 6)
    auto J = decoder_jacobian(model, src, tgt);
    for (size_t t = 0; t < J.size(); ++t)
      for (size_t s = 0; s < J.size(); ++s) {
        CAPTURE(t);
        CAPTURE(s);
        if (s > t) CHECK(J[t][s] == 0.0);  // exactly, not approximately
        else CHECK(J[t][s] > 0.0);
      }
    model.masks.causal = false;
    J = decoder_jacobian(model, src, tgt);
    for (size_t t = 0; t < J.size(); ++t)
      for (size_t s = t + 1; s < J.size(); ++s) {
        CAPTURE(t);
        CAPTURE(s);
        CHECK(J[t][s] > 1e-6);
      }
  }
}

TEST_CASE("lab leak's Jacobian statistics: counts above and below the diagonal, the share above, rows peaking at t+1") {
  const lab::JacobianGrid masked{{5, 0, 0}, {1, 4, 0}, {2, 3, 6}}, open{{5, 3, 1}, {1, 4, 2}, {2, 3, 6}}, holed{{5, 3, 1}, {0, 4, 2}, {2, 3, 6}};
  const lab::JacobianStats m = lab::jacobian_stats({masked});
  CHECK(m.above == 3);
  CHECK(m.above_nonzero == 0);
  CHECK(m.lower_zero == 0);
  CHECK(m.above_max == 0.0);
  CHECK(m.above_share == 0.0);
  CHECK(m.next_argmax == 0.0);  // row 0 leans on nothing after it, row 1 on input 0
  const lab::JacobianStats o = lab::jacobian_stats({open});
  CHECK(o.above_nonzero == 3);
  CHECK(o.above_max == 3.0);
  CHECK(o.above_share == doctest::Approx(6.0 / 27.0));
  CHECK(o.next_argmax == 1.0);  // row 0: 3 at t+1 over 1; row 1: 2 at t+1 over 1
  CHECK(lab::jacobian_stats({holed}).lower_zero == 1);
  // Over several grids the counts add up and the shares are over every row.
  const lab::JacobianStats both = lab::jacobian_stats({masked, open});
  CHECK(both.above == 6);
  CHECK(both.above_nonzero == 3);
  CHECK(both.above_share == doctest::Approx(6.0 / 48.0));
  CHECK(both.next_argmax == 0.5);
  const lab::JacobianGrid mean = lab::mean_grid({masked, open});
  CHECK(mean[0][1] == 1.5);
  CHECK(mean[2][2] == 6.0);
  CHECK_THROWS_AS(lab::mean_grid({}), std::invalid_argument);
}

TEST_CASE("masked keys get exactly zero gradient in attention, and non-zero without the mask") {
  Generator gen(11);
  nn::MultiheadAttention mha(4, 2, 0.0, true, gen);
  mha.to(DType::Float64);
  Variable q(kernels::randn({2, 3, 4}, gen, DType::Float64), true);  // (B, L, D)
  Tensor kd = kernels::randn({2, 5, 4}, gen, DType::Float64);        // (B, S, D)
  Tensor vd = kernels::randn({2, 5, 4}, gen, DType::Float64);        // (B, S, D)
  Tensor up = kernels::randn({2, 3, 4}, gen, DType::Float64);        // (B, L, D): upstream
  Tensor kpm = Tensor::zeros({2, 5}, DType::Bool);                   // (B, S)
  kpm.flat_set(3, 1), kpm.flat_set(4, 1), kpm.flat_set(5 + 4, 1);   // row 0: keys 3, 4; row 1: key 4
  auto key_grads = [&](const Tensor& mask) {
    Variable k(kd.clone(), true), v(vd.clone(), true);  // (B, S, D) each, fresh leaves
    Variable out = mha.forward(q, k, v, mask).output;  // (B, L, D)
    sum(out * Variable(up)).backward();
    return std::pair(k.grad(), v.grad());  // (B, S, D) each
  };
  auto row_norm = [](const Tensor& g, int64_t b, int64_t s) { return lab::l2_norm(g.select(0, b).select(0, s)); };
  auto [gk, gv] = key_grads(kpm);
  auto [gk0, gv0] = key_grads(Tensor());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 5; ++s) {
      CAPTURE(b);
      CAPTURE(s);
      if (kpm.flat_get(b * 5 + s) != 0) {
        CHECK(row_norm(gk, b, s) == 0.0);
        CHECK(row_norm(gv, b, s) == 0.0);
        CHECK(row_norm(gk0, b, s) > 1e-8);  // the counterpart: unmasked, the same key gets gradient
        CHECK(row_norm(gv0, b, s) > 1e-8);
      } else {
        CHECK(row_norm(gk, b, s) > 1e-8);
        CHECK(row_norm(gv, b, s) > 1e-8);
      }
    }
}

TEST_CASE("a translator's loss sends exactly zero gradient to PAD source positions with the padding mask, and some without") {
  auto owned = tiny_model();
  nn::Seq2SeqTransformer& model = *owned;
  std::vector<train::EncodedPair> pairs{{{4, 5, 6, 4, 5, 6}, {4, 5, 6}}, {{5, 6}, {7, 8, 4, 5}}};
  train::BatchTensors t = train::to_tensors(train::collate(pairs, std::vector<size_t>{0, 1}));  // src (2, 6): row 1 has 4 PAD
  auto src_grad = [&]() {
    Tensor src_pad = model.masks.source_padding ? nn::make_pad_mask(t.src, 0) : Tensor();  // (B, S)
    Variable es = model.embed_src(t.src);                                                // (B, S, D)
    es.retain_grad();
    Variable memory = model.transformer->encoder->forward(es, src_pad);  // (B, S, D)
    Variable logits = model.project(
        model.transformer->decoder->forward(model.embed_tgt(t.tgt_in), memory, nn::make_causal_mask(t.tgt_in.size(1)), Tensor(), src_pad)
            .output);  // (B, T, V)
    cross_entropy(reshape(logits, {-1, logits.size(2)}), t.labels, 0).backward();
    return es.grad();  // (B, S, D)
  };
  Tensor g = src_grad();  // (B, S, D)
  for (int64_t s = 0; s < 6; ++s) {
    CAPTURE(s);
    CHECK(lab::l2_norm(g.select(0, 0).select(0, s)) > 0);               // row 0 has no PAD
    if (s >= 2) CHECK(lab::l2_norm(g.select(0, 1).select(0, s)) == 0.0);  // row 1's PAD: exactly 0
  }
  model.masks.source_padding = false;
  model.zero_grad();
  g = src_grad();
  for (int64_t s = 2; s < 6; ++s) CHECK(lab::l2_norm(g.select(0, 1).select(0, s)) > 1e-10);
}

TEST_CASE("with the padding masks a sentence computes the same logits alone and in a batch, without them it does not") {
  auto owned = tiny_model();
  nn::Seq2SeqTransformer& model = *owned;
  std::vector<train::EncodedPair> pairs{{{4, 5}, {7, 8}}, {{4, 5, 6, 6, 5, 4, 6}, {4, 5, 6, 7, 8, 4}}};
  auto row0 = [&](std::vector<size_t> rows) {
    NoGradGuard ng;
    train::BatchTensors t = train::to_tensors(train::collate(pairs, rows));
    return model.forward(t.src, t.tgt_in).data().narrow(0, 0, 1).narrow(1, 0, 3);  // (1, 3, V): <bos> 7 8
  };
  CHECK(max_abs_diff(row0({0}), row0({0, 1})) < 1e-12);
  model.masks.source_padding = model.masks.target_padding = false;
  CHECK(max_abs_diff(row0({0}), row0({0, 1})) > 1e-4);
}

TEST_CASE("a fully masked row (an empty source): the guarded softmax keeps loss and every gradient finite, the naive one does not") {
  nn::Seq2SeqTransformer model(tiny_options(2), 7);
  model.eval();
  const auto attn = lab::attention_modules(model);
  REQUIRE(attn.size() == 6);  // 2 encoder self, 2 decoder self, 2 cross
  std::vector<train::EncodedPair> pairs{{{4, 5, 6}, {4, 5}}, {{}, {7, 8, 4}}};  // row 1: every source key is PAD
  train::BatchTensors t = train::to_tensors(train::collate(pairs, std::vector<size_t>{0, 1}));
  auto loss_and_grads = [&]() {
    model.zero_grad();
    Variable loss = train::batch_loss(model, t, 0.0);  // ()
    loss.backward();
    int64_t nonfinite = 0;
    for (const auto& p : model.parameters()) nonfinite += lab::count_nonfinite(p.grad());
    return std::pair(loss.item(), nonfinite);
  };
  auto [loss, bad] = loss_and_grads();
  CHECK(std::isfinite(loss));
  CHECK(bad == 0);

  for (auto* a : attn) a->naive_softmax = true;
  auto [naive_loss, naive_bad] = loss_and_grads();
  CHECK(std::isnan(naive_loss));
  CHECK(naive_bad > 0);
  // Anomaly mode names the op that made the first NaN, in the forward pass of the first encoder layer.
  const std::string err = error_of([&] {
    AnomalyGuard guard;
    train::batch_loss(model, t, 0.0).backward();
  });
  GF_CHECK_CONTAINS(err, "anomaly: forward of");
  GF_CHECK_CONTAINS(err, "encoder.layers.0");
  model.zero_grad();

  // Without the fully masked row the naive softmax is finite too: the NaN came from that row alone.
  train::BatchTensors t0 = train::to_tensors(train::collate(pairs, std::vector<size_t>{0}));
  Variable l0 = train::batch_loss(model, t0, 0.0);  // ()
  CHECK(std::isfinite(l0.item()));
}

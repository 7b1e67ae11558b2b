// The measurements behind lab `norm` (lab/labs/norm.cpp): Xiong et al.'s per-layer gradient, and
// the three layer stacks it compares (Post-LN, Pre-LN, DeepNorm).
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "lab/norm.h"
#include "nn/masks.h"
#include "tensor/kernels/binary.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

LayerGradNorms linear2_grad_norms(nn::Seq2SeqTransformer& model, const train::Batch& batch) {
  model.zero_grad();
  const train::BatchTensors t = train::to_tensors(batch);
  const int64_t pad = model.options().pad;
  const Tensor src_pad = nn::make_pad_mask(t.src, pad);                // (B, S)
  const Tensor tgt_pad = nn::make_pad_mask(t.tgt_in, pad);             // (B, T)
  const Tensor causal = nn::make_causal_mask(t.tgt_in.size(1));         // (T, T)
  const nn::Transformer& tr = *model.transformer;
  std::vector<Variable> enc, dec;  // each layer's output x_l, (B, S, D) and (B, T, D)
  Variable x = model.embed_src(t.src);  // (B, S, D)
  for (const auto& layer : *tr.encoder->layers) {
    x = layer->forward(x, src_pad);  // (B, S, D)
    x.retain_grad();
    enc.push_back(x);
  }
  const Variable memory = tr.encoder->norm ? tr.encoder->norm->forward(x) : x;  // (B, S, D)
  Variable y = model.embed_tgt(t.tgt_in);  // (B, T, D)
  for (const auto& layer : *tr.decoder->layers) {
    y = layer->forward(y, memory, causal, tgt_pad, src_pad).output;  // (B, T, D)
    y.retain_grad();
    dec.push_back(y);
  }
  const Variable logits = model.project(tr.decoder->norm ? tr.decoder->norm->forward(y) : y);  // (B, T, V)
  const Variable loss = cross_entropy(reshape(logits, {-1, logits.size(2)}), t.labels, pad, 0.0);  // ()
  loss.backward();
  LayerGradNorms g;
  g.loss = loss.item();
  for (const auto& layer : *tr.encoder->layers) g.encoder.push_back(l2_norm(layer->linear2->weight.grad()));
  for (const auto& layer : *tr.decoder->layers) g.decoder.push_back(l2_norm(layer->linear2->weight.grad()));
  for (const auto& v : enc) g.encoder_x.push_back(l2_norm(v.data())), g.encoder_dx.push_back(l2_norm(v.grad()));
  for (const auto& v : dec) g.decoder_x.push_back(l2_norm(v.data())), g.decoder_dx.push_back(l2_norm(v.grad()));
  model.zero_grad();
  return g;
}

const char* arch_name(Arch a) { return a == Arch::PostLN ? "Post-LN" : a == Arch::PreLN ? "Pre-LN" : "DeepNorm"; }

DeepNormConstants deepnorm_constants(int64_t N, int64_t M) {
  const double nm = std::pow(static_cast<double>(N), 4) * static_cast<double>(M);
  return {0.81 * std::pow(nm, 1.0 / 16), 0.87 * std::pow(nm, -1.0 / 16), std::pow(3.0 * M, 0.25), std::pow(12.0 * M, -0.25)};
}

namespace {

// Scales the value rows of in_proj_weight and out_proj's weight of one attention by beta.
void scale_value_out(nn::MultiheadAttention& a, double beta) {
  NoGradGuard ng;
  Tensor w = a.in_proj_weight.data();  // (3D, D): rows Q, K, V
  Tensor v = w.narrow(0, 2 * a.embed_dim, a.embed_dim);  // (D, D), a view of the V rows
  kernels::scale_(v, beta);
  Tensor o = a.out_proj->weight.data();  // (D, D)
  kernels::scale_(o, beta);
}
void scale_linear(nn::Linear& l, double beta) {
  NoGradGuard ng;
  Tensor w = l.weight.data();  // (out, in)
  kernels::scale_(w, beta);
}

}  // namespace

std::unique_ptr<nn::Seq2SeqTransformer> make_norm_model(const nn::Seq2SeqOptions& base, Arch arch, uint64_t seed) {
  nn::Seq2SeqOptions o = base;
  o.layer.norm_first = arch == Arch::PreLN;
  auto model = std::make_unique<nn::Seq2SeqTransformer>(o, seed);
  if (arch != Arch::DeepNorm) return model;
  const DeepNormConstants c = deepnorm_constants(o.num_layers, o.num_layers);
  for (const auto& layer : *model->transformer->encoder->layers) {
    layer->residual_scale = c.enc_alpha;
    scale_value_out(*layer->self_attn, c.enc_beta);
    scale_linear(*layer->linear1, c.enc_beta), scale_linear(*layer->linear2, c.enc_beta);
  }
  for (const auto& layer : *model->transformer->decoder->layers) {
    layer->residual_scale = c.dec_alpha;
    scale_value_out(*layer->self_attn, c.dec_beta), scale_value_out(*layer->multihead_attn, c.dec_beta);
    scale_linear(*layer->linear1, c.dec_beta), scale_linear(*layer->linear2, c.dec_beta);
  }
  return model;
}

LayerGradNorms mean_linear2_grad_norms(const nn::Seq2SeqOptions& shape, Arch arch, const std::vector<train::Batch>& bs, size_t batches,
                                       uint64_t seed) {
  auto model = make_norm_model(shape, arch, seed);
  model->train();
  const size_t n = std::min(bs.size(), batches);
  LayerGradNorms mean;
  auto add = [n](std::vector<double>& sum, const std::vector<double>& v) {
    sum.resize(v.size(), 0.0);
    for (size_t l = 0; l < v.size(); ++l) sum[l] += v[l] / static_cast<double>(n);
  };
  for (size_t b = 0; b < n; ++b) {
    const LayerGradNorms g = linear2_grad_norms(*model, bs[b]);
    add(mean.encoder, g.encoder), add(mean.decoder, g.decoder);
    add(mean.encoder_x, g.encoder_x), add(mean.decoder_x, g.decoder_x);
    add(mean.encoder_dx, g.encoder_dx), add(mean.decoder_dx, g.decoder_dx);
    mean.loss += g.loss / static_cast<double>(n);
  }
  return mean;
}

NormTraining train_norm_model(const nn::Seq2SeqOptions& shape, Arch arch, const IdData& data, const FitOptions& o) {
  auto model = make_norm_model(shape, arch, o.seed);
  FitResult f = fit(*model, data.train, o);
  model->eval();
  NormTraining t{f.losses, 0, f.diverged};
  t.losses.resize(static_cast<size_t>(o.steps), NAN);
  t.nll = f.diverged ? f.losses.front() : teacher_forced(*model, data.test).nll;
  return t;
}

}  // namespace gf::lab

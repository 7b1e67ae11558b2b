// Gradient attribution of one translation (declared in train/inspect/attribution.h): attention per
// head, gradient-times-input, blank-out, leave-one-out and integrated gradients.
#include "train/inspect/attribution.h"

#include <cmath>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/kernels/softmax.h"
#include "train/data/vocab.h"

namespace gf::train::inspect {
namespace {

// Every encoder and decoder self-attention's weights during one forward, row 0 of the batch.
// Installs weights observers and removes them when it goes out of scope.
class SelfAttentionRecorder {
 public:
  explicit SelfAttentionRecorder(const nn::Seq2SeqTransformer& model) : model_(model) {
    auto& enc = *model.transformer->encoder->layers;
    auto& dec = *model.transformer->decoder->layers;
    enc_.resize(enc.size()), dec_.resize(dec.size());
    for (size_t l = 0; l < enc.size(); ++l) enc[l].self_attn->weights_observer = [this, l](const Variable& w) { enc_[l] = heads_of(w.data()); };
    for (size_t l = 0; l < dec.size(); ++l) dec[l].self_attn->weights_observer = [this, l](const Variable& w) { dec_[l] = heads_of(w.data()); };
  }
  ~SelfAttentionRecorder() {
    for (auto& layer : *model_.transformer->encoder->layers) layer->self_attn->weights_observer = nullptr;
    for (auto& layer : *model_.transformer->decoder->layers) layer->self_attn->weights_observer = nullptr;
  }
  SelfAttentionRecorder(const SelfAttentionRecorder&) = delete;
  SelfAttentionRecorder& operator=(const SelfAttentionRecorder&) = delete;
  std::vector<std::vector<Map>> enc_, dec_;  // [layer][head]

 private:
  const nn::Seq2SeqTransformer& model_;
};

// The translator's forward from given source embeddings x (B, S, D) (before positions), as
// Seq2SeqTransformer::forward computes it for unpadded targets: logits (B, T, V) and each decoder
// layer's cross-attention (B, H, T, S). src_pad (B, S) bool, when given, masks source positions out
// of every attention that reads them as keys (the encoder's self-attention and the decoder's
// cross-attention), as padding is masked.
nn::DecoderOutput forward_from_embeddings(const nn::Seq2SeqTransformer& model, const Variable& x, const Tensor& tgt_in,
                                          const Tensor& src_pad = Tensor()) {
  Variable h = model.drop->forward(model.pos->forward(x));                         // (B, S, D)
  Variable memory = model.transformer->encoder->forward(h, src_pad);              // (B, S, D)
  Tensor causal = model.masks.causal ? nn::make_causal_mask(tgt_in.size(1)) : Tensor();  // (T, T)
  nn::DecoderOutput d = model.transformer->decoder->forward(model.embed_tgt(tgt_in), memory, causal, Tensor(), src_pad, true);
  d.output = model.project(d.output);  // (B, T, V)
  return d;
}

// <bos> + out[:-1], repeated in B rows: (B, T).
Tensor teacher_input(const std::vector<int64_t>& out, int64_t B) {
  std::vector<int64_t> v;
  for (int64_t b = 0; b < B; ++b) {
    v.push_back(Vocab::kBos);
    v.insert(v.end(), out.begin(), out.end() - 1);
  }
  return Tensor::from_vector(v, {B, static_cast<int64_t>(out.size())});
}

// log p(out[t]) at position t of row t (B = T rows), from logits (T, T, V).
std::vector<double> diagonal_log_probs(const Tensor& logits, const std::vector<int64_t>& out) {
  const Tensor l = logits.to(DType::Float64).contiguous();  // (T, T, V)
  const int64_t T = l.size(0), V = l.size(2);
  std::vector<double> lp(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) lp[t] = kernels::log_softmax_at(l.data<double>() + (t * T + t) * V, V, out[t]);
  return lp;
}

void check_inputs(const std::vector<int64_t>& src, const std::vector<int64_t>& out) {
  GF_CHECK(!src.empty(), "attribution_maps: the source is empty");
  GF_CHECK(!out.empty() && out.back() == Vocab::kEos, "attribution_maps: the output ({} tokens) must end with <eos>", out.size());
}

}  // namespace

Tensor source_embeddings(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src) {
  NoGradGuard ng;
  Tensor ids = Tensor::from_vector(src, {1, static_cast<int64_t>(src.size())});  // (1, S)
  Variable e = model.src_emb->forward(ids) * std::sqrt(static_cast<double>(model.options().layer.d_model));  // (1, S, D)
  return e.data().select(0, 0).contiguous();  // (S, D)
}

namespace {

// log p(out[t]) at every position t of every row, teacher-forced, for source embeddings xb
// (B, S, D): (B, T). No graph.
std::vector<std::vector<double>> log_probs_per_row(const nn::Seq2SeqTransformer& model, const Tensor& xb, const std::vector<int64_t>& out) {
  NoGradGuard ng;
  const int64_t B = xb.size(0), T = static_cast<int64_t>(out.size());
  const Tensor l = forward_from_embeddings(model, Variable(xb), teacher_input(out, B)).output.data().to(DType::Float64).contiguous();  // (B, T, V)
  const int64_t V = l.size(2);
  std::vector<std::vector<double>> lp(static_cast<size_t>(B), std::vector<double>(static_cast<size_t>(T)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) lp[b][t] = kernels::log_softmax_at(l.data<double>() + (b * T + t) * V, V, out[t]);
  return lp;
}

// Softmax of every (row, position) of logits (B, T, V), in double: [row][t] (V).
std::vector<Map> softmax_rows(const Tensor& logits_in) {
  const Tensor l = logits_in.to(DType::Float64).contiguous();  // (B, T, V)
  const int64_t B = l.size(0), T = l.size(1), V = l.size(2);
  std::vector<Map> out(static_cast<size_t>(B), Map(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(V))));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) out[b][t] = kernels::softmax_exact(l.data<double>() + (b * T + t) * V, V);
  return out;
}

}  // namespace

std::vector<Map> output_distributions(const nn::Seq2SeqTransformer& model, const Tensor& xb, const std::vector<int64_t>& out) {
  check_inputs({0}, out);
  NoGradGuard ng;
  return softmax_rows(forward_from_embeddings(model, Variable(xb), teacher_input(out, xb.size(0))).output.data());  // (B, T, V)
}

Map leave_one_out(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out) {
  check_inputs(src, out);
  const int64_t S = static_cast<int64_t>(src.size()), T = static_cast<int64_t>(out.size());
  GF_CHECK(S >= 2, "leave_one_out: a source of {} token has nothing left without it", S);
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t D = x1.size(1);
  const Tensor xb = x1.reshape({1, S, D}).expand({S, S, D}).contiguous();  // (S, S, D): the sentence in every row
  Tensor mask = Tensor::empty({S, S}, DType::Bool);                        // (S, S): row s masks key s
  for (int64_t i = 0; i < S * S; ++i) mask.data<bool>()[i] = i / S == i % S;
  const Map full = output_distributions(model, x1.reshape({1, S, D}), out).at(0);  // (T, V)
  NoGradGuard ng;
  const std::vector<Map> without = softmax_rows(forward_from_embeddings(model, Variable(xb), teacher_input(out, S), mask).output.data());  // [s] (T, V)
  Map loo(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(S)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) loo[t][s] = total_variation(full[t], without[s][t]);
  return loo;
}

IntegratedGradients integrated_gradients(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out,
                                         int steps) {
  check_inputs(src, out);
  GF_CHECK(steps >= 1, "integrated_gradients: steps must be at least 1, got {}", steps);
  const int64_t T = static_cast<int64_t>(out.size()), S = static_cast<int64_t>(src.size()), K = steps;
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t D = x1.size(1);
  // Row k * T + t: the source scaled by (k + 0.5) / K; its loss is -log p(out[t]) at position t alone.
  Tensor path = Tensor::empty({K * T, S, D}, x1.dtype());  // (K*T, S, D)
  for (int64_t k = 0; k < K; ++k) {
    const Tensor scaled = (Variable(x1) * ((static_cast<double>(k) + 0.5) / static_cast<double>(K))).data();  // (S, D)
    for (int64_t t = 0; t < T; ++t) path.select(0, k * T + t).copy_(scaled);
  }
  EnableGradGuard grad_on;
  Variable x(path, true);
  nn::DecoderOutput d = forward_from_embeddings(model, x, teacher_input(out, K * T));
  const int64_t V = d.output.size(2);
  std::vector<int64_t> labels(static_cast<size_t>(K * T * T), Vocab::kPad);  // (K*T, T): out[t] at row (k, t)'s position t
  for (int64_t k = 0; k < K; ++k)
    for (int64_t t = 0; t < T; ++t) labels[(k * T + t) * T + t] = out[t];
  Variable loss = cross_entropy(reshape(d.output, {K * T * T, V}), Tensor::from_vector(labels, {K * T * T}), Vocab::kPad) *
                  static_cast<double>(K * T);  // (): -sum over rows of log p
  loss.backward();
  const Tensor g = x.grad().to(DType::Float64).contiguous();  // (K*T, S, D)
  const Tensor xe = x1.to(DType::Float64).contiguous();       // (S, D)
  IntegratedGradients r;
  r.ig.assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(S), 0.0));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < S; ++s) {
        const double* gr = g.data<double>() + ((k * T + t) * S + s) * D;
        const double* xr = xe.data<double>() + s * D;
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot -= gr[j] * xr[j];  // minus: the gradient of +log p
        r.ig[t][s] += dot / static_cast<double>(K);
      }
  const std::vector<double> at_x = output_log_probs(model, x1, out);
  const std::vector<double> at_zero = output_log_probs(model, Tensor::zeros({S, D}, x1.dtype()), out);
  for (int64_t t = 0; t < T; ++t) r.endpoints.push_back(at_x[t] - at_zero[t]);
  return r;
}

std::vector<double> output_log_probs(const nn::Seq2SeqTransformer& model, const Tensor& x, const std::vector<int64_t>& out) {
  check_inputs({0}, out);
  return log_probs_per_row(model, x.reshape({1, x.size(0), x.size(1)}), out).at(0);
}

Map blank_out(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out) {
  check_inputs(src, out);
  const int64_t T = static_cast<int64_t>(out.size()), S = static_cast<int64_t>(src.size());
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t D = x1.size(1);
  // Row 0: the sentence as it is; row 1 + s: token s blanked.
  Tensor xb = x1.reshape({1, S, D}).expand({S + 1, S, D}).contiguous().clone();  // (S + 1, S, D)
  for (int64_t s = 0; s < S; ++s) xb.select(0, 1 + s).select(0, s).fill_(0.0);
  const auto lp = log_probs_per_row(model, xb, out);
  Map drop(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(S)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) drop[t][s] = lp[0][t] - lp[1 + s][t];
  return drop;
}

AttributionMaps attribution_maps(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out) {
  check_inputs(src, out);
  const int64_t T = static_cast<int64_t>(out.size()), S = static_cast<int64_t>(src.size());
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t D = x1.size(1);
  // T copies of the sentence: row t's loss is -log p(out[t]) at position t alone, so one backward
  // gives every output token's gradient, each in its own row.
  EnableGradGuard grad_on;
  Variable x(x1.reshape({1, S, D}).expand({T, S, D}).contiguous(), true);  // (T, S, D)
  SelfAttentionRecorder rec(model);
  nn::DecoderOutput d = forward_from_embeddings(model, x, teacher_input(out, T));
  const int64_t V = d.output.size(2);
  std::vector<int64_t> labels(static_cast<size_t>(T * T), Vocab::kPad);  // (T, T): out[t] on the diagonal
  for (int64_t t = 0; t < T; ++t) labels[t * T + t] = out[t];
  // cross_entropy averages over the T labelled positions; times T it is -sum_t log p(out[t]).
  Variable loss = cross_entropy(reshape(d.output, {T * T, V}), Tensor::from_vector(labels, {T * T}), Vocab::kPad) *
                  static_cast<double>(T);  // ()
  loss.backward();

  AttributionMaps m;
  for (const Variable& w : d.cross_weights) m.cross.push_back(heads_of(w.data()));
  m.enc_self = rec.enc_;
  m.dec_self = rec.dec_;
  m.log_probs = diagonal_log_probs(d.output.data(), out);
  const Tensor g = x.grad().to(DType::Float64).contiguous();  // (T, S, D): d(-sum log p) / dx
  const Tensor xe = x1.to(DType::Float64).contiguous();       // (S, D)
  m.grad_dot.assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(S)));
  m.grad_norm = m.grad_dot;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < S; ++s) {
      const double* gr = g.data<double>() + (t * S + s) * D;
      const double* xr = xe.data<double>() + s * D;
      double dot = 0, nn2 = 0;
      for (int64_t k = 0; k < D; ++k) dot -= gr[k] * xr[k], nn2 += gr[k] * gr[k];  // minus: the gradient of +log p
      m.grad_dot[t][s] = dot;
      m.grad_norm[t][s] = std::sqrt(nn2);
    }
  return m;
}

}  // namespace gf::train::inspect

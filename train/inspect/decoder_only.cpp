// A decoder-only model's maps of one sequence (declared in train/inspect/decoder_only.h).
#include "train/inspect/decoder_only.h"

#include <cmath>

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

// Every layer's self-attention weights during one forward of the decoder-only model (row 0 of the
// batch); the observers are removed when it goes out of scope.
class StackRecorder {
 public:
  explicit StackRecorder(const nn::DecoderOnlyTransformer& model) : model_(model) {
    auto& layers = *model.transformer->layers;
    maps.resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) layers[l].self_attn->weights_observer = [this, l](const Variable& w) { maps[l] = heads_of(w.data()); };
  }
  ~StackRecorder() {
    for (auto& layer : *model_.transformer->layers) layer->self_attn->weights_observer = nullptr;
  }
  StackRecorder(const StackRecorder&) = delete;
  StackRecorder& operator=(const StackRecorder&) = delete;
  std::vector<std::vector<Map>> maps;  // [layer][head]

 private:
  const nn::DecoderOnlyTransformer& model_;
};

}  // namespace

StackMaps decoder_only_maps(const nn::DecoderOnlyTransformer& model, const std::vector<int64_t>& prompt, const std::vector<int64_t>& out) {
  GF_CHECK(prompt.size() >= 1, "decoder_only_maps: the prompt is empty");
  GF_CHECK(!out.empty() && out.back() == Vocab::kEos, "decoder_only_maps: the output ({} tokens) must end with <eos>", out.size());
  const int64_t P = static_cast<int64_t>(prompt.size()), T = static_cast<int64_t>(out.size()), L = P + T - 1;
  const int64_t D = model.options().layer.d_model;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), out.begin(), out.end() - 1);
  Tensor x1;
  {
    NoGradGuard ng;
    const Tensor ids = Tensor::from_vector(seq, {1, L});                                              // (1, L)
    x1 = (model.emb->forward(ids) * std::sqrt(static_cast<double>(D))).data().select(0, 0).contiguous();  // (L, D)
  }
  // T copies of the sequence: copy t's loss is -log p(out[t]) at position P - 1 + t alone, so one
  // backward gives every output token's gradient, each in its own copy.
  EnableGradGuard grad_on;
  Variable x(x1.reshape({1, L, D}).expand({T, L, D}).contiguous(), true);  // (T, L, D)
  StackRecorder rec(model);
  Variable h = model.drop->forward(model.pos->forward(x));                                 // (T, L, D)
  Variable logits = model.out->forward(model.transformer->forward(h, Tensor(), nn::make_causal_mask(L)));  // (T, L, V)
  const int64_t V = logits.size(2);
  std::vector<int64_t> labels(static_cast<size_t>(T * L), Vocab::kPad);  // (T, L): out[t] at (t, P - 1 + t)
  for (int64_t t = 0; t < T; ++t) labels[t * L + P - 1 + t] = out[t];
  // cross_entropy averages over the T labelled positions; times T it is -sum_t log p(out[t]).
  Variable loss = cross_entropy(reshape(logits, {T * L, V}), Tensor::from_vector(labels, {T * L}), Vocab::kPad) * static_cast<double>(T);  // ()
  loss.backward();

  StackMaps m;
  m.self = rec.maps;
  const Tensor lg = logits.data().to(DType::Float64).contiguous();  // (T, L, V)
  const Tensor g = x.grad().to(DType::Float64).contiguous();        // (T, L, D): d(-sum log p) / dx
  const Tensor xe = x1.to(DType::Float64).contiguous();             // (L, D)
  m.grad_dot.assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(L)));
  for (int64_t t = 0; t < T; ++t) {
    m.log_probs.push_back(kernels::log_softmax_at(lg.data<double>() + (t * L + P - 1 + t) * V, V, out[t]));
    for (int64_t j = 0; j < L; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < D; ++k) dot -= g.data<double>()[(t * L + j) * D + k] * xe.data<double>()[j * D + k];  // minus: the gradient of +log p
      m.grad_dot[t][j] = dot;
    }
  }
  std::vector<Map> means;
  for (const auto& heads : m.self) means.push_back(head_mean(heads));
  const Map r = stack_rollout(means);  // (L, L)
  for (int64_t t = 0; t < T; ++t) m.rollout.push_back(r[P - 1 + t]);
  return m;
}

}  // namespace gf::train::inspect

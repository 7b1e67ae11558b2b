// The measurements behind lab `crossattn` (declared in lab/crossattn.h): the memory's gradient by
// decoder layer, gradient norms per layer, and how far training moved the weights.
#include <cmath>
#include <memory>

#include "autograd/ops/arith.h"
#include "lab/common.h"
#include "lab/crossattn.h"
#include "nn/masks.h"
#include "train/data/vocab.h"

namespace gf::lab {

MemoryPaths memory_gradient_paths(nn::Seq2SeqTransformer& model, const train::BatchTensors& t) {
  const auto& m = model.masks;
  const Tensor src_pad = m.source_padding ? nn::make_pad_mask(t.src, train::Vocab::kPad) : Tensor();     // (B, S)
  const Tensor tgt_pad = m.target_padding ? nn::make_pad_mask(t.tgt_in, train::Vocab::kPad) : Tensor();  // (B, T)
  const Tensor causal = m.causal ? nn::make_causal_mask(t.tgt_in.size(1)) : Tensor();                   // (T, T)
  Variable memory = model.encode(t.src, src_pad);  // (B, S, D)
  memory.retain_grad();
  const auto& decoder = *model.transformer->decoder;
  Variable x = model.embed_tgt(t.tgt_in);  // (B, T, D)
  std::vector<Variable> copies;            // one (B, S, D) per decoder layer: memory * 1, its own node
  for (const auto& layer : *decoder.layers) {
    copies.push_back(memory * 1.0);
    copies.back().retain_grad();
    x = layer->forward(x, copies.back(), causal, tgt_pad, src_pad).output;  // (B, T, D)
  }
  if (decoder.norm) x = decoder.norm->forward(x);
  model.zero_grad();
  Variable loss = train::projected_loss(x, *model.out, t.labels, 0.0);
  loss.backward();
  MemoryPaths r;
  r.loss = loss.item();
  const Tensor total = memory.grad().to(DType::Float64).contiguous();  // (B, S, D)
  Tensor sum = Tensor::zeros(total.shape(), DType::Float64);
  for (const auto& c : copies) {
    const Tensor g = c.grad().to(DType::Float64).contiguous();  // (B, S, D)
    r.per_layer.push_back(l2_norm(g));
    for (int64_t i = 0; i < g.numel(); ++i) sum.data<double>()[i] += g.data<double>()[i];
  }
  r.total = l2_norm(total);
  double diff = 0;
  for (int64_t i = 0; i < total.numel(); ++i) diff += std::pow(total.data<double>()[i] - sum.data<double>()[i], 2);
  r.sum_difference = std::sqrt(diff) / r.total;
  model.zero_grad();
  return r;
}

bool is_encoder_parameter(const std::string& name) {
  return name.rfind("transformer.encoder.", 0) == 0 || name.rfind("src_emb.", 0) == 0;
}

StackGradNorms layer_grad_norms(const nn::Seq2SeqTransformer& model) {
  StackGradNorms n;
  const int64_t L = model.options().num_layers;
  std::vector<double> enc(static_cast<size_t>(L), 0.0), dec(static_cast<size_t>(L), 0.0);
  double emb = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const double g = p.grad().defined() ? l2_norm(p.grad()) : 0.0;
    for (int side = 0; side < 2; ++side) {
      const std::string prefix = side ? "transformer.decoder.layers." : "transformer.encoder.layers.";
      if (name.rfind(prefix, 0) != 0) continue;
      const size_t l = std::stoul(name.substr(prefix.size()));
      (side ? dec : enc)[l] += g * g;
    }
    if (name == "src_emb.weight") emb = g * g;
  }
  for (double& v : enc) n.encoder.push_back(std::sqrt(v));
  for (double& v : dec) n.decoder.push_back(std::sqrt(v));
  n.source_embedding = std::sqrt(emb);
  return n;
}

double relative_change(const nn::Seq2SeqTransformer& model, const std::map<std::string, Tensor>& start, bool encoder) {
  double d = 0, base = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (is_encoder_parameter(name) != encoder) continue;
    const Tensor a = p.data().to(DType::Float64).contiguous(), b = start.at(name).to(DType::Float64).contiguous();
    for (int64_t i = 0; i < a.numel(); ++i) d += std::pow(a.data<double>()[i] - b.data<double>()[i], 2), base += std::pow(b.data<double>()[i], 2);
  }
  return std::sqrt(d / base);
}

std::unique_ptr<nn::Seq2SeqTransformer> float64_copy(const nn::Seq2SeqTransformer& m) {
  auto c = std::make_unique<nn::Seq2SeqTransformer>(m.options(), 1);
  c->to(DType::Float64);
  c->load_state_dict(m.state_dict());
  return c;
}

}  // namespace gf::lab

#pragma once
// The measurements behind lab `crossattn` (lab/labs/crossattn.cpp; lab/parts/crossattn_paths.cpp),
// public so that tests can check them.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/seq2seq.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

// The gradient reaching the encoder's output (the memory) through each decoder layer's
// cross-attention: Seq2SeqTransformer's forward (every mask as model.masks says, no smoothing)
// written out with each decoder layer reading its own copy of the memory, so that each copy's
// gradient is that layer's part. The model's gradients are cleared before and after.
struct MemoryPaths {
  double loss = 0;
  std::vector<double> per_layer;  // |d loss / d memory| through decoder layer l's cross-attention, first layer first
  double total = 0;               // |d loss / d memory|
  double sum_difference = 0;      // |d loss / d memory - sum of the layers' parts| / |d loss / d memory|
};
MemoryPaths memory_gradient_paths(nn::Seq2SeqTransformer& model, const train::BatchTensors& batch);

// The gradient norm (Frobenius over every parameter) of each encoder and decoder layer, and of the
// source embedding, as the model's gradients stand (0 for a parameter without a gradient). (Named
// apart from lab/norm.h's LayerGradNorms: two classes of one name in gf::lab break the one-definition
// rule.)
struct StackGradNorms {
  std::vector<double> encoder, decoder;  // transformer.encoder.layers.l.*, transformer.decoder.layers.l.*
  double source_embedding = 0;           // src_emb.weight
};
StackGradNorms layer_grad_norms(const nn::Seq2SeqTransformer& model);

// Whether a parameter name belongs to the encoder side: the source embedding or the encoder stack.
bool is_encoder_parameter(const std::string& name);

// Relative distance |theta - theta0| / |theta0| over the encoder's parameters (encoder = true) or
// over all the others (the target embedding, the decoder and the output layer); start: the
// parameters' values at theta0, by name.
double relative_change(const nn::Seq2SeqTransformer& model, const std::map<std::string, Tensor>& start, bool encoder);
// A float64 copy of the model (its options and weights).
std::unique_ptr<nn::Seq2SeqTransformer> float64_copy(const nn::Seq2SeqTransformer& m);

}  // namespace gf::lab

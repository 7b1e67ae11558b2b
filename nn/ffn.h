#pragma once
// The position-wise feed-forward block of a Transformer layer, chosen by name
// (TransformerLayerOptions::feedforward) from one list (ffn.cpp). The built-in "standard" block,
// linear2(dropout(act(linear1(x)))), is owned by the layers directly as linear1/linear2 (PyTorch's
// names, so checkpoints and parity cases cross over) and computed by feed_forward(); FFN is the
// same block as a module of its own. Any other kind is a FeedForward module that the layer
// registers as its child `ff`: a program built on the installed library adds one with
// register_feedforward (examples/custom_layer adds SwiGLU).
#include <deque>
#include <memory>
#include <string>

#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/layer_options.h"
#include "nn/linear.h"

namespace gf::nn {

Variable feed_forward(const Variable& x, const Linear& linear1, const Linear& linear2, const ActivationKind& act, const Dropout* dropout);

// A feed-forward block as a module: (..., d_model) -> (..., d_model). It applies its own dropout,
// if any (the layer adds the residual dropout after it).
class FeedForward : public Module {
 public:
  virtual Variable forward(const Variable& x) const = 0;
};

class FFN : public FeedForward {
 public:
  // activation: a name from nn/activation.h's list.
  FFN(int64_t d_model, int64_t dim_feedforward, const std::string& activation = "relu", double dropout = 0.0,
      Generator& gen = default_generator());
  Variable forward(const Variable& x) const override;  // (..., d_model) -> (..., d_model)

  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout;
  const ActivationKind* activation;
};

struct FeedForwardKind {
  const char* name;  // "standard"
  const char* help;  // one line for --help
  // A new block for a layer with these options, drawing its initial weights from gen. nullptr
  // only for "standard", which the layers build themselves as linear1/linear2.
  std::shared_ptr<FeedForward> (*make)(const TransformerLayerOptions& opt, Generator& gen);
};

// What the encoder and decoder layers share about their feed-forward block: its modules, under
// PyTorch's names for the standard block or as `ff` for another kind, and its computation.
class FeedForwardLayer : public Module {
 public:
  std::shared_ptr<Linear> linear1, linear2;  // the standard feed-forward block (null with another kind)
  std::shared_ptr<Dropout> dropout;          // the standard block's inner dropout
  std::shared_ptr<FeedForward> ff;           // any other kind (options.feedforward), registered as `ff`
  const ActivationKind* activation;          // an entry of activation_kinds()

 protected:
  // Checks the options first, so that a bad option is named by validate(), not by the lookup.
  explicit FeedForwardLayer(const TransformerLayerOptions& opt);
  // Registers the block (linear1, dropout, linear2; or ff): the layer calls it where PyTorch's
  // layer registers its block, so that named_parameters() lists the same sequence.
  void register_feed_forward(const TransformerLayerOptions& opt, Generator& gen);
  Variable feed_forward_block(const Variable& x) const;  // (..., D) -> (..., D), before the residual dropout
};

const std::deque<FeedForwardKind>& feedforward_kinds();
// The entry, which lives as long as the program. Throws std::invalid_argument naming the known kinds.
const FeedForwardKind& find_feedforward(const std::string& name);
std::string feedforward_names();  // "standard"
// Adds a kind to the list; throws std::invalid_argument when the name is taken, not a word, or the
// factory is missing. nn/registry.h says when to call it.
void register_feedforward(FeedForwardKind kind);

}  // namespace gf::nn

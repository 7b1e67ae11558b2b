#include "nn/ffn.h"

#include "autograd/ops/dropout.h"
#include "autograd/ops/unary.h"
#include "nn/registry.h"

namespace gf::nn {

FeedForwardLayer::FeedForwardLayer(const TransformerLayerOptions& opt) : activation((opt.validate(), &find_activation(opt.activation))) {}

void FeedForwardLayer::register_feed_forward(const TransformerLayerOptions& opt, Generator& gen) {
  if (const FeedForwardKind& kind = find_feedforward(opt.feedforward); kind.make) {
    ff = register_module("ff", kind.make(opt, gen));
  } else {  // the standard block under PyTorch's names
    linear1 = register_module("linear1", std::make_shared<Linear>(opt.d_model, opt.dim_feedforward, true, gen));
    dropout = register_module("dropout", std::make_shared<Dropout>(opt.dropout));
    linear2 = register_module("linear2", std::make_shared<Linear>(opt.dim_feedforward, opt.d_model, true, gen));
  }
}

Variable FeedForwardLayer::feed_forward_block(const Variable& x) const {
  return ff ? ff->forward(x) : feed_forward(x, *linear1, *linear2, *activation, dropout.get());  // (..., D)
}

Variable feed_forward(const Variable& x, const Linear& linear1, const Linear& linear2, const ActivationKind& act, const Dropout* dropout) {
  Variable h = linear1.forward(x);  // (..., ff)
  // The fused form, where the activation has one, keeps only the hidden output linear2 keeps anyway.
  if (dropout && act.with_dropout) return linear2.forward(act.with_dropout(h, dropout->p, dropout->is_training(), default_generator()));
  h = act.fn(h);  // (..., ff)
  if (dropout) h = dropout->forward(h);
  return linear2.forward(h);  // (..., d_model)
}

FFN::FFN(int64_t d, int64_t ff, const std::string& act, double p, Generator& gen) : activation(&find_activation(act)) {
  linear1 = register_module("linear1", std::make_shared<Linear>(d, ff, true, gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(ff, d, true, gen));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Variable FFN::forward(const Variable& x) const { return feed_forward(x, *linear1, *linear2, *activation, dropout.get()); }

namespace {

std::deque<FeedForwardKind>& mutable_feedforward_kinds() {
  static std::deque<FeedForwardKind> kinds = {
      {"standard", "linear2(dropout(activation(linear1(x)))), nn.TransformerEncoderLayer's; --activation applies", nullptr},
  };
  return kinds;
}

}  // namespace

const std::deque<FeedForwardKind>& feedforward_kinds() { return mutable_feedforward_kinds(); }

const FeedForwardKind& find_feedforward(const std::string& name) { return registry_find(mutable_feedforward_kinds(), name, "feedforward"); }

std::string feedforward_names() { return registry_names(mutable_feedforward_kinds()); }

void register_feedforward(FeedForwardKind kind) {
  GF_CHECK(kind.make != nullptr, "register feedforward: '{}' has no factory (make)", kind.name ? kind.name : "");
  registry_add(mutable_feedforward_kinds(), std::move(kind), "feedforward");
}

}  // namespace gf::nn

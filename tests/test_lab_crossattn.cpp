// Lab `crossattn`: the memory's gradient is the sum of the decoder layers' cross-attention paths,
// the written-out forward is the model's, and the per-layer gradient norms see the encoder's
// gradient vanish when the memory is detached.
#include <doctest/doctest.h>

#include "lab/crossattn.h"
#include "nn_test_util.h"
#include "train/run/batch_loss.h"

using namespace gf;
using namespace gf::lab;

namespace {

train::BatchTensors batch() {
  return train::teacher_forced(Tensor::of({3, 4, 5, 6, 1, 2, 0, 0}, {2, 4}, DType::Int64),
                               Tensor::of({2, 5, 6, 3, 0, 2, 7, 8, 4, 3}, {2, 5}, DType::Int64));
}

}  // namespace

TEST_CASE("memory_gradient_paths: the model's loss, and d loss / d memory = the sum of the decoder layers' parts") {
  for (int64_t layers : {1, 3}) {
    CAPTURE(layers);
    nn::Seq2SeqTransformer m(gf::testing::tiny_options(layers, false), 20);
    m.to(DType::Float64);
    const MemoryPaths p = memory_gradient_paths(m, batch());
    CHECK(p.per_layer.size() == static_cast<size_t>(layers));
    CHECK(p.loss == doctest::Approx(train::batch_loss(m, batch(), 0.0).item()).epsilon(1e-13));
    CHECK(p.sum_difference < 1e-13);
    CHECK(p.total > 0);
    for (double g : p.per_layer) CHECK(g > 0);
    for (const auto& q : m.parameters()) CHECK(!q.grad().defined());  // cleared after
  }
}

TEST_CASE("layer_grad_norms: every layer's gradient, and none for the encoder with the memory detached") {
  nn::Seq2SeqTransformer m(gf::testing::tiny_options(2, false), 21);
  m.to(DType::Float64);
  for (bool on : {true, false}) {
    CAPTURE(on);
    m.encoder_gradient = on;
    m.zero_grad();
    train::batch_loss(m, batch(), 0.0).backward();
    const StackGradNorms n = layer_grad_norms(m);
    REQUIRE(n.encoder.size() == 2);
    REQUIRE(n.decoder.size() == 2);
    for (double g : n.decoder) CHECK(g > 0);
    for (double g : n.encoder) CHECK((on ? g > 0 : g == 0.0));
    CHECK((on ? n.source_embedding > 0 : n.source_embedding == 0.0));
  }
}

TEST_CASE("is_encoder_parameter: the source embedding and the encoder stack") {
  CHECK(is_encoder_parameter("src_emb.weight"));
  CHECK(is_encoder_parameter("transformer.encoder.layers.0.linear1.weight"));
  CHECK(is_encoder_parameter("transformer.encoder.norm.bias"));
  CHECK_FALSE(is_encoder_parameter("tgt_emb.weight"));
  CHECK_FALSE(is_encoder_parameter("transformer.decoder.layers.0.multihead_attn.in_proj_weight"));
  CHECK_FALSE(is_encoder_parameter("out.weight"));
}

// Transformer layers and stacks: float64 gradchecks (post-norm and pre-norm, relu and gelu),
// padding and causal invariances, batch invariance of the translator, cross-attention weights,
// and incremental decoding with a KV cache.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "gradcheck_util.h"
#include "nn/ffn.h"
#include "nn/layer_norm.h"
#include "nn/masks.h"
#include "nn/seq2seq.h"
#include "nn_test_util.h"
#include "tensor/kernels/indexing.h"

using namespace gf;
using namespace gf::testing;
using nn::TransformerLayerOptions;

namespace {

TransformerLayerOptions layer_options(int64_t d, int64_t heads, int64_t ff, bool norm_first, const std::string& act) {
  TransformerLayerOptions o;
  o.d_model = d;
  o.nhead = heads;
  o.dim_feedforward = ff;
  o.dropout = 0.0;
  o.activation = act;
  o.norm_first = norm_first;
  return o;
}

// Random values for every parameter (LayerNorm weights near 1, biases non-zero), so that no
// parameter sits at a value that could hide a mistake (e.g. a zero bias or a unit scale).
void randomise(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    Tensor t = p.data();
    const bool is_norm_weight = name.find("norm") != std::string::npos && name.find("weight") != std::string::npos;
    if (is_norm_weight) kernels::uniform_(t, 0.5, 1.5, gen);
    else kernels::uniform_(t, -0.5, 0.5, gen);
  }
}

// Rows [start, start + n) of dim `dim`, as a dense copy.
Tensor rows(const Tensor& t, int64_t dim, int64_t start, int64_t n) { return t.narrow(dim, start, n).contiguous(); }

}  // namespace

TEST_CASE("gradcheck: FFN and LayerNorm modules in float64") {
  for (std::string act : {"relu", "gelu"}) {
    CAPTURE(act);
    Generator gen(1);
    nn::FFN ffn(4, 6, act, 0.0, gen);
    ffn.to(DType::Float64);
    auto fn = [&](const std::vector<Variable>& in) { return ffn.forward(in[0]); };
    GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({2, 3, 4}, 2)), ffn.linear1->weight, ffn.linear1->bias, ffn.linear2->weight,
                                              ffn.linear2->bias}));
  }
  nn::LayerNorm ln(5);
  ln.to(DType::Float64);
  randomise(ln, 3);
  auto fn = [&](const std::vector<Variable>& in) { return ln.forward(in[0]) * in[0]; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({3, 5}, 4)), ln.weight, ln.bias}));
}

TEST_CASE("gradcheck: TransformerEncoderLayer, post-norm and pre-norm, relu and gelu, with padding") {
  const int64_t B = 2, S = 3, D = 4;
  Tensor kpm = Tensor::of({0, 0, 0, 0, 0, 1}, {B, S}, DType::Bool);  // (2, 3)
  for (bool norm_first : {false, true})
    for (std::string act : {"relu", "gelu"}) {
      CAPTURE(norm_first);
      CAPTURE(act);
      Generator gen(10);
      nn::TransformerEncoderLayer layer(layer_options(D, 2, 6, norm_first, act), gen);
      layer.to(DType::Float64);
      randomise(layer, 11);
      auto fn = [&](const std::vector<Variable>& in) { return layer.forward(in[0], kpm); };
      GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({B, S, D}, 12)), layer.self_attn->in_proj_weight, layer.linear1->weight,
                                                layer.norm1->parameter("weight"), layer.norm2->parameter("bias")}));
      // With a causal src_mask too.
      auto fn_mask = [&](const std::vector<Variable>& in) { return layer.forward(in[0], kpm, nn::make_causal_mask(S)); };
      GF_CHECK_GRADS(fn_mask, (std::vector<Variable>{leaf(randn({B, S, D}, 13)), layer.linear2->weight}));
    }
}

TEST_CASE("residual_scale (DeepNorm's alpha): each residual is x * alpha + sublayer(x), post-norm and pre-norm; gradchecked") {
  const int64_t B = 2, S = 3, D = 4;
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    Generator gen(20);
    nn::TransformerEncoderLayer layer(layer_options(D, 2, 6, norm_first, "relu"), gen);
    layer.to(DType::Float64);
    randomise(layer, 21);
    const Variable x = leaf(randn({B, S, D}, 22));
    const double alpha = 1.7;
    layer.residual_scale = alpha;
    // The same layer written out from its modules.
    auto sa = [&](const Variable& h) { return layer.self_attn->forward(h, h, h).output; };
    auto ff = [&](const Variable& h) { return nn::feed_forward(h, *layer.linear1, *layer.linear2, *layer.activation, nullptr); };
    Variable want;
    if (norm_first) {
      const Variable h = x * alpha + sa(layer.norm1->forward(x));
      want = h * alpha + ff(layer.norm2->forward(h));
    } else {
      const Variable h = layer.norm1->forward(x * alpha + sa(x));
      want = layer.norm2->forward(h * alpha + ff(h));
    }
    CHECK(max_abs_diff(layer.forward(x).data(), want.data()) < 1e-12);
    auto fn = [&](const std::vector<Variable>& in) { return layer.forward(in[0]); };
    GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({B, S, D}, 23)), layer.linear2->weight}));
    // 1 (the default) is the standard layer, bit for bit.
    layer.residual_scale = 1.0;
    nn::TransformerEncoderLayer plain(layer_options(D, 2, 6, norm_first, "relu"), gen);
    plain.to(DType::Float64);
    plain.load_state_dict(layer.state_dict());
    CHECK(max_abs_diff(layer.forward(x).data(), plain.forward(x).data()) == 0.0);
  }
  // The decoder layer: the post-norm residual scaled.
  Generator gen(30);
  nn::TransformerDecoderLayer dec(layer_options(D, 2, 6, false, "relu"), gen);
  dec.to(DType::Float64);
  randomise(dec, 31);
  const Variable y = leaf(randn({B, S, D}, 32)), mem = leaf(randn({B, 2, D}, 33));
  const Tensor base = dec.forward(y, mem).output.data().clone();
  dec.residual_scale = 2.0;
  CHECK(max_abs_diff(dec.forward(y, mem).output.data(), base) > 1e-3);
  auto fn = [&](const std::vector<Variable>& in) { return dec.forward(in[0], in[1]).output; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({B, S, D}, 34)), leaf(randn({B, 2, D}, 35))}));
}

TEST_CASE("gradcheck: TransformerDecoderLayer, post-norm and pre-norm, relu and gelu, with all three masks") {
  const int64_t B = 2, T = 3, S = 4, D = 4;
  Tensor causal = nn::make_causal_mask(T);                                      // (3, 3)
  Tensor tgt_pad = Tensor::of({0, 0, 0, 0, 0, 1}, {B, T}, DType::Bool);        // (2, 3)
  Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);  // (2, 4)
  for (bool norm_first : {false, true})
    for (std::string act : {"relu", "gelu"}) {
      CAPTURE(norm_first);
      CAPTURE(act);
      Generator gen(20);
      nn::TransformerDecoderLayer layer(layer_options(D, 2, 6, norm_first, act), gen);
      layer.to(DType::Float64);
      randomise(layer, 21);
      auto fn = [&](const std::vector<Variable>& in) { return layer.forward(in[0], in[1], causal, tgt_pad, src_pad).output; };
      GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({B, T, D}, 22)), leaf(randn({B, S, D}, 23)), layer.self_attn->in_proj_weight,
                                                layer.multihead_attn->in_proj_weight, layer.multihead_attn->out_proj->bias,
                                                layer.linear2->weight, layer.norm3->parameter("weight"), layer.norm2->parameter("bias")}));
      // The cross-attention weights are differentiable outputs as well.
      auto weights = [&](const std::vector<Variable>& in) {
        return layer.forward(in[0], in[1], causal, tgt_pad, src_pad, true).cross_weights;
      };
      GF_CHECK_GRADS(weights, (std::vector<Variable>{leaf(randn({B, T, D}, 24)), leaf(randn({B, S, D}, 25)), layer.norm1->parameter("bias")}));
    }
}

TEST_CASE("gradcheck: encoder and decoder stacks with their final norms; the translator w.r.t. parameters") {
  const int64_t B = 2, T = 3, S = 4, D = 4;
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    Generator gen(30);
    TransformerLayerOptions o = layer_options(D, 2, 6, norm_first, "gelu");
    nn::TransformerEncoder enc(o, 2, true, gen);
    nn::TransformerDecoder dec(o, 2, true, gen);
    enc.to(DType::Float64);
    dec.to(DType::Float64);
    randomise(enc, 31);
    randomise(dec, 32);
    Tensor src_pad = Tensor::of({0, 0, 0, 1, 0, 0, 0, 0}, {B, S}, DType::Bool);
    auto fn = [&](const std::vector<Variable>& in) {
      Variable memory = enc.forward(in[0], src_pad);  // (B, S, D)
      return dec.forward(in[1], memory, nn::make_causal_mask(T), Tensor(), src_pad).output;
    };
    GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({B, S, D}, 33)), leaf(randn({B, T, D}, 34)), enc.norm->parameter("weight"),
                                              dec.layers->operator[](1).multihead_attn->in_proj_bias, enc.layers->operator[](0).linear1->bias}));

    nn::Seq2SeqTransformer model(tiny_options(2, norm_first), 35);
    model.to(DType::Float64);
    Tensor src = Tensor::of({3, 4, 5, 0, 1, 2, 3, 4}, {B, S}, DType::Int64);
    Tensor tgt = Tensor::of({2, 7, 8, 2, 5, 6}, {B, T}, DType::Int64);
    auto logits = [&](const std::vector<Variable>&) { return model.forward(src, tgt); };
    GF_CHECK_GRADS(logits, (std::vector<Variable>{model.src_emb->weight, model.transformer->decoder->norm->parameter("bias"),
                                                  model.transformer->encoder->layers->operator[](1).self_attn->in_proj_weight}));
  }
}

TEST_CASE("encoder: values at padded positions do not reach the real positions") {
  for (bool norm_first : {false, true}) {
    Generator gen(40);
    nn::TransformerEncoder enc(layer_options(8, 2, 16, norm_first, "relu"), 2, true, gen);
    randomise(enc, 41);
    Tensor x = randn({2, 5, 8}, 42, 1.0, DType::Float32);            // (2, 5, 8)
    Tensor kpm = Tensor::of({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5}, DType::Bool);
    Tensor y = enc.forward(Variable(x), kpm).data();
    Tensor x2 = x.clone();
    for (int64_t d = 0; d < 8; ++d) {
      x2.flat_set((0 * 5 + 3) * 8 + d, 100.0 + d);
      x2.flat_set((0 * 5 + 4) * 8 + d, -7.0);
    }
    Tensor y2 = enc.forward(Variable(x2), kpm).data();
    CHECK(max_abs_diff(rows(y, 1, 0, 3), rows(y2, 1, 0, 3)) == 0.0);
    CHECK(max_abs_diff(rows(y, 0, 1, 1), rows(y2, 0, 1, 1)) == 0.0);
    CHECK(max_abs_diff(rows(y, 1, 3, 2), rows(y2, 1, 3, 2)) > 1e-3);  // the padded rows themselves do change
  }
}

TEST_CASE("decoder: the causal mask keeps later target positions from earlier outputs") {
  for (bool norm_first : {false, true}) {
    Generator gen(50);
    nn::TransformerDecoder dec(layer_options(8, 2, 16, norm_first, "gelu"), 2, true, gen);
    randomise(dec, 51);
    Tensor tgt = randn({2, 4, 8}, 52, 1.0, DType::Float32);     // (2, 4, 8)
    Variable memory(randn({2, 5, 8}, 53, 1.0, DType::Float32));  // (2, 5, 8)
    Tensor causal = nn::make_causal_mask(4);
    Tensor y = dec.forward(Variable(tgt), memory, causal).output.data();
    Tensor tgt2 = tgt.clone();
    for (int64_t d = 0; d < 8; ++d) tgt2.flat_set((1 * 4 + 2) * 8 + d, 3.0);
    Tensor y2 = dec.forward(Variable(tgt2), memory, causal).output.data();
    CHECK(max_abs_diff(rows(y, 1, 0, 2), rows(y2, 1, 0, 2)) == 0.0);
    CHECK(max_abs_diff(rows(y, 1, 2, 2), rows(y2, 1, 2, 2)) > 1e-3);
    // Without the mask, position 0 does see position 2.
    Tensor open = dec.forward(Variable(tgt), memory).output.data(), open2 = dec.forward(Variable(tgt2), memory).output.data();
    CHECK(max_abs_diff(rows(rows(open, 0, 1, 1), 1, 0, 1), rows(rows(open2, 0, 1, 1), 1, 0, 1)) > 1e-4);
  }
}

TEST_CASE("a decoder layer's self-attention with the causal mask: weights above the diagonal are exactly 0") {
  Generator gen(55);
  nn::TransformerDecoderLayer layer(layer_options(8, 2, 16, false, "relu"), gen);
  randomise(layer, 56);
  Variable x(randn({2, 4, 8}, 57, 1.0, DType::Float32));                 // (2, 4, 8)
  Tensor tgt_pad = Tensor::of({0, 0, 0, 0, 0, 0, 0, 1}, {2, 4}, DType::Bool);
  Tensor w = layer.self_attn->forward(x, x, x, tgt_pad, nn::make_causal_mask(4), true).weights.data();  // (2, 2, 4, 4)
  CHECK(shape_str(w.shape()) == "(2, 2, 4, 4)");
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 4; ++i) {
        double s = 0;
        for (int64_t j = 0; j < 4; ++j) {
          s += w.at({b, h, i, j});
          const bool blocked = j > i || (b == 1 && j == 3);
          if (blocked) CHECK(w.at({b, h, i, j}) == 0.0);
          else CHECK(w.at({b, h, i, j}) > 0.0);
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
      }
}

TEST_CASE("batch invariance: a sentence alone and padded into a batch gives the same memory and logits") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    nn::Seq2SeqOptions o;
    o.src_vocab = 23;
    o.tgt_vocab = 26;
    o.layer.d_model = 16;
    o.layer.nhead = 4;
    o.num_layers = 2;
    o.layer.dim_feedforward = 32;
    o.layer.dropout = 0.1;
    o.layer.norm_first = norm_first;
    nn::Seq2SeqTransformer model(o, 60);
    model.eval();  // dropout off
    Tensor src_alone = Tensor::of({5, 6, 7}, {1, 3}, DType::Int64);
    Tensor tgt_alone = Tensor::of({2, 8, 9, 10}, {1, 4}, DType::Int64);
    // The same sentence as row 1 of a batch with longer ones.
    Tensor src = Tensor::of({4, 5, 6, 7, 8, 9,  //
                             5, 6, 7, 0, 0, 0,  //
                             9, 8, 7, 6, 5, 0},
                            {3, 6}, DType::Int64);
    Tensor tgt = Tensor::of({2, 11, 12, 13, 14, 15, 16,  //
                             2, 8, 9, 10, 0, 0, 0,       //
                             2, 3, 4, 5, 6, 0, 0},
                            {3, 7}, DType::Int64);
    Tensor mem_alone = model.encode(src_alone, nn::make_pad_mask(src_alone, 0)).data();  // (1, 3, 16)
    Tensor mem = model.encode(src, nn::make_pad_mask(src, 0)).data();                    // (3, 6, 16)
    CHECK(max_abs_diff(mem_alone, rows(rows(mem, 0, 1, 1), 1, 0, 3)) < 1e-6);
    Tensor logits_alone = model.forward(src_alone, tgt_alone).data();  // (1, 4, 26)
    Tensor logits = model.forward(src, tgt).data();                    // (3, 7, 26)
    CHECK(max_abs_diff(logits_alone, rows(rows(logits, 0, 1, 1), 1, 0, 4)) < 1e-6);
    // And the other rows really are different sentences.
    CHECK(max_abs_diff(logits_alone, rows(rows(logits, 0, 2, 1), 1, 0, 4)) > 1e-2);
    // In training mode with dropout the outputs differ (the invariance needs eval).
    model.train();
    CHECK(max_abs_diff(logits_alone, rows(rows(model.forward(src, tgt).data(), 0, 1, 1), 1, 0, 4)) > 1e-4);
  }
}

TEST_CASE("encoder_gradient = false: the same logits and decoder gradients, and no gradient for any encoder parameter") {
  nn::Seq2SeqTransformer model(tiny_options(2, false), 70);
  model.to(DType::Float64);
  Tensor src = Tensor::of({3, 4, 5, 0, 1, 2, 3, 4}, {2, 4}, DType::Int64);
  Tensor tgt = Tensor::of({2, 7, 8, 2, 5, 6}, {2, 3}, DType::Int64);
  // Gradients of sum(logits^2) by parameter name, with the switch as given.
  auto grads = [&](bool on, Tensor* logits) {
    model.encoder_gradient = on;
    model.zero_grad();
    Variable y = model.forward(src, tgt);  // (2, 3, V)
    *logits = y.data();
    sum(y * y).backward();
    std::map<std::string, Tensor> g;
    for (const auto& [name, p] : model.named_parameters()) g[name] = p.grad().defined() ? p.grad().clone() : Tensor();
    return g;
  };
  Tensor with, without;
  const auto on = grads(true, &with), off = grads(false, &without);
  CHECK(max_abs_diff(with, without) == 0.0);
  int64_t encoder_params = 0;
  for (const auto& [name, g] : off) {
    CAPTURE(name);
    const bool encoder = name.rfind("transformer.encoder.", 0) == 0 || name.rfind("src_emb.", 0) == 0;
    if (encoder) {
      ++encoder_params;
      CHECK(!g.defined());                 // never reached by backward
      CHECK(on.at(name).defined());        // ... which it is with the switch on
    } else if (g.defined()) {
      CHECK(max_abs_diff(g, on.at(name)) == 0.0);  // the decoder's gradients do not change
    }
  }
  CHECK(encoder_params == 2 * 12 + 2 + 1);  // 2 layers of 12 tensors, the final norm's 2, src_emb
  model.encoder_gradient = true;
}

TEST_CASE("cross-attention weights: (B, H, 3, 4) per layer, rows sum to 1, padded sources get 0") {
  // Through the decoder layer.
  Generator gen(70);
  nn::TransformerDecoderLayer layer(layer_options(8, 2, 16, false, "relu"), gen);
  randomise(layer, 71);
  Variable tgt(randn({2, 3, 8}, 72, 1.0, DType::Float32)), memory(randn({2, 4, 8}, 73, 1.0, DType::Float32));
  Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 0, 1}, {2, 4}, DType::Bool);
  nn::DecoderLayerOutput o = layer.forward(tgt, memory, nn::make_causal_mask(3), Tensor(), src_pad, true);
  REQUIRE(o.cross_weights.defined());
  CHECK(shape_str(o.cross_weights.shape()) == "(2, 2, 3, 4)");
  const Tensor& w = o.cross_weights.data();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t l = 0; l < 3; ++l) {
        double s = 0;
        for (int64_t j = 0; j < 4; ++j) s += w.at({b, h, l, j});
        CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
        CHECK(w.at({0, h, l, 3}) > 0.0);
        CHECK(w.at({1, h, l, 3}) == 0.0);
      }
  CHECK_FALSE(layer.forward(tgt, memory, nn::make_causal_mask(3), Tensor(), src_pad).cross_weights.defined());

  // Through the translator: one tensor per decoder layer.
  nn::Seq2SeqTransformer model(tiny_options(2), 74);
  model.eval();
  Tensor src = Tensor::of({3, 4, 5, 6, 1, 2, 0, 0}, {2, 4}, DType::Int64);
  Tensor tgt_ids = Tensor::of({2, 7, 8, 2, 5, 6}, {2, 3}, DType::Int64);
  nn::DecoderOutput d = model.forward_with_attention(src, tgt_ids);
  CHECK(shape_str(d.output.shape()) == "(2, 3, 9)");
  // Asking for the weights takes the unfused attention path; without, the fused op (same values
  // up to float32 rounding, docs/attention.md).
  CHECK(max_abs_diff(d.output.data(), model.forward(src, tgt_ids).data()) < 1e-5);
  REQUIRE(d.cross_weights.size() == 2);
  for (const Variable& cw : d.cross_weights) {
    CHECK(shape_str(cw.shape()) == "(2, 2, 3, 4)");
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t l = 0; l < 3; ++l) {
        CHECK(cw.data().at({1, h, l, 2}) == 0.0);
        CHECK(cw.data().at({1, h, l, 3}) == 0.0);
        CHECK(cw.data().at({1, h, l, 0}) + cw.data().at({1, h, l, 1}) == doctest::Approx(1.0).epsilon(1e-6));
      }
  }
}

TEST_CASE("incremental decoding: forward_step with a KV cache equals the full causal forward") {
  const int64_t B = 2, T = 5, S = 4, D = 8;
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    Generator gen(80);
    nn::TransformerDecoder dec(layer_options(D, 2, 16, norm_first, "gelu"), 2, true, gen);
    randomise(dec, 81);
    Tensor tgt = randn({B, T, D}, 82, 1.0, DType::Float32);     // (2, 5, 8)
    Variable memory(randn({B, S, D}, 83, 1.0, DType::Float32));  // (2, 4, 8)
    Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);
    nn::DecoderOutput full = dec.forward(Variable(tgt), memory, nn::make_causal_mask(T), Tensor(), src_pad, true);
    std::vector<nn::DecoderLayerCache> caches = dec.start_cache(memory, T);
    REQUIRE(caches.size() == 2);
    for (int64_t t = 0; t < T; ++t) {
      CAPTURE(t);
      nn::DecoderOutput step = dec.forward_step(Variable(rows(tgt, 1, t, 1)), caches, src_pad, true);  // (2, 1, 8)
      CHECK(shape_str(step.output.shape()) == "(2, 1, 8)");
      CHECK_FALSE(step.output.requires_grad());  // no graph while decoding
      CHECK(max_abs_diff(step.output.data(), rows(full.output.data(), 1, t, 1)) < 1e-5);
      REQUIRE(step.cross_weights.size() == 2);
      for (size_t i = 0; i < 2; ++i) CHECK(max_abs_diff(step.cross_weights[i].data(), rows(full.cross_weights[i].data(), 2, t, 1)) < 1e-6);
      CHECK(caches[0].self.length == t + 1);
      CHECK(caches[1].self.length == t + 1);
    }
    CHECK(caches[0].bytes() == 4 * (2 * B * 2 * T * 4 + 2 * B * 2 * S * 4));
    // The cache is full now.
    CHECK_THROWS_AS(dec.forward_step(Variable(rows(tgt, 1, 0, 1)), caches, src_pad), std::length_error);
    GF_CHECK_CONTAINS(error_of([&] { dec.forward_step(Variable(rows(tgt, 1, 0, 2)), caches, src_pad); }), "expected (B, 1, D), got (2, 2, 8)");
    std::vector<nn::DecoderLayerCache> one(1);
    GF_CHECK_CONTAINS(error_of([&] { dec.forward_step(Variable(rows(tgt, 1, 0, 1)), one, src_pad); }), "1 caches for 2 layers");
  }
}

// --kv-cache bf16: keys and values rounded once to bfloat16 as they are stored (relative error at
// most 2^-9), so a step's output moves by about that much, on the one-query kernel (attend_one)
// and on the path that asks for the weights (the cache widened for attend); the cache is half the bytes.
TEST_CASE("incremental decoding with a bfloat16 KV cache: half the bytes, outputs within bfloat16 rounding") {
  const int64_t B = 2, T = 5, S = 4, D = 8;
  Generator gen(84);
  nn::TransformerDecoder dec(layer_options(D, 2, 16, false, "relu"), 2, true, gen);
  randomise(dec, 85);
  Tensor tgt = randn({B, T, D}, 86, 1.0, DType::Float32);     // (2, 5, 8)
  Variable memory(randn({B, S, D}, 87, 1.0, DType::Float32));  // (2, 4, 8)
  Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);
  nn::DecoderOutput full = dec.forward(Variable(tgt), memory, nn::make_causal_mask(T), Tensor(), src_pad, false);
  for (bool need_weights : {false, true}) {
    CAPTURE(need_weights);
    std::vector<nn::DecoderLayerCache> caches = dec.start_cache(memory, T, DType::BFloat16);
    CHECK(caches[0].self.k.dtype() == DType::BFloat16);
    CHECK(caches[0].cross_k.dtype() == DType::BFloat16);
    CHECK(caches[0].bytes() == 2 * (2 * B * 2 * T * 4 + 2 * B * 2 * S * 4));  // half of the float32 cache's
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      nn::DecoderOutput step = dec.forward_step(Variable(rows(tgt, 1, t, 1)), caches, src_pad, need_weights);  // (2, 1, 8)
      CHECK(step.output.dtype() == DType::Float32);
      worst = std::max(worst, max_abs_diff(step.output.data(), rows(full.output.data(), 1, t, 1)));
    }
    // Outputs of order 1 after the final LayerNorm: float32's cache gives < 1e-5 (above), bf16's
    // rounding about 1e-2 at most on this model.
    CHECK(worst > 1e-6);  // the cache did round
    CHECK(worst < 3e-2);
  }
}

TEST_CASE("incremental decoding through the translator: embed_tgt with an offset + forward_step + project") {
  for (bool norm_first : {false, true}) {
    nn::Seq2SeqTransformer model(tiny_options(2, norm_first, 0.3), 90);
    model.eval();
    Tensor src = Tensor::of({3, 4, 5, 6, 1, 2, 0, 0}, {2, 4}, DType::Int64);
    Tensor tgt = Tensor::of({2, 7, 8, 4, 1, 2, 5, 6, 3, 8}, {2, 5}, DType::Int64);  // no padding
    Tensor logits = model.forward(src, tgt).data();                                  // (2, 5, 9)
    Tensor src_pad = nn::make_pad_mask(src, 0);
    NoGradGuard ng;
    Variable memory = model.encode(src, src_pad);
    auto caches = model.transformer->decoder->start_cache(memory, 8);
    for (int64_t t = 0; t < 5; ++t) {
      Variable x = model.embed_tgt(rows(tgt, 1, t, 1), t);  // (2, 1, 4)
      Tensor step = model.project(model.transformer->decoder->forward_step(x, caches, src_pad).output).data();  // (2, 1, 9)
      CHECK(max_abs_diff(step, rows(logits, 1, t, 1)) < 1e-5);
    }
  }
}

TEST_CASE("DecoderLayerCache::select_rows reorders (and repeats) batch rows, as beam search does") {
  const int64_t B = 3, T = 5, S = 4, D = 8;
  Generator gen(100);
  nn::TransformerDecoder dec(layer_options(D, 2, 16, false, "relu"), 2, true, gen);
  randomise(dec, 101);
  Tensor tgt = randn({B, T, D}, 102, 1.0, DType::Float32);     // (3, 5, 8)
  Tensor mem = randn({B, S, D}, 103, 1.0, DType::Float32);     // (3, 4, 8)
  Tensor src_pad = Tensor::of({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1}, {B, S}, DType::Bool);
  const std::vector<int64_t> order = {2, 0, 0};
  // The batch the cache should hold after the reorder.
  auto pick = [&](const Tensor& t) {
    Shape shape = t.shape();
    shape[0] = 3;
    Tensor out = Tensor::empty(shape, t.dtype());
    for (int64_t i = 0; i < 3; ++i) {
      Tensor dst = out.select(0, i);
      dst.copy_(t.select(0, order[static_cast<size_t>(i)]));
    }
    return out;
  };
  Tensor tgt_r = pick(tgt), mem_r = pick(mem), pad_r = pick(src_pad);
  Tensor full = dec.forward(Variable(tgt_r), Variable(mem_r), nn::make_causal_mask(T), Tensor(), pad_r).output.data();  // (3, 5, 8)

  auto caches = dec.start_cache(Variable(mem), T);
  for (int64_t t = 0; t < 2; ++t) dec.forward_step(Variable(rows(tgt, 1, t, 1)), caches, src_pad);
  for (auto& c : caches) c.select_rows(order);
  CHECK(caches[0].self.length == 2);
  CHECK(shape_str(caches[1].self.k.shape()) == "(3, 2, 5, 4)");
  for (int64_t t = 2; t < T; ++t) {
    Tensor step = dec.forward_step(Variable(rows(tgt_r, 1, t, 1)), caches, pad_r).output.data();  // (3, 1, 8)
    CHECK(max_abs_diff(step, rows(full, 1, t, 1)) < 1e-5);
  }
  // Shrinking to fewer rows works too; a row out of range is an error.
  auto more = dec.start_cache(Variable(mem), T);
  more[0].select_rows({1});
  CHECK(more[0].self.batch() == 1);
  CHECK(more[0].cross_k.size(0) == 3);  // the source's K/V are shared, not copied: row 0 reads row 1
  CHECK(more[0].cross_rows == std::vector<int64_t>{1});
  GF_CHECK_CONTAINS(error_of([&] { more[1].select_rows({0, 3}); }), "index 3 at position 1 is out of range for a table of 3 rows");
}

TEST_CASE("KVCache::select_rows equals index_select on the filled positions, moving no keys until materialised") {
  const int64_t B = 4, KV = 2, cap = 6, dk = 3;
  nn::MultiheadAttention mha(6, 2);
  nn::KVCache c = mha.start_cache(B, cap, DType::Float32);
  Tensor keys = randn({B, KV, cap, dk}, 110, 1.0, DType::Float32);  // (4, 2, 6, 3): what each step writes
  Tensor values = randn({B, KV, cap, dk}, 111, 1.0, DType::Float32);
  // The reference: a plain cache whose rows are moved by index_select, as before position_rows.
  Tensor ref_k = Tensor::zeros({B, KV, cap, dk}), ref_v = Tensor::zeros({B, KV, cap, dk});  // (B, KV, capacity, d_k)
  auto step = [&](int64_t n) {  // writes position `length` of rows [0, n) as forward_cached does
    c.k.narrow(0, 0, n).narrow(2, c.length, 1).copy_(keys.narrow(0, 0, n).narrow(2, c.length, 1));
    c.v.narrow(0, 0, n).narrow(2, c.length, 1).copy_(values.narrow(0, 0, n).narrow(2, c.length, 1));
    ref_k.narrow(0, 0, n).narrow(2, c.length, 1).copy_(keys.narrow(0, 0, n).narrow(2, c.length, 1));
    ref_v.narrow(0, 0, n).narrow(2, c.length, 1).copy_(values.narrow(0, 0, n).narrow(2, c.length, 1));
    ++c.length;
  };
  auto reorder = [&](const std::vector<int64_t>& order) {
    Tensor index = Tensor::from_vector(order, {static_cast<int64_t>(order.size())});
    ref_k = kernels::index_select(ref_k, index);
    ref_v = kernels::index_select(ref_v, index);
    c.select_rows(order);
  };
  const void* buffer = c.k.storage()->data();
  step(4);
  reorder({3, 1, 1, 0});
  step(4);
  reorder({2, 0, 3, 3});
  step(4);
  reorder({1, 3});  // shrinks
  step(2);
  CHECK(c.batch() == 2);
  CHECK(c.k.storage()->data() == buffer);  // nothing was copied
  CHECK(c.bytes() == 2 * 4 * B * KV * cap * dk);
  nn::KVCache copy = c;
  copy.materialize();
  CHECK(copy.position_rows.empty());
  auto filled = [](const Tensor& t) { return t.narrow(2, 0, 4).contiguous(); };  // (n, KV, 4, d_k)
  CHECK(max_abs_diff(filled(copy.k), filled(ref_k)) == 0.0);
  CHECK(max_abs_diff(filled(copy.v), filled(ref_v)) == 0.0);
  // attend_one through position_rows equals attend on the materialised rows.
  Variable q(randn({2, 2, 1, dk}, 112, 1.0, DType::Float32));  // (2, 2, 1, 3)
  NoGradGuard ng;
  Tensor want = mha.attend(q, Variable(filled(ref_k)), Variable(filled(ref_v)), Tensor(), Tensor(), false).output.data();  // (2, 1, 6)
  CHECK(max_abs_diff(mha.attend_one(q, c.k, c.v, 4, {}, Tensor(), c.position_rows).data(), want) < 1e-5);
  // More rows than the buffer holds: a new buffer, gathered.
  reorder({0, 1, 1, 0, 1, 0});
  CHECK(c.batch() == 6);
  CHECK(c.position_rows.empty());
  CHECK(max_abs_diff(filled(c.k), filled(ref_k)) == 0.0);
  GF_CHECK_CONTAINS(error_of([&] { c.select_rows({6}); }), "index 6 at position 0 is out of range for a table of 6 rows");
}

TEST_CASE("attend_one (one query per row, shared key/value rows) equals attend on the gathered rows, with masks") {
  const int64_t R = 5, Bk = 3, H = 4, S = 6, len = 5;
  // d_k 64 takes attend_one's compile-time head width; 2 the general one.
  for (int64_t dk : {2, 64})
  for (int64_t kv_heads : {4, 2, 1}) {
    CAPTURE(dk);
    CAPTURE(kv_heads);
    Generator gen(120);
    nn::MultiheadAttention mha(H * dk, H, 0.0, true, gen, kv_heads);
    randomise(mha, 121);
    NoGradGuard ng;
    Variable q(randn({R, H, 1, dk}, 122, 1.0, DType::Float32));     // (5, 4, 1, d_k)
    Tensor k = randn({Bk, kv_heads, S, dk}, 123, 1.0, DType::Float32);  // (3, KV, 6, d_k): positions [0, 5) used
    Tensor v = randn({Bk, kv_heads, S, dk}, 124, 1.0, DType::Float32);
    const std::vector<int64_t> kv_rows = {2, 0, 0, 1, 2};
    Tensor index = Tensor::from_vector(kv_rows, {R});
    Variable kr(kernels::index_select(k, index).narrow(2, 0, len).contiguous());  // (5, KV, 5, d_k)
    Variable vr(kernels::index_select(v, index).narrow(2, 0, len).contiguous());
    // Row 4 has every key blocked: zeros before out_proj, as attend's softmax gives.
    Tensor blocked = Tensor::of({0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {R, len}, DType::Bool);
    Tensor added = randn({R, len}, 125, 1.0, DType::Float32);  // (5, 5): a float mask is added
    for (const Tensor& kpm : {Tensor(), blocked, added}) {
      Tensor want = mha.attend(q, kr, vr, kpm, Tensor(), false).output.data();    // (5, 1, H * d_k)
      Tensor got = mha.attend_one(q, k, v, len, kv_rows, kpm).data();           // (5, 1, H * d_k)
      CHECK(shape_str(got.shape()) == shape_str({R, 1, H * dk}));
      CHECK(max_abs_diff(got, want) < 1e-5);
    }
    GF_CHECK_CONTAINS(error_of([&] { mha.attend_one(q, k, v, len, {0, 1}, Tensor()); }), "5 query rows, 3 key/value rows, 2 row indices and 0 position rows");
  }
}

TEST_CASE("attend_one never reads the keys and values blocked at the end of a row (a source's padding)") {
  const int64_t R = 2, H = 2, dk = 2, len = 5;
  Generator gen(130);
  nn::MultiheadAttention mha(H * dk, H, 0.0, true, gen);
  randomise(mha, 131);
  NoGradGuard ng;
  Variable q(randn({R, H, 1, dk}, 132, 1.0, DType::Float32));  // (2, 2, 1, 2)
  Tensor k = randn({R, H, len, dk}, 133, 1.0, DType::Float32);  // (2, 2, 5, 2)
  Tensor v = randn({R, H, len, dk}, 134, 1.0, DType::Float32);
  // Row 0 ends in two blocked keys; row 1 has one blocked in the middle (read, weight 0) and one at the end.
  Tensor blocked = Tensor::of({0, 0, 0, 1, 1, 0, 1, 0, 0, 1}, {R, len}, DType::Bool);
  Tensor want = mha.attend_one(q, k, v, len, {}, blocked).data();  // (2, 1, 4)
  // NaN in the trailing blocked positions: had they been read, 0 * NaN would reach the output.
  Tensor kn = k.clone(), vn = v.clone();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < dk; ++j) {
      for (int64_t s : {3, 4}) kn.narrow(0, 0, 1).narrow(1, h, 1).narrow(2, s, 1).narrow(3, j, 1).fill_(NAN);
      for (int64_t s : {3, 4}) vn.narrow(0, 0, 1).narrow(1, h, 1).narrow(2, s, 1).narrow(3, j, 1).fill_(NAN);
      kn.narrow(0, 1, 1).narrow(1, h, 1).narrow(2, 4, 1).narrow(3, j, 1).fill_(NAN);
      vn.narrow(0, 1, 1).narrow(1, h, 1).narrow(2, 4, 1).narrow(3, j, 1).fill_(NAN);
    }
  Tensor got = mha.attend_one(q, kn, vn, len, {}, blocked).data();
  CHECK(max_abs_diff(got, want) == 0.0);
  // And the result is attention over the unblocked keys.
  Variable kr(k), vr(v);
  CHECK(max_abs_diff(want, mha.attend(q, kr, vr, blocked, Tensor(), false).output.data()) < 1e-5);
}

TEST_CASE("TransformerEncoder/Decoder without the final norm; names of a bare stack") {
  Generator gen(110);
  nn::TransformerEncoder enc(layer_options(4, 2, 6, false, "relu"), 1, false, gen);
  CHECK(enc.norm == nullptr);
  auto named = enc.named_parameters();
  CHECK(named.size() == 12);
  CHECK(named.front().first == "layers.0.self_attn.in_proj_weight");
  CHECK(named.back().first == "layers.0.norm2.bias");
  nn::TransformerDecoder dec(layer_options(4, 2, 6, false, "relu"), 1, true, gen);
  CHECK(dec.named_parameters().size() == 20);  // 18 in the layer + the final norm
  CHECK(dec.named_parameters().back().first == "norm.bias");
  // An encoder without its norm returns the last layer's output as it is.
  Variable x(randn({1, 3, 4}, 111, 1.0, DType::Float32));
  CHECK(max_abs_diff(enc.forward(x).data(), enc.layers->operator[](0).forward(x).data()) == 0.0);
}

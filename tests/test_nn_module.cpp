// Module machinery (names, state_dict, loading, modes, tying, checkpoints) and the small layers:
// Embedding, PositionalEncoding, Linear, LayerNorm, FFN, Dropout, masks.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <unistd.h>

#include "autograd/ops/arith.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"
#include "gradcheck_util.h"
#include "nn/ffn.h"
#include "nn/layer_norm.h"
#include "nn/masks.h"
#include "nn/seq2seq.h"
#include "nn_test_util.h"
#include "tensor/io/safetensors.h"

using namespace gf;
using namespace gf::testing;
using nn::Seq2SeqTransformer;

namespace {

// Two sentence pairs for the tiny model (src vocab 7, tgt vocab 9, pad 0).
Tensor tiny_src() { return Tensor::of({3, 4, 5, 6, 0, 1, 2, 3, 4, 5}, {2, 5}, DType::Int64); }     // (2, 5)
Tensor tiny_tgt() { return Tensor::of({2, 7, 8, 0, 2, 5, 6, 4}, {2, 4}, DType::Int64); }           // (2, 4)

void for_each_module(const nn::Module& m, const std::function<void(const nn::Module&)>& f) {
  f(m);
  for (const auto& [name, child] : m.children()) for_each_module(*child, f);
}

}  // namespace

TEST_CASE("named_parameters: PyTorch's state_dict names and shapes, in PyTorch's order") {
  Seq2SeqTransformer model(tiny_options(2));
  // nn.Transformer-style translator with 2 layers, d_model 4, nhead 2, ff 6, vocabularies 7 and 9,
  // as torch_translator.py's Seq2Seq lists them with named_parameters().
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"src_emb.weight", {7, 4}},
      {"tgt_emb.weight", {9, 4}},
      {"transformer.encoder.layers.0.self_attn.in_proj_weight", {12, 4}},
      {"transformer.encoder.layers.0.self_attn.in_proj_bias", {12}},
      {"transformer.encoder.layers.0.self_attn.out_proj.weight", {4, 4}},
      {"transformer.encoder.layers.0.self_attn.out_proj.bias", {4}},
      {"transformer.encoder.layers.0.linear1.weight", {6, 4}},
      {"transformer.encoder.layers.0.linear1.bias", {6}},
      {"transformer.encoder.layers.0.linear2.weight", {4, 6}},
      {"transformer.encoder.layers.0.linear2.bias", {4}},
      {"transformer.encoder.layers.0.norm1.weight", {4}},
      {"transformer.encoder.layers.0.norm1.bias", {4}},
      {"transformer.encoder.layers.0.norm2.weight", {4}},
      {"transformer.encoder.layers.0.norm2.bias", {4}},
      {"transformer.encoder.layers.1.self_attn.in_proj_weight", {12, 4}},
      {"transformer.encoder.layers.1.self_attn.in_proj_bias", {12}},
      {"transformer.encoder.layers.1.self_attn.out_proj.weight", {4, 4}},
      {"transformer.encoder.layers.1.self_attn.out_proj.bias", {4}},
      {"transformer.encoder.layers.1.linear1.weight", {6, 4}},
      {"transformer.encoder.layers.1.linear1.bias", {6}},
      {"transformer.encoder.layers.1.linear2.weight", {4, 6}},
      {"transformer.encoder.layers.1.linear2.bias", {4}},
      {"transformer.encoder.layers.1.norm1.weight", {4}},
      {"transformer.encoder.layers.1.norm1.bias", {4}},
      {"transformer.encoder.layers.1.norm2.weight", {4}},
      {"transformer.encoder.layers.1.norm2.bias", {4}},
      {"transformer.encoder.norm.weight", {4}},
      {"transformer.encoder.norm.bias", {4}},
      {"transformer.decoder.layers.0.self_attn.in_proj_weight", {12, 4}},
      {"transformer.decoder.layers.0.self_attn.in_proj_bias", {12}},
      {"transformer.decoder.layers.0.self_attn.out_proj.weight", {4, 4}},
      {"transformer.decoder.layers.0.self_attn.out_proj.bias", {4}},
      {"transformer.decoder.layers.0.multihead_attn.in_proj_weight", {12, 4}},
      {"transformer.decoder.layers.0.multihead_attn.in_proj_bias", {12}},
      {"transformer.decoder.layers.0.multihead_attn.out_proj.weight", {4, 4}},
      {"transformer.decoder.layers.0.multihead_attn.out_proj.bias", {4}},
      {"transformer.decoder.layers.0.linear1.weight", {6, 4}},
      {"transformer.decoder.layers.0.linear1.bias", {6}},
      {"transformer.decoder.layers.0.linear2.weight", {4, 6}},
      {"transformer.decoder.layers.0.linear2.bias", {4}},
      {"transformer.decoder.layers.0.norm1.weight", {4}},
      {"transformer.decoder.layers.0.norm1.bias", {4}},
      {"transformer.decoder.layers.0.norm2.weight", {4}},
      {"transformer.decoder.layers.0.norm2.bias", {4}},
      {"transformer.decoder.layers.0.norm3.weight", {4}},
      {"transformer.decoder.layers.0.norm3.bias", {4}},
      {"transformer.decoder.layers.1.self_attn.in_proj_weight", {12, 4}},
      {"transformer.decoder.layers.1.self_attn.in_proj_bias", {12}},
      {"transformer.decoder.layers.1.self_attn.out_proj.weight", {4, 4}},
      {"transformer.decoder.layers.1.self_attn.out_proj.bias", {4}},
      {"transformer.decoder.layers.1.multihead_attn.in_proj_weight", {12, 4}},
      {"transformer.decoder.layers.1.multihead_attn.in_proj_bias", {12}},
      {"transformer.decoder.layers.1.multihead_attn.out_proj.weight", {4, 4}},
      {"transformer.decoder.layers.1.multihead_attn.out_proj.bias", {4}},
      {"transformer.decoder.layers.1.linear1.weight", {6, 4}},
      {"transformer.decoder.layers.1.linear1.bias", {6}},
      {"transformer.decoder.layers.1.linear2.weight", {4, 6}},
      {"transformer.decoder.layers.1.linear2.bias", {4}},
      {"transformer.decoder.layers.1.norm1.weight", {4}},
      {"transformer.decoder.layers.1.norm1.bias", {4}},
      {"transformer.decoder.layers.1.norm2.weight", {4}},
      {"transformer.decoder.layers.1.norm2.bias", {4}},
      {"transformer.decoder.layers.1.norm3.weight", {4}},
      {"transformer.decoder.layers.1.norm3.bias", {4}},
      {"transformer.decoder.norm.weight", {4}},
      {"transformer.decoder.norm.bias", {4}},
      {"out.weight", {9, 4}},
      {"out.bias", {9}},
  };
  auto named = model.named_parameters();
  REQUIRE(named.size() == expected.size());
  int64_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("entry " << i);
    CHECK(named[i].first == expected[i].first);
    CHECK(shape_str(named[i].second.shape()) == shape_str(expected[i].second));
    CHECK(named[i].second.requires_grad());
    CHECK(named[i].second.dtype() == DType::Float32);
    total += shape_numel(expected[i].second);
  }
  CHECK(total == 917);
  CHECK(model.num_parameters() == 917);
  CHECK(model.parameters().size() == expected.size());

  // state_dict: the same names plus the persistent buffer pos.pe; dropouts contribute nothing.
  auto sd = model.state_dict();
  CHECK(sd.size() == expected.size() + 1);
  for (const auto& [name, shape] : expected) {
    INFO(name);
    REQUIRE(sd.count(name) == 1);
    CHECK(shape_str(sd.at(name).shape()) == shape_str(shape));
  }
  REQUIRE(sd.count("pos.pe") == 1);
  CHECK(shape_str(sd.at("pos.pe").shape()) == "(32, 4)");
  for (const auto& [name, t] : sd) CHECK(name.find("dropout") == std::string::npos);
  // The tensors share storage with the model: writing through the state_dict changes the model.
  Tensor w = sd.at("transformer.decoder.layers.1.norm3.bias");
  w.fill_(0.25);
  CHECK(model.transformer->decoder->layers->operator[](1).norm3->parameter("bias").data().at({2}) == 0.25);
}

TEST_CASE("named_parameters of the brief's 2-layer model: spot checks and a fresh model's values") {
  nn::Seq2SeqOptions o = tiny_options(2);
  o.layer.d_model = 8;
  Seq2SeqTransformer model(o);
  std::map<std::string, Shape> shapes;
  for (auto& [n, p] : model.named_parameters()) shapes[n] = p.shape();
  CHECK(shape_str(shapes.at("transformer.encoder.layers.1.self_attn.in_proj_weight")) == "(24, 8)");
  CHECK(shape_str(shapes.at("transformer.decoder.layers.0.multihead_attn.out_proj.bias")) == "(8,)");
  CHECK(shape_str(shapes.at("transformer.decoder.layers.1.norm3.bias")) == "(8,)");
  CHECK(shape_str(shapes.at("transformer.encoder.norm.weight")) == "(8,)");
  CHECK(shape_str(shapes.at("src_emb.weight")) == "(7, 8)");
  CHECK(shape_str(shapes.at("out.weight")) == "(9, 8)");
  CHECK(shapes.count("pos.pe") == 0);  // a buffer, not a parameter
  CHECK(model.state_dict().count("pos.pe") == 1);
  // Initial values as nn.Transformer's: LayerNorms 1 and 0, attention biases 0, padding rows 0.
  auto sd = model.state_dict();
  CHECK(sd.at("transformer.decoder.layers.1.norm3.weight").at({5}) == 1.0);
  CHECK(sd.at("transformer.decoder.layers.1.norm3.bias").at({5}) == 0.0);
  CHECK(sd.at("transformer.encoder.layers.0.self_attn.in_proj_bias").at({17}) == 0.0);
  CHECK(sd.at("transformer.encoder.layers.0.self_attn.out_proj.bias").at({3}) == 0.0);
  for (int64_t j = 0; j < 8; ++j) {
    CHECK(sd.at("src_emb.weight").at({0, j}) == 0.0);
    CHECK(sd.at("tgt_emb.weight").at({0, j}) == 0.0);
  }
  // xavier_uniform on the (24, 8) in_proj_weight: |w| <= sqrt(6 / 32), and not all zero.
  const Tensor& ipw = sd.at("transformer.encoder.layers.1.self_attn.in_proj_weight");
  double biggest = 0;
  for (int64_t i = 0; i < ipw.numel(); ++i) biggest = std::max(biggest, std::abs(ipw.flat_get(i)));
  CHECK(biggest <= std::sqrt(6.0 / 32.0));
  CHECK(biggest > 0.1);
}

TEST_CASE("load_state_dict: missing key, unexpected key and shape mismatch name the key and the shapes") {
  Seq2SeqTransformer a(tiny_options(2), 1), b(tiny_options(2), 2);
  const auto good = a.state_dict();

  auto missing = good;
  missing.erase("transformer.decoder.layers.1.norm3.bias");
  std::string msg = error_of([&] { b.load_state_dict(missing); });
  GF_CHECK_CONTAINS(msg, "missing key 'transformer.decoder.layers.1.norm3.bias'");
  GF_CHECK_CONTAINS(msg, "(4,)");
  CHECK_THROWS_AS(b.load_state_dict(missing), std::invalid_argument);

  auto missing_buffer = good;
  missing_buffer.erase("pos.pe");
  GF_CHECK_CONTAINS(error_of([&] { b.load_state_dict(missing_buffer); }), "missing key 'pos.pe' (32, 4)");

  auto unexpected = good;
  unexpected["decoder.extra.weight"] = Tensor::zeros({2, 3});
  msg = error_of([&] { b.load_state_dict(unexpected); });
  GF_CHECK_CONTAINS(msg, "unexpected key 'decoder.extra.weight'");
  GF_CHECK_CONTAINS(msg, "(2, 3)");

  auto mismatch = good;
  mismatch["out.weight"] = Tensor::zeros({9, 5});
  msg = error_of([&] { b.load_state_dict(mismatch); });
  GF_CHECK_CONTAINS(msg, "'out.weight'");
  GF_CHECK_CONTAINS(msg, "(9, 5)");  // the checkpoint's shape
  GF_CHECK_CONTAINS(msg, "(9, 4)");  // the model's shape
  // A shape mismatch is an error even when not strict.
  GF_CHECK_CONTAINS(error_of([&] { b.load_state_dict(mismatch, false); }), "(9, 5)");

  // The good one loads.
  CHECK_NOTHROW(b.load_state_dict(good));
  CHECK(max_abs_diff(a.out->weight.data(), b.out->weight.data()) == 0.0);
}

TEST_CASE("load_state_dict strict=false: skips missing and unexpected keys, loads the rest") {
  Seq2SeqTransformer a(tiny_options(1), 1), b(tiny_options(1), 2);
  auto sd = a.state_dict();
  for (auto& [k, v] : sd) sd[k] = v.clone();  // a's values, detached from a
  sd.erase("out.weight");
  sd["not.in.the.model"] = Tensor::ones({3});
  const Tensor b_out_before = b.out->weight.data().clone();
  CHECK_THROWS_AS(b.load_state_dict(sd), std::invalid_argument);
  Seq2SeqTransformer c(tiny_options(1), 2);
  CHECK_NOTHROW(c.load_state_dict(sd, false));
  CHECK(max_abs_diff(c.out->weight.data(), b_out_before) == 0.0);  // untouched
  CHECK(max_abs_diff(c.out->bias.data(), a.out->bias.data()) == 0.0);
  CHECK(max_abs_diff(c.src_emb->weight.data(), a.src_emb->weight.data()) == 0.0);
  CHECK(max_abs_diff(c.transformer->decoder->layers->operator[](0).multihead_attn->in_proj_weight.data(),
                     a.transformer->decoder->layers->operator[](0).multihead_attn->in_proj_weight.data()) == 0.0);
}

TEST_CASE("load_state_dict converts values to the model's dtype") {
  Seq2SeqTransformer a(tiny_options(1), 1), b(tiny_options(1), 2);
  std::map<std::string, Tensor> sd64;
  for (auto& [k, v] : a.state_dict()) sd64[k] = v.to(DType::Float64);
  b.load_state_dict(sd64);
  CHECK(b.src_emb->weight.dtype() == DType::Float32);
  CHECK(max_abs_diff(b.src_emb->weight.data(), a.src_emb->weight.data()) == 0.0);
  b.eval();
  a.eval();
  CHECK(max_abs_diff(a.forward(tiny_src(), tiny_tgt()).data(), b.forward(tiny_src(), tiny_tgt()).data()) == 0.0);
}

TEST_CASE("the same init_seed gives the same weights, whatever the default generator has drawn") {
  Seq2SeqTransformer a(tiny_options(2), 5);
  Tensor noise = kernels::randn({100}, default_generator());  // moves the process-wide stream
  Seq2SeqTransformer b(tiny_options(2), 5), c(tiny_options(2), 6);
  auto sa = a.state_dict(), sb = b.state_dict(), sc = c.state_dict();
  for (auto& [n, t] : sa) {
    INFO(n);
    CHECK(max_abs_diff(t, sb.at(n)) == 0.0);
  }
  CHECK(max_abs_diff(sa.at("transformer.encoder.layers.0.linear1.bias"), sc.at("transformer.encoder.layers.0.linear1.bias")) > 0.0);
  CHECK(max_abs_diff(sa.at("out.weight"), sc.at("out.weight")) > 0.0);
}

TEST_CASE("train() and eval() reach every submodule; dropout acts only in training") {
  Seq2SeqTransformer model(tiny_options(2, false, 0.5));
  int count = 0;
  for_each_module(model, [&](const nn::Module& m) {
    CHECK(m.is_training());
    ++count;
  });
  CHECK(count > 40);  // every layer, attention, linear, norm and dropout
  model.eval();
  for_each_module(model, [&](const nn::Module& m) { CHECK_FALSE(m.is_training()); });
  Tensor e1 = model.forward(tiny_src(), tiny_tgt()).data();
  Tensor e2 = model.forward(tiny_src(), tiny_tgt()).data();
  CHECK(max_abs_diff(e1, e2) == 0.0);
  // Eval with p = 0.5 is the same function as p = 0 (same seed, same weights).
  Seq2SeqTransformer no_drop(tiny_options(2, false, 0.0));
  no_drop.eval();
  CHECK(max_abs_diff(e1, no_drop.forward(tiny_src(), tiny_tgt()).data()) == 0.0);

  model.train();
  for_each_module(model, [&](const nn::Module& m) { CHECK(m.is_training()); });
  Tensor t1 = model.forward(tiny_src(), tiny_tgt()).data();
  CHECK(max_abs_diff(t1, e1) > 1e-3);
  // train(false) on a subtree only affects that subtree.
  model.transformer->decoder->eval();
  CHECK(model.is_training());
  CHECK(model.transformer->encoder->layers->operator[](1).dropout1->is_training());
  CHECK_FALSE(model.transformer->decoder->layers->operator[](1).dropout3->is_training());
  CHECK_FALSE(model.transformer->decoder->layers->operator[](0).self_attn->attn_dropout->is_training());
}

TEST_CASE("zero_grad clears every parameter's gradient") {
  Seq2SeqTransformer model(tiny_options(1));
  Variable logits = model.forward(tiny_src(), tiny_tgt());  // (2, 4, 9)
  sum(logits * logits).backward();
  for (auto& [n, p] : model.named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
  // The output bias's gradient is d/db_c sum(logits^2) = 2 * sum over (b, t) of logits[b, t, c].
  double expected = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 4; ++t) expected += 2.0 * logits.data().at({b, t, 3});
  CHECK(model.out->bias.grad().at({3}) == doctest::Approx(expected).epsilon(1e-5));
  model.zero_grad();
  for (auto& [n, p] : model.named_parameters()) {
    INFO(n);
    CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE("tie_output: out.weight is tgt_emb.weight; parameters() lists it once; gradients add up") {
  nn::Seq2SeqOptions o = tiny_options(1);
  o.tie_output = true;
  Seq2SeqTransformer tied(o);
  auto named = tied.named_parameters();
  const VariableImpl* emb = nullptr;
  const VariableImpl* out = nullptr;
  for (auto& [n, p] : named) {
    if (n == "tgt_emb.weight") emb = p.impl().get();
    if (n == "out.weight") out = p.impl().get();
  }
  REQUIRE(emb != nullptr);
  CHECK(emb == out);
  CHECK(tied.out->weight.impl() == tied.tgt_emb->weight.impl());
  CHECK(tied.parameters().size() == named.size() - 1);
  std::set<const VariableImpl*> unique;
  for (auto& p : tied.parameters()) CHECK(unique.insert(p.impl().get()).second);
  Seq2SeqTransformer untied(tiny_options(1));
  CHECK(tied.num_parameters() == untied.num_parameters() - 9 * 4);
  // state_dict keeps both names, as PyTorch's does.
  auto sd = tied.state_dict();
  REQUIRE(sd.count("out.weight") == 1);
  CHECK(sd.at("out.weight").storage() == sd.at("tgt_emb.weight").storage());

  // The tied model equals an untied one holding the same values, and the shared weight's gradient
  // is the sum of the embedding's and the projection's.
  untied.load_state_dict(sd);
  Tensor src = tiny_src(), tgt = tiny_tgt();
  Variable lt = tied.forward(src, tgt), lu = untied.forward(src, tgt);  // (2, 4, 9)
  CHECK(max_abs_diff(lt.data(), lu.data()) == 0.0);
  Tensor g = randn(lt.shape(), 5, 1.0, DType::Float32);
  sum(lt * Variable(g)).backward();
  sum(lu * Variable(g)).backward();
  Tensor want = Tensor::empty({9, 4});
  for (int64_t i = 0; i < 36; ++i)
    want.flat_set(i, untied.tgt_emb->weight.grad().flat_get(i) + untied.out->weight.grad().flat_get(i));
  CHECK(max_abs_diff(tied.tgt_emb->weight.grad(), want) < 1e-5);
  // The padding row gets a gradient through the projection only (the embedding sends none).
  CHECK(untied.tgt_emb->weight.grad().at({0, 1}) == 0.0);
  CHECK(std::abs(tied.tgt_emb->weight.grad().at({0, 1})) > 0.0);
}

TEST_CASE("state_dict -> save_safetensors -> load_safetensors -> load_state_dict gives identical outputs") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    Seq2SeqTransformer a(tiny_options(2, norm_first), 11), b(tiny_options(2, norm_first), 12);
    a.eval();
    b.eval();
    Tensor src = tiny_src(), tgt = tiny_tgt();
    Tensor ya = a.forward(src, tgt).data();  // (2, 4, 9)
    CHECK(max_abs_diff(ya, b.forward(src, tgt).data()) > 1e-3);  // different seeds differ
    const std::string path =
        (std::filesystem::temp_directory_path() / ("gf_test_nn_module_" + std::to_string(getpid()) + ".safetensors")).string();
    save_safetensors(path, a.state_dict());
    SafetensorsFile f = load_safetensors(path);
    std::filesystem::remove(path);
    CHECK(f.tensors.size() == a.state_dict().size());
    b.load_state_dict(f.tensors);
    CHECK(max_abs_diff(ya, b.forward(src, tgt).data()) == 0.0);
    for (auto& [n, t] : b.state_dict()) {
      INFO(n);
      CHECK(max_abs_diff(t, a.state_dict().at(n)) == 0.0);
    }
  }
}

TEST_CASE("Module::to converts parameters and buffers; the model then runs in float64") {
  Seq2SeqTransformer m32(tiny_options(1), 3), m64(tiny_options(1), 3);
  m64.to(DType::Float64);
  for (auto& [n, t] : m64.state_dict()) {
    INFO(n);
    CHECK(t.dtype() == DType::Float64);
  }
  m32.eval();
  m64.eval();
  Tensor y32 = m32.forward(tiny_src(), tiny_tgt()).data(), y64 = m64.forward(tiny_src(), tiny_tgt()).data();
  CHECK(y64.dtype() == DType::Float64);
  CHECK(max_abs_diff(y32, y64) < 1e-4);
  // The float64 positional table is exact, not the float32 buffer widened.
  const double angle = 5.0 / std::pow(10000.0, 2.0 / 4.0);
  CHECK(std::abs(m64.pos->table(5, 1, DType::Float64).at({0, 2}) - std::sin(angle)) < 1e-15);
}

TEST_CASE("Module::to converts accumulated gradients too, so training can go on in the new dtype") {
  nn::Linear lin(3, 2);
  sum(lin.forward(Variable(Tensor::ones({1, 3})))).backward();
  REQUIRE(lin.weight.grad().dtype() == DType::Float32);
  lin.to(DType::Float64);
  CHECK(lin.weight.grad().dtype() == DType::Float64);
  CHECK(lin.bias.grad().dtype() == DType::Float64);
  CHECK_NOTHROW(sum(lin.forward(Variable(Tensor::ones({1, 3}, DType::Float64)))).backward());
  CHECK(lin.bias.grad().at({1}) == 2.0);  // two backwards of sum(x W^T + b): 1 + 1
  CHECK(lin.weight.grad().at({0, 2}) == 2.0);
}

TEST_CASE("set_parameter: replaces a parameter; a shape mismatch or unknown name is an error") {
  nn::Linear a(3, 2), b(3, 2), c(2, 3);
  b.set_parameter("weight", a.weight);
  CHECK(b.named_parameters()[0].second.impl() == a.weight.impl());
  GF_CHECK_CONTAINS(error_of([&] { c.set_parameter("weight", a.weight); }), "'weight' is (3, 2), the replacement (2, 3)");
  GF_CHECK_CONTAINS(error_of([&] { c.set_parameter("nope", a.weight); }), "no parameter named 'nope'");
}

TEST_CASE("Embedding: lookup; the padding_idx row stays zero and gets no gradient") {
  nn::Embedding emb(5, 3, /*padding_idx=*/1);
  for (int64_t j = 0; j < 3; ++j) CHECK(emb.weight.data().at({1, j}) == 0.0);
  Tensor ids = Tensor::of({0, 1, 3, 3, 1, 4}, {2, 3}, DType::Int64);  // (2, 3)
  Variable y = emb.forward(ids);                                      // (2, 3, 3)
  CHECK(shape_str(y.shape()) == "(2, 3, 3)");
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(y.data().at({0, 1, j}) == 0.0);  // padding looks up the zero row
    CHECK(y.data().at({1, 1, j}) == 0.0);
    CHECK(y.data().at({0, 2, j}) == emb.weight.data().at({3, j}));
    CHECK(y.data().at({1, 2, j}) == emb.weight.data().at({4, j}));
  }
  Tensor g = randn({2, 3, 3}, 7, 1.0, DType::Float32);
  sum(y * Variable(g)).backward();
  const Tensor& gw = emb.weight.grad();  // (5, 3)
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(gw.at({1, j}) == 0.0);  // padding: no gradient although it was looked up twice
    CHECK(gw.at({2, j}) == 0.0);  // never looked up
    CHECK(gw.at({3, j}) == doctest::Approx(g.at({0, 2, j}) + g.at({1, 0, j})));  // looked up twice: summed
    CHECK(gw.at({0, j}) == doctest::Approx(g.at({0, 0, j})));
  }
  // After an SGD-like step the row is still exactly zero.
  Tensor w = emb.weight.data();
  for (int64_t i = 0; i < w.numel(); ++i) w.flat_set(i, w.flat_get(i) - 0.5 * gw.flat_get(i));
  for (int64_t j = 0; j < 3; ++j) CHECK(emb.weight.data().at({1, j}) == 0.0);
  GF_CHECK_CONTAINS(error_of([] { nn::Embedding(4, 2, 4); }), "padding_idx 4 >= num_embeddings 4");
}

TEST_CASE("PositionalEncoding: pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(...)") {
  const int64_t d = 8;
  nn::PositionalEncoding pe(d, 50);
  Tensor table = pe.state_dict().at("pe");  // (50, 8) float32
  CHECK(shape_str(table.shape()) == "(50, 8)");
  CHECK(table.dtype() == DType::Float32);
  struct Point {
    int64_t pos, i;  // i: the pair index, dims 2i and 2i+1
  };
  for (Point p : {Point{0, 0}, Point{0, 3}, Point{1, 0}, Point{3, 1}, Point{7, 2}, Point{49, 3}, Point{20, 1}}) {
    CAPTURE(p.pos);
    CAPTURE(p.i);
    const double angle = static_cast<double>(p.pos) / std::pow(10000.0, 2.0 * p.i / d);
    CHECK(table.at({p.pos, 2 * p.i}) == doctest::Approx(std::sin(angle)).epsilon(1e-6));
    CHECK(table.at({p.pos, 2 * p.i + 1}) == doctest::Approx(std::cos(angle)).epsilon(1e-6));
    Tensor t64 = pe.table(p.pos, 1, DType::Float64);  // (1, 8)
    CHECK(std::abs(t64.at({0, 2 * p.i}) - std::sin(angle)) < 1e-14);
    CHECK(std::abs(t64.at({0, 2 * p.i + 1}) - std::cos(angle)) < 1e-14);
  }
  CHECK(table.at({0, 0}) == 0.0);
  CHECK(table.at({0, 1}) == 1.0);
  // forward adds rows offset .. offset + L - 1.
  Tensor x = randn({2, 3, d}, 8, 1.0, DType::Float32);  // (2, 3, 8)
  Variable y = pe.forward(Variable(x), 4);               // (2, 3, 8)
  CHECK(y.data().at({1, 2, 5}) == doctest::Approx(x.at({1, 2, 5}) + table.at({6, 5})));
  CHECK(y.data().at({0, 0, 0}) == doctest::Approx(x.at({0, 0, 0}) + table.at({4, 0})));
  GF_CHECK_CONTAINS(error_of([&] { pe.forward(Variable(x), 48); }), "positions up to 51 requested, but the table holds 50");
  GF_CHECK_CONTAINS(error_of([&] { pe.forward(Variable(Tensor::zeros({2, 3, 5}))); }), "expected (B, L, 8), got (2, 3, 5)");
  // An odd d_model: the last column is a sine without a partner.
  nn::PositionalEncoding odd(5, 10);
  CHECK(odd.state_dict().at("pe").at({3, 4}) == doctest::Approx(std::sin(3.0 / std::pow(10000.0, 4.0 / 5.0))).epsilon(1e-6));
}

TEST_CASE("Linear: y = x W^T + b, nn.Linear's init range") {
  nn::Linear lin(16, 3);
  CHECK(shape_str(lin.weight.shape()) == "(3, 16)");
  CHECK(shape_str(lin.bias.shape()) == "(3,)");
  for (int64_t i = 0; i < lin.weight.numel(); ++i) CHECK(std::abs(lin.weight.data().flat_get(i)) <= 0.25);
  Tensor x = randn({2, 16}, 9, 1.0, DType::Float32);
  Tensor y = lin.forward(Variable(x)).data();  // (2, 3)
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t o = 0; o < 3; ++o) {
      double want = lin.bias.data().at({o});
      for (int64_t k = 0; k < 16; ++k) want += x.at({r, k}) * lin.weight.data().at({o, k});
      CHECK(y.at({r, o}) == doctest::Approx(want).epsilon(1e-5));
    }
  nn::Linear nobias(4, 2, false);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);
}

TEST_CASE("LayerNorm module: weight 1, bias 0 at start; normalises the last dim") {
  nn::LayerNorm ln(4);
  CHECK(ln.named_parameters()[0].first == "weight");
  CHECK(ln.named_parameters()[1].first == "bias");
  Tensor x = Tensor::of({1, 2, 3, 4}, {1, 4});
  Tensor y = ln.forward(Variable(x)).data();
  const double rstd = 1.0 / std::sqrt(1.25 + 1e-5);
  CHECK(y.at({0, 0}) == doctest::Approx(-1.5 * rstd).epsilon(1e-6));
  CHECK(y.at({0, 2}) == doctest::Approx(0.5 * rstd).epsilon(1e-6));
}

TEST_CASE("FFN: linear2(act(linear1(x))) with relu and gelu") {
  for (std::string act : {"relu", "gelu"}) {
    nn::FFN ffn(3, 5, act);
    CHECK(ffn.named_parameters()[0].first == "linear1.weight");
    CHECK(ffn.named_parameters()[3].first == "linear2.bias");
    Variable x(randn({2, 3}, 10, 1.0, DType::Float32));  // (2, 3)
    Variable h = ffn.linear1->forward(x);                  // (2, 5)
    h = act == "relu" ? relu(h) : gelu(h);
    CHECK(max_abs_diff(ffn.forward(x).data(), ffn.linear2->forward(h).data()) == 0.0);
  }
  const bool found_gelu = nn::find_activation("gelu").fn == static_cast<nn::ActivationFn>(gelu);
  CHECK(found_gelu);
  // ReLU's entry carries its fused form with dropout; GELU has none (its FFN runs gelu, then Dropout).
  const bool relu_fused = nn::find_activation("relu").with_dropout == static_cast<nn::ActivationDropoutFn>(relu_dropout);
  CHECK(relu_fused);
  const bool gelu_unfused = nn::find_activation("gelu").with_dropout == nullptr;
  CHECK(gelu_unfused);
  GF_CHECK_CONTAINS(error_of([] { nn::find_activation("tanh"); }), "activation 'tanh' is unknown (known: relu, gelu)");
  GF_CHECK_CONTAINS(error_of([] { nn::FFN(3, 5, "tanh"); }), "activation 'tanh' is unknown");
  GF_CHECK_CONTAINS(error_of([] { nn::Dropout(1.0); }), "p must be in [0, 1)");
}

TEST_CASE("make_pad_mask and make_causal_mask") {
  Tensor ids = Tensor::of({5, 6, 0, 0, 7, 0}, {2, 3}, DType::Int64);
  Tensor pad = nn::make_pad_mask(ids, 0);  // (2, 3)
  CHECK(pad.dtype() == DType::Bool);
  std::vector<double> want = {0, 0, 1, 1, 0, 1};
  for (int64_t i = 0; i < 6; ++i) CHECK(pad.flat_get(i) == want[static_cast<size_t>(i)]);
  GF_CHECK_CONTAINS(error_of([] { nn::make_pad_mask(Tensor::zeros({2, 3, 1}, DType::Int64), 0); }), "got (2, 3, 1)");

  Tensor c = nn::make_causal_mask(4);  // (4, 4)
  CHECK(c.dtype() == DType::Bool);
  CHECK(shape_str(c.shape()) == "(4, 4)");
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(c.at({i, j}) == (j > i ? 1.0 : 0.0));  // true strictly above the diagonal
  // Longer masks after shorter ones (the cache grows) and shorter after longer (a slice).
  Tensor big = nn::make_causal_mask(100);
  CHECK(big.at({98, 99}) == 1.0);
  CHECK(big.at({99, 98}) == 0.0);
  Tensor small = nn::make_causal_mask(3);
  CHECK(shape_str(small.shape()) == "(3, 3)");
  CHECK(small.at({0, 2}) == 1.0);
  CHECK(small.at({2, 0}) == 0.0);
  CHECK(nn::make_causal_mask(0).numel() == 0);
}

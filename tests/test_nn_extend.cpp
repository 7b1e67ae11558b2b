// The layers added the documented way (docs/extending.md): RMSNorm and grouped-query / multi-query
// attention. Forward values against their formulas, float64 gradchecks, the state_dict names, the
// equivalence of grouped-query attention with multi-head attention whose K/V heads are repeated,
// cached = uncached decoding for kv-heads 4, 2 and 1, and the registries' errors. Last, kinds
// registered from outside the library (register_feedforward, register_norm), as a program built
// on the installed package does (examples/custom_layer).
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/unary.h"
#include "gradcheck_util.h"
#include "nn/layer_norm.h"
#include "nn/ffn.h"
#include "nn/masks.h"
#include "nn/multihead_attention.h"
#include "nn/norm.h"
#include "nn/rms_norm.h"
#include "nn/scale_norm.h"
#include "nn/seq2seq.h"
#include "rounding.h"
#include "nn_test_util.h"
#include "tensor/kernels/random.h"
#include "train/decode/decode.h"
#include "train/run/model.h"

using namespace gf;
using namespace gf::testing;

namespace {

void randomise(nn::Module& m, uint64_t seed) {
  Generator gen(seed);
  for (auto& [name, p] : m.named_parameters()) {
    Tensor t = p.data();
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos) kernels::uniform_(t, 0.5, 1.5, gen);
    else kernels::uniform_(t, -0.5, 0.5, gen);
  }
}

std::map<std::string, std::string> shapes_of(const nn::Module& m) {
  std::map<std::string, std::string> s;
  for (auto& [n, p] : m.named_parameters()) s[n] = shape_str(p.shape());
  return s;
}

}  // namespace

TEST_CASE("RMSNorm: x / sqrt(mean(x^2) + eps) * weight, one parameter named weight") {
  nn::RMSNorm n(4, 1e-5);
  n.to(DType::Float64);
  CHECK(shapes_of(n) == std::map<std::string, std::string>{{"weight", "(4,)"}});
  Tensor(n.weight.data()).copy_(Tensor::of({1.0, 2.0, 0.5, -1.0}, {4}, DType::Float64));
  Tensor x = Tensor::of({1, 2, 3, 4, -2, 0, 0, 2}, {2, 4}, DType::Float64);
  Tensor y = n.forward(Variable(x)).data();
  const double r0 = 1 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-5), r1 = 1 / std::sqrt(8 / 4.0 + 1e-5);
  CHECK(y.at({0, 0}) == doctest::Approx(1 * r0 * 1.0).epsilon(1e-12));
  CHECK(y.at({0, 1}) == doctest::Approx(2 * r0 * 2.0).epsilon(1e-12));
  CHECK(y.at({0, 3}) == doctest::Approx(4 * r0 * -1.0).epsilon(1e-12));
  CHECK(y.at({1, 0}) == doctest::Approx(-2 * r1 * 1.0).epsilon(1e-12));
  CHECK(y.at({1, 3}) == doctest::Approx(2 * r1 * -1.0).epsilon(1e-12));
  // Unlike LayerNorm it does not centre: a constant row keeps its sign.
  Tensor c = n.forward(Variable(Tensor::full({1, 4}, 3.0, DType::Float64))).data();
  CHECK(c.at({0, 0}) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("gradcheck: RMSNorm in float64, w.r.t. the input and the weight") {
  nn::RMSNorm n(5);
  n.to(DType::Float64);
  randomise(n, 3);
  auto fn = [&](const std::vector<Variable>& in) { return n.forward(in[0]) * in[0]; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({3, 5}, 4)), n.weight}));
}

TEST_CASE("ScaleNorm: x * scale / sqrt(sum(x^2) + eps), one scalar parameter started at sqrt(d); gradcheck") {
  nn::ScaleNorm n(4, 1e-5);
  n.to(DType::Float64);
  CHECK(shapes_of(n) == std::map<std::string, std::string>{{"scale", "(1,)"}});
  CHECK(n.scale.data().item() == doctest::Approx(2.0));
  Tensor x = Tensor::of({1, 2, 3, 4, -2, 0, 0, 2}, {2, 4}, DType::Float64);
  Tensor y = n.forward(Variable(x)).data();
  CHECK(y.at({0, 3}) == doctest::Approx(4 * 2.0 / std::sqrt(30 + 1e-5)).epsilon(1e-12));
  CHECK(y.at({1, 0}) == doctest::Approx(-2 * 2.0 / std::sqrt(8 + 1e-5)).epsilon(1e-12));
  Tensor(n.scale.data()).fill_(0.7);
  auto fn = [&](const std::vector<Variable>& in) { return n.forward(in[0]) * in[0]; };
  GF_CHECK_GRADS(fn, (std::vector<Variable>{leaf(randn({3, 4}, 5)), n.scale}));
}

TEST_CASE("norms by name: make_norm, the registry's names, and a clear error") {
  CHECK(nn::norm_names() == "layernorm, rmsnorm, scalenorm");
  CHECK(dynamic_cast<nn::LayerNorm*>(nn::make_norm("layernorm", 3, 1e-5).get()) != nullptr);
  CHECK(dynamic_cast<nn::RMSNorm*>(nn::make_norm("rmsnorm", 3, 1e-5).get()) != nullptr);
  GF_CHECK_CONTAINS(error_of([] { nn::make_norm("batchnorm", 3, 1e-5); }), "norm 'batchnorm' is unknown (known: layernorm, rmsnorm, scalenorm)");
  nn::TransformerLayerOptions o;
  o.norm = "rmsnorm";
  o.d_model = 8, o.nhead = 2, o.dim_feedforward = 16;
  nn::TransformerEncoderLayer layer(o);
  auto s = shapes_of(layer);
  CHECK(s.count("norm1.weight") == 1);
  CHECK(s.count("norm1.bias") == 0);  // RMSNorm has no bias
}

TEST_CASE("grouped-query attention: parameter names and shapes (Hugging Face's q/k/v_proj), KV heads must divide H") {
  nn::MultiheadAttention mha(8, 4);  // multi-head: PyTorch's packed layout
  CHECK(shapes_of(mha) == std::map<std::string, std::string>{
                              {"in_proj_weight", "(24, 8)"}, {"in_proj_bias", "(24,)"}, {"out_proj.weight", "(8, 8)"}, {"out_proj.bias", "(8,)"}});
  nn::MultiheadAttention gqa(8, 4, 0.0, true, default_generator(), 2);  // d_k 2, 2 key/value heads: K and V have 4 features
  CHECK(gqa.grouped());
  CHECK(shapes_of(gqa) == std::map<std::string, std::string>{{"q_proj.weight", "(8, 8)"},
                                                             {"q_proj.bias", "(8,)"},
                                                             {"k_proj.weight", "(4, 8)"},
                                                             {"k_proj.bias", "(4,)"},
                                                             {"v_proj.weight", "(4, 8)"},
                                                             {"v_proj.bias", "(4,)"},
                                                             {"out_proj.weight", "(8, 8)"},
                                                             {"out_proj.bias", "(8,)"}});
  nn::MultiheadAttention same(8, 4, 0.0, true, default_generator(), 4);  // kv_heads = heads is multi-head
  CHECK_FALSE(same.grouped());
  GF_CHECK_CONTAINS(error_of([] { nn::MultiheadAttention(8, 4, 0.0, true, default_generator(), 3); }), "kv_heads 3 does not divide num_heads 4");
  nn::TransformerLayerOptions o;
  o.d_model = 8, o.nhead = 4, o.kv_heads = 3;
  GF_CHECK_CONTAINS(error_of([&] { o.validate(); }), "kv_heads must divide nhead 4");
}

// Grouped-query attention is multi-head attention whose key/value heads are repeated per group
// (repeat_interleave): build that multi-head module from the grouped one's weights and compare.
TEST_CASE("grouped-query attention equals multi-head attention with each K/V head repeated for its group") {
  const int64_t B = 2, L = 3, S = 5, D = 12, H = 6;
  for (int64_t kv : {3, 2, 1}) {
    CAPTURE(kv);
    Generator gen(10 + kv);
    nn::MultiheadAttention gqa(D, H, 0.0, true, gen, kv);
    gqa.to(DType::Float64);
    randomise(gqa, 20 + kv);
    nn::MultiheadAttention mha(D, H, 0.0, true, gen);
    mha.to(DType::Float64);
    const int64_t dk = D / H, G = H / kv;
    Tensor w = mha.in_proj_weight.data(), b = mha.in_proj_bias.data();  // (3D, D), (3D)
    w.narrow(0, 0, D).copy_(gqa.q_proj->weight.data());
    b.narrow(0, 0, D).copy_(gqa.q_proj->bias.data());
    for (int64_t h = 0; h < H; ++h) {  // query head h reads key/value head h / G
      const int64_t src = (h / G) * dk;
      w.narrow(0, D + h * dk, dk).copy_(gqa.k_proj->weight.data().narrow(0, src, dk));
      w.narrow(0, 2 * D + h * dk, dk).copy_(gqa.v_proj->weight.data().narrow(0, src, dk));
      b.narrow(0, D + h * dk, dk).copy_(gqa.k_proj->bias.data().narrow(0, src, dk));
      b.narrow(0, 2 * D + h * dk, dk).copy_(gqa.v_proj->bias.data().narrow(0, src, dk));
    }
    Tensor(mha.out_proj->weight.data()).copy_(gqa.out_proj->weight.data());
    Tensor(mha.out_proj->bias.data()).copy_(gqa.out_proj->bias.data());
    Variable x(randn({B, L, D}, 30)), m(randn({B, S, D}, 31));
    Tensor kpm = Tensor::of({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);
    nn::AttentionResult a = gqa.forward(x, m, m, kpm, Tensor(), true), e = mha.forward(x, m, m, kpm, Tensor(), true);
    CHECK(max_abs_diff(a.output.data(), e.output.data()) < 1e-12);
    CHECK(max_abs_diff(a.weights.data(), e.weights.data()) < 1e-12);
    Tensor causal = nn::make_causal_mask(L);
    CHECK(max_abs_diff(gqa.forward(x, x, x, Tensor(), causal).output.data(), mha.forward(x, x, x, Tensor(), causal).output.data()) < 1e-12);
  }
}

TEST_CASE("gradcheck: grouped-query (2 KV heads) and multi-query (1) attention with masks, w.r.t. inputs and every parameter") {
  const int64_t B = 2, L = 3, S = 4, D = 8, H = 4;
  Tensor causal = nn::make_causal_mask(L);
  Tensor kpm_self = Tensor::of({0, 0, 0, 0, 0, 1}, {B, L}, DType::Bool);
  Tensor kpm_src = Tensor::of({0, 0, 0, 0, 0, 0, 1, 1}, {B, S}, DType::Bool);
  for (int64_t kv : {2, 1}) {
    CAPTURE(kv);
    Generator gen(40 + kv);
    nn::MultiheadAttention a(D, H, 0.0, true, gen, kv);
    a.to(DType::Float64);
    randomise(a, 50 + kv);
    std::vector<Variable> params = a.parameters();
    auto self = [&](const std::vector<Variable>& in) { return a.forward(in[0], in[0], in[0], kpm_self, causal, true).weights; };
    auto cross = [&](const std::vector<Variable>& in) { return a.forward(in[0], in[1], in[1], kpm_src, Tensor()).output; };
    std::vector<Variable> self_in{leaf(randn({B, L, D}, 60))};
    self_in.insert(self_in.end(), params.begin(), params.begin() + 4);  // q_proj and k_proj: what the weights depend on
    GF_CHECK_GRADS(self, self_in);
    std::vector<Variable> cross_in{leaf(randn({B, L, D}, 61)), leaf(randn({B, S, D}, 62))};
    cross_in.insert(cross_in.end(), params.begin(), params.end());
    GF_CHECK_GRADS(cross, cross_in);
  }
}

TEST_CASE("gradcheck: a Pre-LN encoder and decoder layer with RMSNorm and grouped-query attention") {
  nn::TransformerLayerOptions o;
  o.d_model = 8, o.nhead = 4, o.kv_heads = 2, o.dim_feedforward = 12, o.dropout = 0, o.norm = "rmsnorm", o.norm_first = true;
  Generator gen(70);
  nn::TransformerEncoderLayer enc(o, gen);
  nn::TransformerDecoderLayer dec(o, gen);
  for (nn::Module* m : {static_cast<nn::Module*>(&enc), static_cast<nn::Module*>(&dec)}) {
    m->to(DType::Float64);
    randomise(*m, 71);
  }
  Tensor kpm = Tensor::of({0, 0, 0, 0, 0, 1}, {2, 3}, DType::Bool);
  auto fe = [&](const std::vector<Variable>& in) { return enc.forward(in[0], kpm); };
  GF_CHECK_GRADS(fe, (std::vector<Variable>{leaf(randn({2, 3, 8}, 72)), enc.norm1->parameter("weight"), enc.self_attn->k_proj->weight}));
  auto fd = [&](const std::vector<Variable>& in) { return dec.forward(in[0], in[1], nn::make_causal_mask(3), kpm, kpm).output; };
  GF_CHECK_GRADS(fd, (std::vector<Variable>{leaf(randn({2, 3, 8}, 73)), leaf(randn({2, 3, 8}, 74)), dec.norm3->parameter("weight"),
                                            dec.multihead_attn->v_proj->weight}));
}

// The KV cache holds KV heads, not H: it shrinks by H / KV, and cached decoding still equals
// recomputing the whole prefix.
TEST_CASE("kv-heads 4, 2, 1: the cache shrinks by heads / kv_heads and cached decoding equals uncached") {
  for (int64_t kv : {4, 2, 1}) {
    CAPTURE(kv);
    nn::Seq2SeqOptions o = tiny_options(2, false, 0.0);
    o.layer.d_model = 8, o.layer.nhead = 4, o.layer.kv_heads = kv, o.layer.dim_feedforward = 16;
    o.src_vocab = 11, o.tgt_vocab = 13;
    nn::Seq2SeqTransformer model(o, 5);
    randomise(model, 6);
    model.eval();
    Tensor src = Tensor::of({4, 5, 6, 7, 8, 9, 10, 0, 0, 0}, {2, 5}, DType::Int64);
    train::DecodeOptions cached, uncached;
    cached.max_extra = uncached.max_extra = 6;
    uncached.use_cache = false;
    train::DecodeStats st;
    {  // in float64 (tests/rounding.h): cached and uncached decoding reach the scores through different BLAS calls
      nn::Seq2SeqTransformer m64(o, 5);
      randomise(m64, 6);
      m64.to(DType::Float64);
      m64.eval();
      CHECK(train::translate_batch(m64, src, cached) == train::translate_batch(m64, src, uncached));
    }
    train::translate_batch(model, src, cached, &st);
    // 2 layers x (K and V) x kv heads x d_k 2 x 4 bytes per target token.
    CHECK(st.self_bytes_per_token == 2 * 2 * kv * 2 * 4);
    // Logits step by step against the full forward.
    NoGradGuard ng;
    Tensor tgt = Tensor::of({2, 7, 8, 4, 2, 5, 6, 12}, {2, 4}, DType::Int64);
    Tensor logits = model.forward(src, tgt).data();  // (2, 4, 13)
    Tensor src_pad = nn::make_pad_mask(src, 0);
    auto caches = model.transformer->decoder->start_cache(model.encode(src, src_pad), 4);
    CHECK(caches[0].self.k.size(1) == kv);
    for (int64_t t = 0; t < 4; ++t) {
      Tensor step = model.project(model.transformer->decoder->forward_step(model.embed_tgt(tgt.narrow(1, t, 1).contiguous(), t), caches, src_pad).output).data();
      // 2 layers x (6 encoder + 10 decoder products) + the output layer, reductions up to the FFN's
      // 16, headroom 8 (tests/rounding.h): one row against the whole prefix are different BLAS calls.
      const double tol = testing::network_tolerance(33, 16, testing::max_abs(logits), DType::Float32, 8);
      CHECK(max_abs_diff(step, logits.narrow(1, t, 1).contiguous()) <= tol);
    }
  }
}

// ---- kinds registered by user code. These cases come last in the file: they add to the
// process-wide lists, and the cases above check the built-in lists exactly.

namespace {

// A gated feed-forward block written as user code would write it: out(a(x) * sigmoid(g(x))).
class GatedTestFF : public nn::FeedForward {
 public:
  GatedTestFF(const nn::TransformerLayerOptions& o, Generator& gen) {
    a = register_module("a", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, false, gen));
    g = register_module("g", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, false, gen));
    out = register_module("out", std::make_shared<nn::Linear>(o.dim_feedforward, o.d_model, false, gen));
  }
  Variable forward(const Variable& x) const override { return out->forward(a->forward(x) * sigmoid(g->forward(x))); }  // (..., D)
  std::shared_ptr<nn::Linear> a, g, out;
};

void register_test_kinds() {
  static const bool once = [] {
    nn::register_feedforward({"gated_test", "out(a(x) * sigmoid(g(x)))",
                              [](const nn::TransformerLayerOptions& o, Generator& gen) -> std::shared_ptr<nn::FeedForward> {
                                return std::make_shared<GatedTestFF>(o, gen);
                              }});
    nn::register_norm({"rmsnorm_test", "RMSNorm under another name",
                       [](int64_t d, double eps) -> std::shared_ptr<nn::Norm> { return std::make_shared<nn::RMSNorm>(d, eps); }});
    return true;
  }();
  (void)once;
}

}  // namespace

TEST_CASE("a feed-forward kind registered from user code: layers own it as `ff`, no linear1/linear2; gradcheck; errors") {
  register_test_kinds();
  CHECK(nn::feedforward_names() == "standard, gated_test");
  nn::TransformerLayerOptions o;
  o.d_model = 6, o.nhead = 2, o.dim_feedforward = 5, o.dropout = 0, o.feedforward = "gated_test";
  Generator gen(80);
  nn::TransformerEncoderLayer enc(o, gen);
  nn::TransformerDecoderLayer dec(o, gen);
  CHECK(enc.linear1 == nullptr);
  CHECK(dec.linear2 == nullptr);
  auto s = shapes_of(enc);
  CHECK(s.count("linear1.weight") == 0);
  CHECK(s.at("ff.a.weight") == "(5, 6)");
  CHECK(s.at("ff.out.weight") == "(6, 5)");
  CHECK(shapes_of(dec).at("ff.g.weight") == "(5, 6)");
  for (nn::Module* m : {static_cast<nn::Module*>(&enc), static_cast<nn::Module*>(&dec)}) {
    m->to(DType::Float64);
    randomise(*m, 81);
  }
  Tensor kpm = Tensor::of({0, 0, 0, 0, 0, 1}, {2, 3}, DType::Bool);
  auto fe = [&](const std::vector<Variable>& in) { return enc.forward(in[0], kpm); };
  std::vector<Variable> fe_in{leaf(randn({2, 3, 6}, 82))};
  for (const Variable& p : enc.ff->parameters()) fe_in.push_back(p);  // a, g, out
  GF_CHECK_GRADS(fe, fe_in);
  auto fd = [&](const std::vector<Variable>& in) { return dec.forward(in[0], in[1], nn::make_causal_mask(3), kpm, kpm).output; };
  GF_CHECK_GRADS(fd, (std::vector<Variable>{leaf(randn({2, 3, 6}, 83)), leaf(randn({2, 3, 6}, 84)), dec.ff->parameters()[0]}));

  // Registering again, without a factory, or under a name that is not a word fails, naming why.
  auto again = [] { nn::register_feedforward({"gated_test", "", [](const nn::TransformerLayerOptions& o, Generator& g) -> std::shared_ptr<nn::FeedForward> { return std::make_shared<GatedTestFF>(o, g); }}); };
  GF_CHECK_CONTAINS(error_of(again), "register feedforward: 'gated_test' is already registered (known: standard, gated_test)");
  GF_CHECK_CONTAINS(error_of([] { nn::register_feedforward({"no_factory", "", nullptr}); }), "register feedforward: 'no_factory' has no factory");
  GF_CHECK_CONTAINS(error_of([] { nn::register_norm({"two words", "", nullptr}); }), "register norm: the name must be a non-empty word, got 'two words'");
  nn::TransformerLayerOptions bad = o;
  bad.feedforward = "swiglu";
  GF_CHECK_CONTAINS(error_of([&] { bad.validate(); }), "feedforward 'swiglu' is unknown (known: standard, gated_test)");
}

TEST_CASE("a registered norm kind is chosen by name like a built-in one") {
  register_test_kinds();
  CHECK(nn::norm_names() == "layernorm, rmsnorm, scalenorm, rmsnorm_test");
  CHECK(dynamic_cast<nn::RMSNorm*>(nn::make_norm("rmsnorm_test", 3, 1e-5).get()) != nullptr);
  nn::TransformerLayerOptions o;
  o.d_model = 4, o.nhead = 2, o.dim_feedforward = 6, o.norm = "rmsnorm_test";
  nn::TransformerEncoderLayer layer(o);
  CHECK(shapes_of(layer).count("norm1.bias") == 0);  // RMSNorm has no bias
}

TEST_CASE("a run config naming a registered feed-forward kind: config.json keeps it, the translator builds it, decoding runs") {
  register_test_kinds();
  train::RunConfig c;
  c.layer.d_model = 8, c.layer.nhead = 2, c.layer.dim_feedforward = 12, c.layer.feedforward = "gated_test", c.layers = 2;
  const train::RunConfig back = train::RunConfig::from_json(c.to_json(), "config.json");
  CHECK(back.layer.feedforward == "gated_test");
  CHECK(train::RunConfig::from_json("{}", "old.json").layer.feedforward == "standard");  // a folder written before the field
  train::Vocab src({"<pad>", "<unk>", "<bos>", "<eos>", "a", "b"}), tgt({"<pad>", "<unk>", "<bos>", "<eos>", "x", "y", "z"});
  auto net = train::make_translation_model(back, src, tgt, 3);
  auto names = shapes_of(net->module());
  CHECK(names.at("transformer.encoder.layers.1.ff.a.weight") == "(12, 8)");
  CHECK(names.at("transformer.decoder.layers.0.ff.out.weight") == "(8, 12)");
  // Cached decoding runs the block one position at a time; in float64 it agrees with recomputing the
  // prefix (tests/rounding.h: in float32 the two reach the scores through different BLAS calls).
  randomise(net->module(), 4);
  net->module().to(DType::Float64);
  net->module().eval();
  train::DecodeOptions opt = net->decode_options();
  opt.max_extra = 4;
  Tensor in = Tensor::of({4, 5, 4, 5, 0, 0}, {2, 3}, DType::Int64);
  const auto cached = net->translate(in, opt, nullptr);
  opt.use_cache = false;
  CHECK(cached.size() == 2);
  CHECK(net->translate(in, opt, nullptr) == cached);
}

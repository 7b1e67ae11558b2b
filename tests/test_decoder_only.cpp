// The decoder-only model: its parameter names, the causal and padding masks (exact properties),
// cached decoding (a prompt prefill, then one token a step) against the full forward, the output
// projection at the last position alone (decoding), the
// "source <sep> target" batches with the loss on the target only, the joint vocabulary, and a short
// training run through the trainer and the translator (cached = uncached, greedy and beam).
#include <doctest/doctest.h>

#include <filesystem>

#include "autograd/grad_mode.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "nn/decoder_only.h"
#include "nn_test_util.h"
#include "tiny_run.h"
#include "tensor/kernels/random.h"
#include "train/run/model.h"
#include "train/run/run_data.h"
#include "train/loop/trainer.h"
#include "train/eval/translator.h"

using namespace gf;
using namespace gf::testing;
namespace fs = std::filesystem;

namespace {

nn::DecoderOnlyOptions small(int64_t kv = 0, bool pre = false) {
  nn::DecoderOnlyOptions o;
  o.vocab = 13;
  o.layer.d_model = 8, o.layer.nhead = 4, o.layer.kv_heads = kv, o.layer.dim_feedforward = 16, o.layer.dropout = 0, o.layer.norm_first = pre;
  o.num_layers = 2;
  o.max_len = 64;
  return o;
}

}  // namespace

TEST_CASE("decoder-only: PyTorch-like names (emb, transformer.layers.N, transformer.norm, out), no cross-attention") {
  nn::DecoderOnlyTransformer m(small(), 1);
  std::map<std::string, std::string> s;
  for (auto& [n, p] : m.named_parameters()) s[n] = shape_str(p.shape());
  CHECK(s.at("emb.weight") == "(13, 8)");
  CHECK(s.at("transformer.layers.1.self_attn.in_proj_weight") == "(24, 8)");
  CHECK(s.at("transformer.layers.0.linear2.weight") == "(8, 16)");
  CHECK(s.at("transformer.norm.weight") == "(8,)");
  CHECK(s.at("out.weight") == "(13, 8)");
  for (auto& [n, shape] : s) CHECK(n.find("multihead_attn") == std::string::npos);
  CHECK(m.state_dict().count("pos.pe") == 1);
}

// d logits_t / d input_t' is exactly 0 for t' > t: the causal mask leaves nothing to leak.
TEST_CASE("decoder-only: the logits at t do not depend on later tokens (exactly), nor on PAD") {
  nn::DecoderOnlyTransformer m(small(2), 2);
  m.to(DType::Float64);
  m.eval();
  Tensor ids = Tensor::of({4, 5, 6, 7, 8, 4, 9, 10, 0, 0}, {2, 5}, DType::Int64);
  Tensor base = m.forward(ids).data();  // (2, 5, 13)
  Tensor changed = ids.clone();
  changed.flat_set(3, 11.0);  // row 0, position 3
  Tensor after = m.forward(changed).data();
  for (int64_t t = 0; t < 5; ++t) {
    const double d = max_abs_diff(base.narrow(1, t, 1).narrow(0, 0, 1).contiguous(), after.narrow(1, t, 1).narrow(0, 0, 1).contiguous());
    if (t < 3) CHECK(d == 0.0);
    else CHECK(d > 1e-6);
  }
  // Row 1's three real tokens give the same logits alone as in the padded batch.
  Tensor alone = m.forward(Tensor::of({4, 9, 10}, {1, 3}, DType::Int64)).data();
  CHECK(max_abs_diff(alone, base.narrow(0, 1, 1).narrow(1, 0, 3).contiguous()) < 1e-12);
}

TEST_CASE("decoder-only: a cached prefill then one token a step equals the full forward (kv-heads 4, 2, 1)") {
  for (int64_t kv : {4, 2, 1}) {
    CAPTURE(kv);
    nn::DecoderOnlyTransformer m(small(kv, kv == 2), 3);
    m.to(DType::Float64);
    m.eval();
    Tensor ids = Tensor::of({4, 5, 6, 7, 8, 9, 10, 11, 12, 4, 6, 8}, {2, 6}, DType::Int64);
    Tensor full = m.forward(ids).data();  // (2, 6, 13)
    auto caches = m.start_cache(2, 6);
    Tensor pre = m.forward_cached(ids.narrow(1, 0, 3).contiguous(), caches).data();  // (2, 3, 13): the prompt at once
    CHECK(max_abs_diff(pre, full.narrow(1, 0, 3).contiguous()) < 1e-12);
    for (int64_t t = 3; t < 6; ++t) {
      Tensor step = m.forward_cached(ids.narrow(1, t, 1).contiguous(), caches).data();  // (2, 1, 13)
      CHECK(max_abs_diff(step, full.narrow(1, t, 1).contiguous()) < 1e-12);
    }
    CHECK(caches[0].length == 6);
    CHECK(caches[0].k.size(1) == kv);
    CHECK_THROWS_AS(m.forward_cached(ids.narrow(1, 0, 1).contiguous(), caches), std::length_error);
  }
}

TEST_CASE("decoder-only: last_only projects the last position alone, as the full forward's last position") {
  nn::DecoderOnlyTransformer m(small(4, false), 3);
  m.to(DType::Float64);
  m.eval();
  Tensor ids = Tensor::of({4, 5, 6, 7, 8, 9, 10, 11, 12, 4, 6, 8}, {2, 6}, DType::Int64);
  Tensor full = m.forward(ids).data();  // (2, 6, 13)
  Tensor last = m.forward(ids, true).data();
  CHECK(shape_str(last.shape()) == "(2, 1, 13)");
  CHECK(max_abs_diff(last, full.narrow(1, 5, 1).contiguous()) < 1e-12);
  auto caches = m.start_cache(2, 6);
  Tensor pre = m.forward_cached(ids.narrow(1, 0, 4).contiguous(), caches, true).data();  // the prompt, its last position's scores
  CHECK(shape_str(pre.shape()) == "(2, 1, 13)");
  CHECK(max_abs_diff(pre, full.narrow(1, 3, 1).contiguous()) < 1e-12);
  Tensor step = m.forward_cached(ids.narrow(1, 4, 1).contiguous(), caches, true).data();
  CHECK(max_abs_diff(step, full.narrow(1, 4, 1).contiguous()) < 1e-12);
}

TEST_CASE("decoder-only batches: input source <sep> target, labels PAD on the source then target <eos>") {
  std::vector<train::EncodedPair> pairs = {{{5, 6, 7}, {8, 9}}, {{5}, {10, 11, 12}}};
  train::Batch b = train::collate(pairs, std::vector<size_t>{0, 1});
  const int64_t sep = 4;
  train::SequenceTensors t = train::to_sequence_tensors(b, sep);
  CHECK(shape_str(t.input.shape()) == "(2, 6)");
  CHECK(t.input.to_vector<int64_t>() == std::vector<int64_t>{5, 6, 7, 4, 8, 9, /**/ 5, 4, 10, 11, 12, 0});
  CHECK(t.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 8, 9, 3, /**/ 0, 10, 11, 12, 3, 0});
  // As many labelled positions as the batch's target tokens (the trainer's per-token mean).
  int64_t labelled = 0;
  for (int64_t v : t.labels.to_vector<int64_t>()) labelled += v != 0;
  CHECK(labelled == b.tgt_tokens);
}

TEST_CASE("joint vocabulary: both sides counted, <sep> after the specials") {
  std::vector<train::TokenPair> pairs = {{{"a", "b"}, {"x", "a"}}, {{"b"}, {"x"}}};
  train::Vocab v = train::Vocab::build_joint(pairs, 1);
  CHECK(v.tokens() == std::vector<std::string>{"<pad>", "<unk>", "<bos>", "<eos>", "<sep>", "a", "b", "x"});
  train::RunConfig c = gf::test::tiny_run();
  c.arch = "decoder-only";
  GF_CHECK_CONTAINS(error_of([&] { train::make_translation_model(c, train::Vocab::build_source(pairs, 1), train::Vocab::build_target(pairs, 1), 1); }),
                    "needs one joint vocabulary with <sep>");
  c.max_len = 300;
  GF_CHECK_CONTAINS(error_of([&] { c.validate(); }), "at most 255 for the decoder-only model");
}

TEST_CASE("decoder-only translation: trains through the trainer, loads, and decodes cached = uncached, greedy and beam") {
  train::RunConfig c = gf::test::learning_run();
  c.arch = "decoder-only";
  c.layer.kv_heads = 2;  // grouped-query attention through the cache as well
  c.max_tokens = 2048;   // one sequence holds source and target: twice the encoder-decoder's batch
  c.epochs = 4;
  fs::path dir = fs::temp_directory_path() / "gradflow_test_decoder_only";
  fs::remove_all(dir);
  train::TrainResult r = train::train_translator(c, gf::test::quiet_options(dir.string()));
  REQUIRE(r.step_losses.size() > 10);
  const double first = r.step_losses.front().second, last = r.step_losses.back().second;
  MESSAGE("decoder-only loss " << first << " -> " << last << " in " << r.steps << " steps");
  CHECK(last < 0.5 * first);
  train::Translator t = train::Translator::load(dir.string());
  CHECK(t.src_vocab.tokens() == t.tgt_vocab.tokens());
  GF_CHECK_CONTAINS(error_of([&] { t.seq2seq(); }), "needs an encoder-decoder model; the run's --arch is decoder-only");
  train::RunData data = train::load_run_data(c, true, train::kMaxLineBytes, train::korean_run_data);
  std::vector<std::string> srcs;
  for (size_t i = 0; i < 60; ++i) srcs.push_back(train::join_tokens(data.train[i].first));
  train::DecodeOptions cached = t.default_decode_options(), uncached = cached, beam = cached;
  uncached.use_cache = false;
  beam.beam = 3;
  const std::vector<std::string> bs = t.translate(srcs, beam, 16);
  // Cached and uncached decoding reach the scores through different BLAS calls, equal only to
  // rounding: compared in float64, where a different argmax would need two logits equal to ~1e-14
  // (tests/rounding.h); in float32 a trained model's near-tie could go either way on some kernel.
  t.net->module().to(DType::Float64);
  CHECK(t.translate(srcs, cached, 16) == t.translate(srcs, uncached, 16));
  int nonempty = 0;
  for (const auto& s : bs) nonempty += !s.empty();
  CHECK(nonempty > 50);
  fs::remove_all(dir);
}

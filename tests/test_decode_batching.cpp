// How decoding runs a batch, which must never change what it decodes: a batch of more than 32
// sentences is split into groups decoded side by side on the threads (train/decode/decode.cpp),
// and lay_out_for_decoding stores the weights column-major (nn/decode_layout.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/decode_layout.h"
#include "nn/seq2seq.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/random.h"
#include "autograd/ops/matmul.h"
#include "tensor/parallel.h"
#include "train/decode/decode.h"
#include "nn_test_util.h"
#include "rounding.h"

using namespace gf;

namespace {

constexpr int64_t kV = 13, kB = 70;

nn::Seq2SeqOptions small_options(bool tie = false) {
  nn::Seq2SeqOptions o;
  o.src_vocab = o.tgt_vocab = kV;
  o.layer.d_model = 16, o.layer.nhead = 2, o.layer.dim_feedforward = 32, o.layer.dropout = 0;
  o.num_layers = 2;
  o.tie_output = tie;
  return o;
}

// kB sources (kB, 6) of 1 to 6 tokens (4..12), PAD-padded; only row 0 has 6 tokens.
Tensor sources() {
  Generator gen(11);
  Tensor u = Tensor::empty({kB, 7});
  kernels::uniform_(u, 0.0, 1.0, gen);
  std::vector<int64_t> flat(static_cast<size_t>(kB * 6), 0);
  for (int64_t b = 0; b < kB; ++b) {
    const int64_t len = b == 0 ? 6 : 1 + static_cast<int64_t>(u.data<float>()[b * 7] * 3);  // 1..3
    for (int64_t s = 0; s < len; ++s) flat[b * 6 + s] = 4 + static_cast<int64_t>(u.data<float>()[b * 7 + 1 + s] * 9);
  }
  return Tensor::from_vector(flat, {kB, 6});
}

std::vector<std::vector<int64_t>> decode_on(int threads, const nn::Seq2SeqTransformer& m, const Tensor& src, const train::DecodeOptions& o) {
  set_num_threads(threads);
  auto out = train::translate_batch(m, src, o);
  set_num_threads(0);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && std::memcmp(x.data<float>(), y.data<float>(), sizeof(float) * x.numel()) == 0;
}

}  // namespace

TEST_CASE("a batch of more than 32 sentences, decoded in groups side by side, gives what decoding each group alone gives, in order, on 1 and 2 threads") {
  NoGradGuard ng;
  nn::Seq2SeqTransformer m(small_options(), 5);
  m.eval();
  const Tensor src = sources();
  for (int64_t beam : {1, 3}) {
    CAPTURE(beam);
    train::DecodeOptions o;
    o.beam = beam, o.max_extra = 4;
    const auto two = decode_on(2, m, src, o);
    REQUIRE(two.size() == static_cast<size_t>(kB));
    CHECK(decode_on(1, m, src, o) == two);
    std::vector<std::vector<int64_t>> alone;
    for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 23}, {23, 46}, {46, 70}}) {
      const auto part = train::translate_batch(m, src.narrow(0, lo, hi - lo).contiguous(), o);
      alone.insert(alone.end(), part.begin(), part.end());
    }
    CHECK(alone == two);
  }
}

TEST_CASE("fixed-length greedy decoding in groups: every row runs the whole batch's step count, not its group's") {
  NoGradGuard ng;
  nn::Seq2SeqTransformer m(small_options(), 5);
  m.eval();
  train::DecodeOptions o;
  o.max_extra = 4, o.stop_at_eos = false;
  train::DecodeStats st;
  const auto out = train::translate_batch(m, sources(), o, &st);  // only row 0, in the first group, has 6 tokens
  CHECK(st.steps == 6 + 4);
  for (const auto& hyp : out) CHECK(hyp.size() == 10u);
}

// DecodeOptions::kv_cache = bfloat16 (--kv-cache bf16): half the cache bytes per token, and on a
// random model (flat distributions, so near ties) most outputs as with the float32 cache.
TEST_CASE("a bfloat16 KV cache: half the bytes per token, greedy and beam; outputs mostly as with float32's") {
  NoGradGuard ng;
  nn::Seq2SeqTransformer m(small_options(), 5);
  m.eval();
  const Tensor src = sources();
  for (int64_t beam : {1, 3}) {
    CAPTURE(beam);
    train::DecodeOptions o;
    o.beam = beam, o.max_extra = 4;
    train::DecodeStats st32, st16;
    const auto f32 = train::translate_batch(m, src, o, &st32);
    o.kv_cache = DType::BFloat16;
    const auto b16 = train::translate_batch(m, src, o, &st16);
    CHECK(st32.self_bytes_per_token == 2 * 2 * 16 * 4);  // K and V x 2 layers x d_model 16 x 4 bytes
    CHECK(st16.self_bytes_per_token * 2 == st32.self_bytes_per_token);
    CHECK(st16.cross_bytes_per_src_token * 2 == st32.cross_bytes_per_src_token);
    CHECK(st16.cache_bytes_peak * 2 == st32.cache_bytes_peak);
    REQUIRE(b16.size() == f32.size());
    int64_t same = 0;
    for (size_t i = 0; i < f32.size(); ++i) same += b16[i] == f32[i];
    CHECK(same >= 60);  // of 70
    // Unset (--kv-cache auto): the cache follows the products, bfloat16 under bf16.
    o.kv_cache.reset();
    train::DecodeStats auto32, auto16;
    train::translate_batch(m, src, o, &auto32);
    {
      const kernels::PrecisionScope bf16(Precision::BFloat16);
      train::translate_batch(m, src, o, &auto16);
    }
    CHECK(auto32.self_bytes_per_token == st32.self_bytes_per_token);
    CHECK(auto16.self_bytes_per_token == st16.self_bytes_per_token);
    o.kv_cache = DType::Float32;  // fp32 stays fp32 under bf16 products
    train::DecodeStats fixed32;
    {
      const kernels::PrecisionScope bf16(Precision::BFloat16);
      train::translate_batch(m, src, o, &fixed32);
    }
    CHECK(fixed32.self_bytes_per_token == st32.self_bytes_per_token);
  }
}

TEST_CASE("lay_out_for_decoding: linear weights column-major with the same values; embeddings and tied weights as they were") {
  NoGradGuard ng;
  for (bool tie : {false, true}) {
    CAPTURE(tie);
    nn::Seq2SeqTransformer plain(small_options(tie), 5), laid(small_options(tie), 5);
    plain.eval(), laid.eval();
    nn::lay_out_for_decoding(laid);
    const auto before = plain.state_dict(), after = laid.state_dict();
    REQUIRE(before.size() == after.size());
    int64_t column_major = 0;
    for (const auto& [name, t] : after) {
      CAPTURE(name);
      CHECK(same_bits(t, before.at(name)));  // a copy: the code fixes these bits
      const bool embedding = name.find("emb.") != std::string::npos || (tie && name == "out.weight");
      const bool linear = t.ndim() == 2 && !embedding && name.size() > 6 && name.substr(name.size() - 6) == "weight";
      CHECK(nn::is_column_major(t) == linear);
      column_major += linear;
    }
    // 2 layers: encoder 4 weights each (in_proj, out_proj, linear1, linear2), decoder 6; + out unless tied
    CHECK(column_major == 2 * 4 + 2 * 6 + (tie ? 0 : 1));
  }
}

TEST_CASE("lay_out_for_decoding: the same logits to rounding, and in float64 the same translations") {
  // The products now read B column-major, which OpenBLAS may sum in another order (its SkylakeX and
  // Cooperlake small-matrix kernels do): the logits agree to the rounding of tests/rounding.h, not
  // to the bit. Longest chain of products: 2 encoder layers x 6 (in_proj, QK^T, PV, out_proj,
  // linear1, linear2), 2 decoder layers x 10 (self- and cross-attention 4 each, the FFN 2), the
  // output layer: 33; the longest reduction is the FFN's 32; headroom 8 (about sqrt(32) for
  // random signs, and LayerNorm's gain).
  NoGradGuard ng;
  for (bool tie : {false, true})
    for (DType dtype : {DType::Float32, DType::Float64}) {
      CAPTURE(tie);
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      nn::Seq2SeqTransformer plain(small_options(tie), 5), laid(small_options(tie), 5);
      plain.to(dtype), laid.to(dtype);
      plain.eval(), laid.eval();
      nn::lay_out_for_decoding(laid);
      const Tensor src = sources().narrow(0, 0, 5).contiguous(), tgt = src.narrow(1, 0, 4).contiguous();
      const Tensor want = plain.forward(src, tgt).data(), got = laid.forward(src, tgt).data();  // (5, 4, V)
      const double scale = testing::max_abs(want);
      const double tol = testing::network_tolerance(33, 32, scale, dtype, 8);
      const double diff = testing::max_abs_diff(got, want);
      MESSAGE(std::string(dtype_name(dtype)), " tie ", tie, ": largest logit difference ", diff, " (tolerance ", tol, ", logits up to ", scale, ")");
      CHECK(diff <= tol);
      if (dtype == DType::Float64) {  // a different translation would need two scores equal to ~1e-14
        train::DecodeOptions o;
        o.beam = 3, o.max_extra = 4;
        CHECK(train::translate_batch(laid, sources(), o) == train::translate_batch(plain, sources(), o));
      }
    }
}

// Under --precision bf16, translate and eval keep the linear weights in bfloat16 alone
// (lay_out_for_decoding(..., BFloat16)): each product used to round the float32 weight to the same
// bfloat16 bits (kernels::bf16_weight), so the translations are the same, bit for bit, with half
// the weights' bytes; embeddings and a tied output weight stay float32.
TEST_CASE("lay_out_for_decoding in bfloat16: the same translations under bf16 products; tied and embedding weights float32") {
  NoGradGuard ng;
  const kernels::PrecisionScope bf16(Precision::BFloat16);
  for (bool tie : {false, true}) {
    CAPTURE(tie);
    nn::Seq2SeqTransformer kept32(small_options(tie), 5), kept16(small_options(tie), 5);
    kept32.eval(), kept16.eval();
    nn::lay_out_for_decoding(kept32);
    nn::lay_out_for_decoding(kept16, DType::BFloat16);
    int64_t bf16_weights = 0;
    for (const auto& [name, t] : kept16.state_dict()) {
      CAPTURE(name);
      const bool embedding = name.find("emb.") != std::string::npos || (tie && name == "out.weight");
      const bool linear = t.ndim() == 2 && !embedding && name.size() > 6 && name.substr(name.size() - 6) == "weight";
      CHECK((t.dtype() == DType::BFloat16) == linear);
      if (linear) CHECK(nn::is_column_major(t));
      bf16_weights += linear;
    }
    CHECK(bf16_weights == 2 * 4 + 2 * 6 + (tie ? 0 : 1));
    for (int64_t beam : {1, 3}) {
      train::DecodeOptions o;
      o.beam = beam, o.max_extra = 4;
      CHECK(train::translate_batch(kept16, sources(), o) == train::translate_batch(kept32, sources(), o));
    }
  }
}

TEST_CASE("a bfloat16 weight refuses float32 products and training, naming itself") {
  nn::Seq2SeqTransformer m(small_options(), 5);
  nn::lay_out_for_decoding(m, DType::BFloat16);
  const Variable x(Tensor::ones({2, 16}));  // (2, d_model)
  const Variable w = (*m.transformer->encoder->layers)[0].linear1->weight;  // (32, 16) bfloat16
  REQUIRE(w.dtype() == DType::BFloat16);
  CHECK_FALSE(w.requires_grad());
  CHECK_THROWS_WITH(linear(x, w, Variable()), doctest::Contains("the weight (32, 16) is stored in bfloat16"));
  CHECK_THROWS_WITH(linear(x, w, Variable()), doctest::Contains("got float32 input, fp32 products"));
  const kernels::PrecisionScope bf16(Precision::BFloat16);
  CHECK(linear(x, w, Variable()).shape() == Shape{2, 32});
}

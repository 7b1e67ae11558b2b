// Sizes checked before allocation (train/run/memory_estimate.h): the parameter count computed
// from the shapes equals the built model's for every architecture, norm and attention kind; the
// checkpoint's value count equals its state_dict's; a model too large is refused naming the flag
// that weighs most; memory sizes parse; shape products and tensor byte sizes never overflow.
#include <doctest/doctest.h>

#include <limits>
#include <stdexcept>

#include "autograd/ops/arith.h"
#include "nn/ffn.h"
#include "tensor/tensor.h"
#include "train/data/vocab.h"
#include "train/run/memory_estimate.h"
#include "train/run/model.h"

using namespace gf;
using namespace gf::train;

namespace {

// A vocabulary of n tokens (the four specials, <sep> for a joint one, then words).
Vocab vocab_of(int64_t n, bool sep) {
  std::vector<std::string> t(Vocab::kSpecials.begin(), Vocab::kSpecials.end());
  if (sep) t.emplace_back(Vocab::kSep);
  while (static_cast<int64_t>(t.size()) < n) t.push_back("w" + std::to_string(t.size()));
  return Vocab(t);
}

// A feed-forward kind of the test's own, as a program built on the library registers one
// (examples/custom_layer's SwiGLU has this shape): three linear maps, a bias on one.
class GatedBlock : public nn::FeedForward {
 public:
  GatedBlock(const nn::TransformerLayerOptions& o, Generator& gen) {
    gate = register_module("gate", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, false, gen));
    value = register_module("value", std::make_shared<nn::Linear>(o.d_model, o.dim_feedforward, true, gen));
    out = register_module("out", std::make_shared<nn::Linear>(o.dim_feedforward, o.d_model, false, gen));
  }
  Variable forward(const Variable& x) const override { return out->forward(gate->forward(x) * value->forward(x)); }
  std::shared_ptr<nn::Linear> gate, value, out;
};

void register_gated_block() {
  static const bool done = [] {
    nn::register_feedforward({"test_gated", "a gated block of the test's own",
                              [](const nn::TransformerLayerOptions& o, Generator& gen) -> std::shared_ptr<nn::FeedForward> {
                                return std::make_shared<GatedBlock>(o, gen);
                              }});
    return true;
  }();
  (void)done;
}

}  // namespace

TEST_CASE("the parameter count from the shapes is the built model's, for every kind of model") {
  register_gated_block();
  struct Variant {
    const char* arch;
    const char* norm;
    int64_t d, heads, kv, ff, layers;
    bool tie, pre;
    const char* feedforward = "standard";
  };
  const Variant variants[] = {
      {"encoder-decoder", "layernorm", 32, 4, 0, 64, 2, false, false}, {"encoder-decoder", "rmsnorm", 48, 4, 2, 80, 1, true, true},
      {"encoder-decoder", "scalenorm", 24, 6, 1, 40, 3, false, false}, {"decoder-only", "layernorm", 32, 2, 0, 96, 2, false, true},
      {"decoder-only", "rmsnorm", 40, 4, 1, 64, 1, true, false},       {"encoder-decoder", "layernorm", 36, 3, 0, 50, 2, false, false, "test_gated"},
      {"decoder-only", "scalenorm", 20, 2, 1, 30, 2, true, true, "test_gated"},
  };
  for (const Variant& v : variants) {
    CAPTURE(v.arch);
    CAPTURE(v.norm);
    CAPTURE(v.kv);
    CAPTURE(v.tie);
    CAPTURE(v.feedforward);
    RunConfig c;
    c.layer.feedforward = v.feedforward;
    c.arch = v.arch;
    c.layer.norm = v.norm;
    c.layer.d_model = v.d;
    c.layer.nhead = v.heads;
    c.layer.kv_heads = v.kv;
    c.layer.dim_feedforward = v.ff;
    c.layer.norm_first = v.pre;
    c.layers = v.layers;
    c.tie = v.tie;
    const bool joint = c.arch == "decoder-only";
    const Vocab src = vocab_of(joint ? 57 : 61, joint), tgt = joint ? src : vocab_of(45, false);
    const std::unique_ptr<TranslationModel> m = make_translation_model(c, src, tgt, 1);
    CHECK(parameter_count(c, src.size(), tgt.size()) == static_cast<double>(m->module().num_parameters()));
    int64_t values = 0;
    for (const auto& [name, t] : m->module().state_dict()) values += t.numel();
    CHECK(checkpoint_values(c, src.size(), tgt.size()) == static_cast<double>(values));
  }
}

TEST_CASE("a model too large is refused before anything is built, naming the flag that weighs most") {
  RunConfig c;
  c.layer.d_model = 200000;
  c.layer.nhead = 4;
  try {
    check_training_memory(c, 9000, 9000, 1);
    FAIL("not refused");
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    CAPTURE(m);
    CHECK(m.starts_with("train: --d-model 200000: the model needs "));
    CHECK(m.find("TiB for weights, gradients and Adam state") != std::string::npos);
    CHECK(m.find("are available (--max-memory sets the limit)") != std::string::npos);
  }
  RunConfig wide;  // the feed-forward dominates
  wide.layer.dim_feedforward = int64_t{1} << 32;
  CHECK_THROWS_WITH_AS(check_training_memory(wide, 9000, 9000, 1), doctest::Contains("train: --ff 4294967296: "), std::runtime_error);
  RunConfig tokens;  // the activations dominate
  tokens.max_tokens = int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(check_training_memory(tokens, 9000, 9000, 1), doctest::Contains("train: --max-tokens 1099511627776: "), std::runtime_error);
  // The reference model fits in 1 GiB, not in 10 MiB.
  const RunConfig reference;
  CHECK_NOTHROW(check_training_memory(reference, 7859, 5921, 1, 1024.0 * 1024 * 1024));
  CHECK_THROWS_WITH_AS(check_training_memory(reference, 7859, 5921, 1, 10.0 * 1024 * 1024), doctest::Contains("--max-memory allows 10.0 MiB"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(check_decoding_memory(c, 9000, 9000, "run/config.json", 1024.0), doctest::Contains("run/config.json describes a model (d_model 200000)"),
                       std::runtime_error);
}

TEST_CASE("the reference model's estimate") {
  const RunConfig reference;  // d_model 256, 4 heads, 3+3 layers, ff 1024, 4,096 tokens a batch
  const MemoryEstimate m = training_memory(reference, 7859, 5921, 1);
  CHECK(m.parameters == 10580001);  // the README's count, the PyTorch reference's too
  CHECK(m.state_bytes == doctest::Approx(16.0 * 10580001 + 512 * 256 * 12));
  MESSAGE("reference model: state ", format_bytes(m.state_bytes), ", activations ", format_bytes(m.activation_bytes));
  CHECK(m.activation_bytes > 0);
}

TEST_CASE("memory sizes parse with binary units, and print") {
  CHECK(parse_memory_size("8G") == 8.0 * (1 << 30));
  CHECK(parse_memory_size("8GiB") == 8.0 * (1 << 30));
  CHECK(parse_memory_size("512M") == 512.0 * (1 << 20));
  CHECK(parse_memory_size("1.5T") == 1.5 * 1024.0 * 1024 * 1024 * 1024);
  CHECK(parse_memory_size("64K") == 65536);
  CHECK(parse_memory_size("1000") == 1000);
  for (const char* bad : {"", "lots", "-1G", "0", "8X", "G", "nan", "inf", "1e400"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_memory_size(bad), std::invalid_argument);
  }
  CHECK(format_bytes(900) == "900 bytes");
  CHECK(format_bytes(3.3 * (1 << 20)) == "3.3 MiB");
  CHECK(format_bytes(412.0 * (1 << 30)) == "412 GiB");
  CHECK(available_memory() > 0);  // Linux says
}

TEST_CASE("shape products and tensor sizes never overflow") {
  const int64_t big = int64_t{1} << 40;
  CHECK_THROWS_WITH_AS(shape_numel({big, big}), doctest::Contains("more than 2^63 elements"), std::length_error);
  CHECK_THROWS_AS(shape_numel({4, -1}), std::invalid_argument);
  CHECK(shape_numel({big, 0, big}) == 0);  // a zero dimension: no elements, whatever the others
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t{1} << 62, 4}), doctest::Contains("more than 2^63"), std::length_error);
}

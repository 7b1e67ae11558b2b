// The run config: one description of the model (nn::TransformerLayerOptions) saved in config.json,
// validated in one place, and run folders written before it (format gradflow-run-1, model fields
// flat at the top level) still loading, weights and all.
#include <doctest/doctest.h>

#include <filesystem>

#include "nn_test_util.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "train/run/run_config.h"
#include "train/eval/translator.h"
#include "train/run/run_data.h"
#include "tiny_run.h"

using namespace gf;
using namespace gf::testing;
using train::RunConfig;
namespace fs = std::filesystem;

namespace {

// config.json as the trainer wrote it before the layer options had one type (gradflow 0.1.0).
const char* kRunFormat1 = R"({
 "activation": "gelu", "adam_eps": 1e-09, "beta1": 0.9, "beta2": 0.98, "clip": 1.0, "corpus_seed": 1,
 "corpus_size": 24000, "d_model": 32, "data": "", "dropout": 0.2, "epochs": 0, "ff": 48,
 "format": "gradflow-run-1", "heads": 4, "label_smoothing": 0.1, "layers": 2, "log_every": 100, "lr": 0.002,
 "max_len": 100, "max_tokens": 4096, "min_freq": 1, "minutes": 4.0, "norm_first": true, "seed": 1, "src": "en",
 "steps": 0, "test_split": "", "tgt": "ko", "tie": false, "train_split": "train", "valid_split": "", "warmup": 400
})";

}  // namespace

TEST_CASE("config.json round trip keeps every model field, in the layer object") {
  RunConfig c;
  c.arch = "decoder-only";
  c.layer.d_model = 48, c.layer.nhead = 6, c.layer.kv_heads = 2, c.layer.dim_feedforward = 96;
  c.layer.activation = "gelu", c.layer.norm = "rmsnorm", c.layer.norm_first = true, c.layer.dropout = 0.25, c.layer.layer_norm_eps = 1e-6;
  c.layers = 5, c.tie = true, c.lr = 3e-4;
  const std::string text = c.to_json();
  CHECK(text.find("\"format\": \"gradflow-run-2\"") != std::string::npos);
  CHECK(text.find("\"layer\": {") != std::string::npos);
  RunConfig d = RunConfig::from_json(text, "config.json");
  CHECK(d.arch == "decoder-only");
  CHECK(d.layer.d_model == 48);
  CHECK(d.layer.nhead == 6);
  CHECK(d.layer.kv_heads == 2);
  CHECK(d.layer.dim_feedforward == 96);
  CHECK(d.layer.activation == "gelu");
  CHECK(d.layer.norm == "rmsnorm");
  CHECK(d.layer.norm_first);
  CHECK(d.layer.dropout == 0.25);
  CHECK(d.layer.layer_norm_eps == 1e-6);
  CHECK(d.layers == 5);
  CHECK(d.tie);
  CHECK(d.to_json() == text);
}

TEST_CASE("a gradflow-run-1 config.json (model fields flat, CLI names) still loads") {
  RunConfig c = RunConfig::from_json(kRunFormat1, "old/config.json");
  CHECK(c.arch == "encoder-decoder");
  CHECK(c.layer.d_model == 32);
  CHECK(c.layer.nhead == 4);
  CHECK(c.layer.kv_heads == 0);
  CHECK(c.layer.dim_feedforward == 48);
  CHECK(c.layer.dropout == 0.2);
  CHECK(c.layer.activation == "gelu");
  CHECK(c.layer.norm == "layernorm");
  CHECK(c.layer.norm_first);
  CHECK(c.layers == 2);
  CHECK(c.minutes == 4.0);
}

TEST_CASE("a whole run folder of the old format loads its weights and translates") {
  const fs::path dir = fs::temp_directory_path() / "gradflow_test_old_run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_file_atomic((dir / "config.json").string(), kRunFormat1);
  train::Vocab src({"<pad>", "<unk>", "<bos>", "<eos>", "a", "b", "c"}), tgt({"<pad>", "<unk>", "<bos>", "<eos>", "x", "y"});
  src.save(dir / "vocab.src.txt");
  tgt.save(dir / "vocab.tgt.txt");
  // The weights a gradflow 0.1.0 model of that config has: the same names and shapes as today's.
  RunConfig c = RunConfig::from_json(kRunFormat1, "config.json");
  nn::Seq2SeqTransformer model(c.model_options(src.size(), tgt.size()), 7);
  save_safetensors((dir / "best.safetensors").string(), model.state_dict(), {{"format", "gradflow"}});
  train::Translator t = train::Translator::load(dir.string());
  CHECK(t.config.layer.norm_first);
  CHECK(t.seq2seq().options().layer.activation == "gelu");
  std::vector<std::string> out = t.translate({"a b c", "c a"}, t.default_decode_options());
  CHECK(out.size() == 2);
  fs::remove_all(dir);
}

TEST_CASE("validation names the bad field: arch, norm, activation, kv heads") {
  RunConfig c;
  c.arch = "encoder-only";
  GF_CHECK_CONTAINS(error_of([&] { c.validate(); }), "--arch must be encoder-decoder or decoder-only, got 'encoder-only'");
  c = RunConfig();
  c.layer.norm = "groupnorm";
  GF_CHECK_CONTAINS(error_of([&] { c.validate(); }), "norm 'groupnorm' is unknown (known: layernorm, rmsnorm, scalenorm)");
  c = RunConfig();
  c.layer.activation = "swish";
  GF_CHECK_CONTAINS(error_of([&] { c.validate(); }), "activation 'swish' is unknown (known: relu, gelu)");
  c = RunConfig();
  c.layer.kv_heads = 3;
  GF_CHECK_CONTAINS(error_of([&] { c.validate(); }), "kv_heads must divide nhead 4");
  // A config.json with a bad value says which file.
  GF_CHECK_CONTAINS(error_of([] { RunConfig::from_json(R"({"layer": {"norm": "nope"}})", "runs/x/config.json"); }),
                    "runs/x/config.json: norm 'nope' is unknown");
}

TEST_CASE("a run without --data reads the built-in corpus its program hands in, and names it when none is") {
  const RunConfig c = gf::test::tiny_run(40);
  CHECK_THROWS_WITH_AS(train::load_run_data(c), doctest::Contains("the run has no --data and the program gave no built-in corpus"),
                       std::invalid_argument);
  const train::RunData d = train::load_run_data(c, true, train::kMaxLineBytes, train::korean_run_data);
  CHECK(d.train.size() + d.valid.size() + d.test.size() == 40);
  CHECK(d.train_name == "built-in train");
  CHECK(d.test_name == "built-in test");
}

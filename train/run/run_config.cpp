#include "train/run/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/plain_file.h"
#include "train/data/utf8.h"
#include "train/run/json_fields.h"

namespace gf::train {

using json = nlohmann::json;
using namespace json_fields;

std::string RunConfig::data_description() const {
  if (builtin()) return "built-in English->Korean corpus (seed " + std::to_string(corpus_seed) + ", " + std::to_string(corpus_size) + " pairs)";
  return data + " (" + src + " -> " + tgt + ")";
}

nn::Seq2SeqOptions RunConfig::model_options(int64_t src_vocab, int64_t tgt_vocab) const {
  nn::Seq2SeqOptions o;
  o.src_vocab = src_vocab;
  o.tgt_vocab = tgt_vocab;
  o.layer = layer;
  o.num_layers = layers;
  o.tie_output = tie;
  return o;
}

#define GF_CONFIG_FIELDS(X)                                                                                              \
  X(data) X(src) X(tgt) X(train_split) X(valid_split) X(test_split) X(corpus_seed) X(corpus_size) X(min_freq) X(max_len) \
  X(subwords) X(subword_type) X(joint_vocab)                                                                             \
  X(max_tokens) X(arch) X(layers) X(tie) X(lr) X(label_smoothing) X(clip) X(warmup) X(beta1) X(beta2) X(adam_eps) X(epochs)    \
  X(steps) X(minutes) X(seed) X(log_every) X(average_last) X(precision) X(resolved_precision) X(schedule) X(decay_fraction) X(patience)
#define GF_LAYER_FIELDS(X) \
  X(d_model) X(nhead) X(kv_heads) X(dim_feedforward) X(activation) X(feedforward) X(norm) X(norm_first) X(dropout) \
  X(layer_norm_eps)

std::string RunConfig::to_json() const {
  json j;
#define GF_WRITE(f) j[#f] = f;
  GF_CONFIG_FIELDS(GF_WRITE)
#undef GF_WRITE
#define GF_WRITE_LAYER(f) j["layer"][#f] = layer.f;
  GF_LAYER_FIELDS(GF_WRITE_LAYER)
#undef GF_WRITE_LAYER
  j["format"] = "gradflow-run-2";
  return j.dump(1) + "\n";
}

namespace {

// gradflow-run-1 (before the layer options had one type) kept the model fields at the top level
// under the CLI's names.
void read_legacy_model_fields(const json& j, nn::TransformerLayerOptions& l) {
  read_optional(j, "d_model", l.d_model);
  read_optional(j, "heads", l.nhead);
  read_optional(j, "ff", l.dim_feedforward);
  read_optional(j, "dropout", l.dropout);
  read_optional(j, "activation", l.activation);
  read_optional(j, "norm_first", l.norm_first);
}

}  // namespace

RunConfig RunConfig::from_json(const std::string& text, const std::string& where) {
  RunConfig c;
  try {
    const json j = parse(text, kMaxRunJsonDepth);
    if (!j.is_object()) throw FieldError(fmt::format("the file holds a JSON {}, not an object", j.type_name()));
#define GF_READ(f) read_optional(j, #f, c.f);
    GF_CONFIG_FIELDS(GF_READ)
#undef GF_READ
    if (auto l = j.find("layer"); l != j.end()) {
      if (!l->is_object()) bad_field("layer", *l, "an object");
#define GF_READ_LAYER(f) read_optional(*l, #f, c.layer.f, "layer.");
      GF_LAYER_FIELDS(GF_READ_LAYER)
#undef GF_READ_LAYER
    } else {
      read_legacy_model_fields(j, c.layer);
    }
  } catch (const json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run config: {}", where, e.what());
  } catch (const FieldError& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run config: {}", where, e.what());
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    GF_FAIL_AS(std::runtime_error, "{}: {}", where, e.what());
  }
  return c;
}

RunConfig RunConfig::read(const std::string& path) { return from_json(read_regular_file(path, kMaxConfigBytes, "run config"), path); }

void RunConfig::validate() const {
  auto positive = [](const char* name, double v) {
    GF_CHECK(v > 0, "--{} must be positive, got {}", name, v);
  };
  // config.json stores the text settings as JSON strings, which must be UTF-8.
  for (const auto& [flag, text] : {std::pair<const char*, const std::string&>{"data", data}, {"src", src}, {"tgt", tgt},
                                   {"train-split", train_split}, {"valid-split", valid_split}, {"test-split", test_split}}) {
    const size_t bad = utf8::find_invalid(text);
    GF_CHECK(bad == std::string::npos, "--{} must be UTF-8 text (config.json keeps it as a JSON string): byte {} (0x{:02x}) is not",
             flag, bad + 1, static_cast<unsigned char>(text[bad]));
  }
  GF_CHECK(arch == "encoder-decoder" || arch == "decoder-only", "--arch must be encoder-decoder or decoder-only, got '{}'", arch);
  layer.validate();
  positive("layers", static_cast<double>(layers));
  positive("lr", lr);
  positive("max-tokens", static_cast<double>(max_tokens));
  positive("min-freq", static_cast<double>(min_freq));
  positive("max-len", static_cast<double>(max_len));
  GF_CHECK(layer.d_model % 2 == 0, "--d-model must be even for sinusoidal positions, got {}", layer.d_model);
  GF_CHECK(label_smoothing >= 0 && label_smoothing < 1, "--label-smoothing must be in [0, 1), got {}", label_smoothing);  // NaN fails too
  GF_CHECK(warmup >= 0, "--warmup cannot be negative, got {} (0: no warm-up)", warmup);
  {
    const std::vector<std::string>& names = optim::schedule_names();
    GF_CHECK(std::find(names.begin(), names.end(), schedule) != names.end(), "--schedule must be one of {}, got '{}'", fmt::join(names, ", "), schedule);
  }
  GF_CHECK(decay_fraction > 0 && decay_fraction <= 1, "--decay-fraction must be in (0, 1], got {}", decay_fraction);  // NaN fails too
  GF_CHECK(patience >= 0, "--patience cannot be negative, got {} (0: off)", patience);
  if (epochs < 0 || steps < 0 || !(minutes >= 0))
    GF_FAIL("--epochs, --steps and --minutes cannot be negative, got {}, {} and {}", epochs, steps, minutes);
  GF_CHECK(average_last >= 0, "--average-last cannot be negative, got {}", average_last);
  GF_CHECK(precision == "auto" || precision == "fp32" || precision == "bf16", "--precision must be auto, fp32 or bf16, got '{}'", precision);
  GF_CHECK(resolved_precision.empty() || resolved_precision == "fp32" || resolved_precision == "bf16",
           "resolved_precision must be fp32 or bf16, got '{}'", resolved_precision);
  GF_CHECK(log_every >= 1, "--log-every must be at least 1, got {}", log_every);  // the trainer divides by it
  GF_CHECK(!builtin() || corpus_size >= 20, "corpus_size (the built-in corpus's pairs) must be at least 20, got {}", corpus_size);
  GF_CHECK(subwords >= 0, "--subwords cannot be negative, got {}", subwords);
  GF_CHECK(subword_type == "unigram" || subword_type == "bpe", "--subword-type must be unigram or bpe, got '{}'", subword_type);
  GF_CHECK(!joint_vocab || subwords > 0, "--joint-vocab needs --subwords N (whitespace vocabularies are joint only for --arch decoder-only)");
  GF_CHECK(arch != "decoder-only" || subwords == 0 || joint_vocab,
           "--arch decoder-only reads source and target as one sequence: with --subwords it needs --joint-vocab");
  // (Compared without adding to max_len, which could overflow.)
  GF_CHECK(max_len <= 510, "--max-len must be at most 510 (the positional table holds 512), got {}", max_len);
  GF_CHECK(arch != "decoder-only" || max_len <= 255,
           "--max-len must be at most 255 for the decoder-only model (source, <sep> and target share 512 positions), got {}", max_len);
}

}  // namespace gf::train

#include "train/run_config.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace gf::train {

using json = nlohmann::json;

std::string RunConfig::data_description() const {
  if (builtin()) return "built-in English->Korean corpus (seed " + std::to_string(corpus_seed) + ", " + std::to_string(corpus_size) + " pairs)";
  return data + " (" + src + " -> " + tgt + ")";
}

nn::Seq2SeqOptions RunConfig::model_options(int64_t src_vocab, int64_t tgt_vocab) const {
  nn::Seq2SeqOptions o;
  o.src_vocab = src_vocab;
  o.tgt_vocab = tgt_vocab;
  o.d_model = d_model;
  o.nhead = heads;
  o.num_layers = layers;
  o.dim_feedforward = ff;
  o.dropout = dropout;
  o.activation = nn::parse_activation(activation);
  o.norm_first = norm_first;
  o.tie_output = tie;
  return o;
}

#define GF_CONFIG_FIELDS(X)                                                                                              \
  X(data) X(src) X(tgt) X(train_split) X(valid_split) X(test_split) X(corpus_seed) X(corpus_size) X(min_freq) X(max_len) \
  X(max_tokens) X(d_model) X(heads) X(layers) X(ff) X(dropout) X(activation) X(norm_first) X(tie) X(lr)                 \
  X(label_smoothing) X(clip) X(warmup) X(beta1) X(beta2) X(adam_eps) X(epochs) X(steps) X(minutes) X(seed) X(log_every)

std::string RunConfig::to_json() const {
  json j;
#define GF_WRITE(f) j[#f] = f;
  GF_CONFIG_FIELDS(GF_WRITE)
#undef GF_WRITE
  j["format"] = "gradflow-run-1";
  return j.dump(1) + "\n";
}

RunConfig RunConfig::from_json(const std::string& text, const std::string& where) {
  RunConfig c;
  try {
    json j = json::parse(text);
#define GF_READ(f) \
  if (j.contains(#f)) j.at(#f).get_to(c.f);
    GF_CONFIG_FIELDS(GF_READ)
#undef GF_READ
  } catch (const json::exception& e) {
    throw std::runtime_error(where + ": malformed run config: " + e.what());
  }
  c.validate();
  return c;
}

void RunConfig::validate() const {
  auto positive = [](const char* name, double v) {
    if (!(v > 0)) throw std::invalid_argument(std::string("--") + name + " must be positive, got " + std::to_string(v));
  };
  positive("d-model", static_cast<double>(d_model));
  positive("heads", static_cast<double>(heads));
  positive("layers", static_cast<double>(layers));
  positive("ff", static_cast<double>(ff));
  positive("lr", lr);
  positive("max-tokens", static_cast<double>(max_tokens));
  positive("min-freq", static_cast<double>(min_freq));
  positive("max-len", static_cast<double>(max_len));
  if (d_model % heads != 0)
    throw std::invalid_argument("--d-model " + std::to_string(d_model) + " is not divisible by --heads " + std::to_string(heads));
  if (d_model % 2 != 0) throw std::invalid_argument("--d-model must be even for sinusoidal positions, got " + std::to_string(d_model));
  if (dropout < 0 || dropout >= 1) throw std::invalid_argument("--dropout must be in [0, 1), got " + std::to_string(dropout));
  if (label_smoothing < 0 || label_smoothing >= 1)
    throw std::invalid_argument("--label-smoothing must be in [0, 1), got " + std::to_string(label_smoothing));
  if (warmup < 1) throw std::invalid_argument("--warmup must be at least 1, got " + std::to_string(warmup));
  if (epochs < 0 || steps < 0 || minutes < 0) throw std::invalid_argument("--epochs, --steps and --minutes cannot be negative");
  if (activation != "relu" && activation != "gelu") throw std::invalid_argument("--activation must be relu or gelu, got '" + activation + "'");
  if (max_len + 2 > 512) throw std::invalid_argument("--max-len must be at most 510 (the positional table holds 512), got " + std::to_string(max_len));
}

}  // namespace gf::train

#include "app/recipe_flags.h"

#include <fmt/core.h>

#include "nn/activation.h"
#include "nn/norm.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "train/data/line_reader.h"

namespace gf::app {

namespace {

// The flags the built-in recipe sets, each with its field of a RunConfig (field(c) is that
// member): the one list apply_builtin_defaults and note_builtin_defaults read. --minutes is
// apart: it stands for the budget, which --epochs and --steps set as well.
template <class Visit>
void for_each_builtin_flag(Visit&& visit) {
  visit("src", [](auto& c) -> auto& { return c.src; });
  visit("tgt", [](auto& c) -> auto& { return c.tgt; });
  visit("min-freq", [](auto& c) -> auto& { return c.min_freq; });
  visit("d-model", [](auto& c) -> auto& { return c.layer.d_model; });
  visit("heads", [](auto& c) -> auto& { return c.layer.nhead; });
  visit("layers", [](auto& c) -> auto& { return c.layers; });
  visit("ff", [](auto& c) -> auto& { return c.layer.dim_feedforward; });
  visit("lr", [](auto& c) -> auto& { return c.lr; });
  visit("warmup", [](auto& c) -> auto& { return c.warmup; });
  visit("schedule", [](auto& c) -> auto& { return c.schedule; });
  visit("patience", [](auto& c) -> auto& { return c.patience; });
}

}  // namespace

const BuiltinRecipe& builtin_recipe() {
  static const BuiltinRecipe r = [] {
    BuiltinRecipe b;
    train::RunConfig& c = b.config;
    c.src = "en";
    c.tgt = "ko";
    c.min_freq = 1;
    c.layer.d_model = 128;
    c.layer.nhead = 4;
    c.layers = 2;
    c.layer.dim_feedforward = 512;
    c.lr = 2e-3;
    c.warmup = 400;
    // The corpus is learnt by about epoch 7 (50 s in bf16 on a Zen 4); patience ends the run
    // there, and wsd's decay still ends a slower machine's run (float32) at its budget.
    c.minutes = 2;     // when no budget flag is given
    c.schedule = "wsd";
    c.patience = 3;
    b.grad_stats = 10;  // about 0.3% of its training time (docs/grad-stats.md)
    return b;
  }();
  return r;
}

const std::vector<std::string>& model_flag_names() {
  static const std::vector<std::string> names = {"arch", "d-model", "heads", "kv-heads", "layers", "ff", "dropout", "activation", "norm", "norm-first", "tie"};
  return names;
}

void add_precision_flag(Flags& f, const std::string& more) {
  f.add_string("precision", "auto",
               "matrix products in fp32, or bf16: bfloat16 operands with float32 sums, float32 weights, optimizer, norms, softmax and "
               "loss; fast with AVX512-BF16, on a portable slower path elsewhere (`gradflow info` says which); auto: bf16 where "
               "its products were measured faster than float32 (AMX, or AMD's AVX512-BF16), else fp32; printed at start "
               "(docs/precision.md)" + more);
}

void check_precision_flag(const Flags& f) { check_precision_value(f.str("precision"), f.command()); }

void add_kv_cache_flag(Flags& f) {
  f.add_string("kv-cache", "auto",
               "decoding's KV cache: fp32; bf16: keys and values stored in bfloat16, half the bytes per token, rounded once as they are "
               "stored (the attention's sums stay float32); auto: bf16 when the products run in bf16, else fp32 (docs/precision.md)");
}

std::optional<DType> kv_cache_dtype(const Flags& f) {
  const std::string v = f.str("kv-cache");
  GF_CHECK_AS(UsageError, v == "auto" || v == "fp32" || v == "bf16", "{}: --kv-cache must be auto, fp32 or bf16, got '{}'", f.command(), v);
  if (v == "bf16") return DType::BFloat16;
  if (v == "fp32") return DType::Float32;
  return std::nullopt;
}

ResolvedPrecision apply_precision(const std::string& value, const std::string& command, std::FILE* line_to) {
  const ResolvedPrecision r = resolve_precision(value, command);
  kernels::set_precision(r.precision);
  if (line_to) fmt::print(line_to, "{}\n", precision_line(r));
  // Not silent: the same numbers, but a bf16 run on the portable path is slower than fp32.
  if (r.precision == Precision::BFloat16 && kernels::bf16_path() == kernels::Bf16Path::Portable) {
    const std::string why = kernels::bf16_native_unavailable_reason();
    fmt::print(stderr, "{}: --precision bf16 runs on the portable path ({}): the same rounding, slower than fp32\n", command,
               why.empty() ? "GRADFLOW_BF16=portable" : why);
  }
  return r;
}

void add_max_line_bytes_flag(Flags& f) {
  f.add_int("max-line-bytes", static_cast<long long>(train::kMaxLineBytes),
            "refuse an input line longer than this many bytes, naming its file and line (a file without line breaks is "
            "refused after this much, not read whole)");
}

size_t max_line_bytes(const Flags& f) {
  const long long n = f.integer("max-line-bytes");
  GF_CHECK_AS(UsageError, n >= 1, "{}: --max-line-bytes must be at least 1, got {}", f.command(), n);
  return static_cast<size_t>(n);
}

void apply_builtin_defaults(const Flags& f, train::RunConfig& c) {
  const train::RunConfig& b = builtin_recipe().config;
  for_each_builtin_flag([&](const char* flag, auto field) {
    if (!f.given(flag)) field(c) = field(b);
  });
  if (!f.given("epochs") && !f.given("steps") && !f.given("minutes")) c.minutes = b.minutes;
}

void note_builtin_defaults(Flags& f) {
  const train::RunConfig& b = builtin_recipe().config;
  for_each_builtin_flag([&](const char* flag, auto field) { f.append_help(flag, fmt::format(" (built-in: {})", field(b))); });
}

void add_recipe_flags(Flags& f, const train::RunConfig& d) {
  const nn::TransformerLayerOptions& l = d.layer;
  f.add_string("src", d.src, "source language suffix");
  f.add_string("tgt", d.tgt, "target language suffix");
  f.add_int("min-freq", d.min_freq, "vocabulary: keep training tokens seen at least this often");
  f.add_int("max-tokens", d.max_tokens, "padded source+target tokens per batch");
  // The model: every flag here is a field of nn::TransformerLayerOptions or of the model options.
  f.add_string("arch", d.arch, "encoder-decoder, or decoder-only (one sequence: source <sep> target, loss on the target)");
  f.add_int("d-model", l.d_model, "model width");
  f.add_int("heads", l.nhead, "attention heads");
  f.add_int("kv-heads", l.kv_heads, "key/value heads: 0 = --heads (multi-head), 1 = multi-query, a divisor of --heads = grouped-query");
  f.add_int("layers", d.layers, "encoder and decoder layers each");
  f.add_int("ff", l.dim_feedforward, "feed-forward width");
  f.add_double("dropout", l.dropout, "dropout");
  f.add_string("activation", l.activation, "feed-forward activation: " + nn::activation_names());
  f.add_string("norm", l.norm, "normalisation layer: " + nn::norm_names());
  f.add_bool("norm-first", "pre-norm layers (default post-norm, as the 2017 paper)");
  f.add_bool("tie", "tie the output projection to the target embedding");
  f.add_double("lr", d.lr, "peak learning rate");
  f.add_int("warmup", d.warmup, "steps of linear warm-up to the peak --lr");
  f.add_double("label-smoothing", d.label_smoothing, "label smoothing");
  add_precision_flag(f);
}

void read_recipe_flags(const Flags& f, train::RunConfig& c) {
  c.src = f.str("src");
  c.tgt = f.str("tgt");
  c.min_freq = f.integer("min-freq");
  c.max_tokens = f.integer("max-tokens");
  c.arch = f.str("arch");
  nn::TransformerLayerOptions& l = c.layer;
  l.d_model = f.integer("d-model");
  l.nhead = f.integer("heads");
  l.kv_heads = f.integer("kv-heads");
  c.layers = f.integer("layers");
  l.dim_feedforward = f.integer("ff");
  l.dropout = f.real("dropout");
  l.activation = f.str("activation");
  l.norm = f.str("norm");
  l.norm_first = f.on("norm-first");
  c.tie = f.on("tie");
  c.lr = f.real("lr");
  c.warmup = f.integer("warmup");
  c.label_smoothing = f.real("label-smoothing");
  c.precision = f.str("precision");
}

}  // namespace gf::app

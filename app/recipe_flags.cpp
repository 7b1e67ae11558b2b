#include "app/recipe_flags.h"

namespace gf::app {

void add_recipe_flags(Flags& f, const train::RunConfig& d, bool builtin_notes) {
  auto note = [&](const char* text) { return builtin_notes ? std::string(" (built-in: ") + text + ")" : std::string(); };
  f.add_string("src", d.src, "source language suffix" + note("en"));
  f.add_string("tgt", d.tgt, "target language suffix" + note("ko"));
  f.add_int("min-freq", d.min_freq, "vocabulary: keep training tokens seen at least this often" + note("1"));
  f.add_int("max-tokens", d.max_tokens, "padded source+target tokens per batch");
  f.add_int("d-model", d.d_model, "model width" + note("128"));
  f.add_int("heads", d.heads, "attention heads");
  f.add_int("layers", d.layers, "encoder and decoder layers each" + note("2"));
  f.add_int("ff", d.ff, "feed-forward width" + note("512"));
  f.add_double("dropout", d.dropout, "dropout");
  f.add_double("lr", d.lr, "peak learning rate" + note("0.002"));
  f.add_int("warmup", d.warmup, "warmup steps before inverse square root decay" + note("400"));
  f.add_double("label-smoothing", d.label_smoothing, "label smoothing");
}

void read_recipe_flags(const Flags& f, train::RunConfig& c) {
  c.src = f.str("src");
  c.tgt = f.str("tgt");
  c.min_freq = f.integer("min-freq");
  c.max_tokens = f.integer("max-tokens");
  c.d_model = f.integer("d-model");
  c.heads = f.integer("heads");
  c.layers = f.integer("layers");
  c.ff = f.integer("ff");
  c.dropout = f.real("dropout");
  c.lr = f.real("lr");
  c.warmup = f.integer("warmup");
  c.label_smoothing = f.real("label-smoothing");
}

}  // namespace gf::app

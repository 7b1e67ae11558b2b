#pragma once
// The data, model and recipe flags that `train` and `bench` share, named as the PyTorch reference
// script names them (--d-model --heads --layers --ff --dropout --label-smoothing --lr --warmup
// --max-tokens ...).
#include <cstdio>
#include <optional>

#include "app/flags.h"
#include "app/precision_choice.h"
#include "train/run/run_config.h"

namespace gf::app {

// The built-in corpus's recipe (`train` without --data): small and regular data, so a smaller,
// faster model learns it in minutes. RunConfig's defaults with the values set in
// builtin_recipe(), the one place they are written: `train` gives each of them to a flag the user
// did not give, and its help prints them.
struct BuiltinRecipe {
  train::RunConfig config;
  int64_t grad_stats = 0;  // --grad-stats
};
const BuiltinRecipe& builtin_recipe();

// Declares the flags with d's values as defaults.
void add_recipe_flags(Flags& f, const train::RunConfig& d);
// The built-in recipe's values, one list of (flag, field) for both: apply_builtin_defaults gives
// each to its field where the flag was not given (--minutes where no budget flag was);
// note_builtin_defaults adds "(built-in: VALUE)" to each flag's help, once all are declared.
void apply_builtin_defaults(const Flags& f, train::RunConfig& c);
void note_builtin_defaults(Flags& f);
// Copies the flags' values into c.
void read_recipe_flags(const Flags& f, train::RunConfig& c);
// --precision auto|fp32|bf16, default auto (add_recipe_flags declares it; translate and eval
// through add_precision_flag). check_precision_flag: UsageError for another value, before anything
// runs. apply_precision resolves it (precision_choice.h), sets it process-wide and prints its line
// to line_to (none: nullptr); std::runtime_error where the CPU cannot run an explicit bf16.
void add_precision_flag(Flags& f, const std::string& more = "");
void check_precision_flag(const Flags& f);
ResolvedPrecision apply_precision(const std::string& value, const std::string& command, std::FILE* line_to);
// --kv-cache auto|fp32|bf16 (translate, eval, bench decode): the decoding KV cache's dtype.
// kv_cache_dtype: UsageError for another value; unset for auto (train::DecodeOptions::kv_cache).
void add_kv_cache_flag(Flags& f);
std::optional<DType> kv_cache_dtype(const Flags& f);
// --max-line-bytes N (translate, eval, train, bleu): the longest input line accepted, default
// train::kMaxLineBytes; max_line_bytes() reads it, UsageError below 1.
void add_max_line_bytes_flag(Flags& f);
size_t max_line_bytes(const Flags& f);
// The flags that define the model (a resumed run cannot change them).
const std::vector<std::string>& model_flag_names();

}  // namespace gf::app

#pragma once
// `gradflow train`'s command line, parsed and checked without running anything (cmd_train.cpp runs
// it; fuzz/ feeds it arbitrary argument lists).
#include "app/flags.h"
#include "train/run/run_config.h"
#include "train/loop/trainer.h"

namespace gf::app {

// train's flags, declared with their defaults (shown by --help).
Flags train_flags();
// The run options the parsed flags give (--out or --resume, --samples, --quiet, --grad-stats);
// UsageError for a bad value.
train::TrainOptions train_options(const Flags& f);
// The run config: a new run's from the flags (the built-in corpus's own defaults when there is no
// --data), or, with `resumed` (the run folder's config.json), that config with the budget flags
// given again (UsageError for a flag the run folder fixes). Validated: UsageError naming the first
// bad setting.
train::RunConfig train_config(const Flags& f, const train::RunConfig* resumed = nullptr);
// The built-in recipe's run options (no --data): gradient statistics every 10 steps unless
// --grad-stats is given (0 turns them off).
void apply_builtin_options(const Flags& f, const train::RunConfig& c, train::TrainOptions& opt);

}  // namespace gf::app

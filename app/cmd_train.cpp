// gradflow train: trains the translator (built-in corpus by default, or --data).
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "app/recipe_flags.h"
#include "app/run_report.h"
#include "app/train_args.h"
#include "korean/builtin_corpus.h"
#include "tensor/check.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"
#include "train/distributed/comm.h"
#include "train/run/checkpoint.h"
#include "train/run/memory_estimate.h"
#include "train/loop/run_lock.h"
#include "train/loop/trainer.h"
#include "train/eval/translator.h"

namespace gf::app {

Flags train_flags() {
  train::RunConfig d;  // defaults shown in --help
  Flags f("train",
          fmt::format("Trains the Transformer translator. Without --data it uses the built-in English->Korean corpus (a smaller model,\n"
          "at most {} minutes, --schedule {}, ending after {} epochs without a better validation loss); with --data DIR it reads DIR/{{train,val,test*}}.{{SRC,TGT}} (one sentence a line), or a TSV file of\n"
          "source<TAB>target lines. Text is split on whitespace (pre-tokenised data), or with --subwords N into SentencePiece\n"
          "pieces learnt from the training split (raw text). Checkpoints go to --out each epoch; --resume DIR continues a run.",
          builtin_recipe().config.minutes, builtin_recipe().config.schedule, builtin_recipe().config.patience));
  f.add_string("data", "", "a folder of parallel text, or a .tsv file (default: the built-in corpus)");
  add_recipe_flags(f, d);
  f.add_int("subwords", 0, "SentencePiece subwords: learn a model of this many pieces from the training split (0: whitespace tokens, for pre-tokenised text)");
  f.add_string("subword-type", d.subword_type, "subword model: unigram or bpe");
  f.add_bool("joint-vocab", "one subword model and vocabulary for source and target (needed by --arch decoder-only)");
  f.add_int("average-last", 0, "keep the last K epochs' weights (epoch-NNNN.safetensors) and write their mean as average.safetensors at the end (0: off)");
  f.add_string("train-split", d.train_split, "training split name");
  f.add_string("valid-split", "", "validation split (default: val or valid; with a .tsv: a TSV file)");
  f.add_string("test-split", "", "test split (default: test or the first test* split; with a .tsv: a TSV file)");
  f.add_int("max-len", d.max_len, "skip training pairs longer than this many tokens");
  add_max_line_bytes_flag(f);
  f.add_double("clip", d.clip, "clip the gradient norm to this (0: off)");
  f.add_string("schedule", d.schedule,
               "learning-rate schedule after the warm-up: inverse-sqrt (decay as 1/sqrt(step)), wsd (warm-up, stable, decay: the "
               "peak --lr until the last --decay-fraction of the budget, then a decay to 0 by its end; measured in time with "
               "--minutes, else in steps or epochs), or constant (the peak --lr to the end)");
  f.add_double("decay-fraction", d.decay_fraction, "--schedule wsd: the last share of the budget over which the rate decays to 0");
  f.add_int("patience", d.patience,
            "end the run after this many validation evaluations (epochs) in a row without a better validation loss (0: off)");
  f.add_int("epochs", 0, "stop after this many epochs");
  f.add_int("steps", 0, "stop after this many steps");
  f.add_double("minutes", 0, fmt::format("stop after this much time (built-in default: {})", builtin_recipe().config.minutes));
  f.add_int("seed", 1, "random seed (data order, initial weights, dropout)");
  f.add_int("log-every", d.log_every, "steps between progress lines when output is not a terminal");
  f.add_string("out", "runs/latest", "run folder for checkpoints, vocabularies, config and loss.svg: new or empty (a folder of other files is refused, nothing in it changed)");
  f.add_string("resume", "", "continue the run in this folder (budget flags, --schedule, --decay-fraction, --patience and --precision may "
               "be given again)");
  f.add_int("threads", 0, "threads (default: the hardware's)");
  f.add_int("samples", 5, "sample translations printed at the end");
  f.add_bool("quiet", "no progress bar or lines");
  f.add_bool("skip-nonfinite",
             "skip a step whose loss or gradient is NaN or Inf (warning with the op anomaly mode names) instead of stopping; "
             "10 such batches in a row still stop the run");
  f.add_string("max-memory", "", "refuse a model whose estimated weights, Adam state and activations exceed this (e.g. 8G; default: the memory "
               "the machine has available)");
  f.add_int("grad-stats", 0,
            "record gradient/parameter norms, update ratios and attention entropy per module at step 1 and every N steps into "
            "OUT/grad_stats.jsonl and .svg (0: off; built-in: " + std::to_string(builtin_recipe().grad_stats) + "; about 6 ms per recorded step "
            "on the built-in model, about 0.3% of training time at N 10: docs/grad-stats.md)");
  f.add_bool("report", "at the end, write OUT/report.html: settings, curves, gradient statistics, attention explorer (gradflow report; docs/report.md)");
  note_builtin_defaults(f);
  return f;
}

train::TrainOptions train_options(const Flags& f) {
  train::TrainOptions opt;
  opt.builtin_corpus = train::korean_run_data;  // a run without --data
  opt.samples = f.integer("samples");
  opt.quiet = f.on("quiet");
  opt.skip_nonfinite = f.on("skip-nonfinite");
  opt.max_line_bytes = max_line_bytes(f);
  opt.handle_signals = true;  // Ctrl-C / SIGTERM: checkpoint, then exit 128 + signal (main.cpp)
  GF_CHECK_AS(UsageError, f.integer("grad-stats") >= 0, "train: --grad-stats must be 0 (off) or a positive step interval, got {}",
              f.integer("grad-stats"));
  opt.grad_stats = f.integer("grad-stats");
  if (f.given("max-memory")) {
    try {
      opt.max_memory = train::parse_memory_size(f.str("max-memory"));
    } catch (const std::invalid_argument& e) {
      GF_FAIL_AS(UsageError, "train: --max-memory: {}", e.what());
    }
  }
  opt.resume = !f.str("resume").empty();
  opt.out = opt.resume ? f.str("resume") : f.str("out");
  return opt;
}

train::RunConfig train_config(const Flags& f, const train::RunConfig* resumed) {
  train::RunConfig c;
  if (resumed) {
    c = *resumed;
    std::vector<std::string> fixed = model_flag_names();
    fixed.insert(fixed.end(), {"data", "src", "tgt", "min-freq", "subwords", "subword-type", "joint-vocab"});
    for (const std::string& flag : fixed)
      GF_CHECK_AS(UsageError, !f.given(flag), "train: --{} cannot change when resuming (the run folder fixes it)", flag);
    if (f.given("precision")) c.precision = f.str("precision");
    if (f.given("schedule")) c.schedule = f.str("schedule");
    if (f.given("decay-fraction")) c.decay_fraction = f.real("decay-fraction");
    if (f.given("patience")) c.patience = f.integer("patience");
    if (f.given("epochs") || f.given("steps") || f.given("minutes")) {
      c.epochs = f.integer("epochs");
      c.steps = f.integer("steps");
      c.minutes = f.real("minutes");
    }
  } else {
    c.data = f.str("data");
    read_recipe_flags(f, c);
    c.max_tokens *= train::distributed::world().size;  // --max-tokens is one process's share; the config keeps the global batch's limit
    c.subwords = f.integer("subwords");
    c.subword_type = f.str("subword-type");
    c.joint_vocab = f.on("joint-vocab");
    c.average_last = f.integer("average-last");
    c.train_split = f.str("train-split");
    c.valid_split = f.str("valid-split");
    c.test_split = f.str("test-split");
    c.max_len = f.integer("max-len");
    c.clip = f.real("clip");
    c.schedule = f.str("schedule");
    c.decay_fraction = f.real("decay-fraction");
    c.patience = f.integer("patience");
    c.epochs = f.integer("epochs");
    c.steps = f.integer("steps");
    c.minutes = f.real("minutes");
    c.seed = static_cast<uint64_t>(f.integer("seed"));
    c.log_every = f.integer("log-every");
    if (c.builtin()) apply_builtin_defaults(f, c);
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    GF_FAIL_AS(UsageError, "train: {}", e.what());
  }
  return c;
}

void apply_builtin_options(const Flags& f, const train::RunConfig& c, train::TrainOptions& opt) {
  if (c.builtin() && !f.given("grad-stats")) opt.grad_stats = builtin_recipe().grad_stats;
}

void check_train_flags(const Flags& f) {
  (void)train_options(f);
  const train::RunConfig resumed;  // stands for the run folder's config.json, read only when running
  (void)(f.str("resume").empty() ? train_config(f) : train_config(f, &resumed));
}

namespace {

// --out must be new, empty, or a gradflow run's folder: a run replaces config.json and the
// vocabularies and deletes old checkpoint files, which in anyone else's folder are not its own.
// (The lock file a run leaves does not count; state.json is checked after the lock, below.)
void check_out_folder(const std::string& out) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(out) || train::holds_run(out)) return;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename() != train::RunFolderLock::kFileName) found.push_back(e.path().filename().string());
  if (found.empty()) return;
  std::sort(found.begin(), found.end());
  const size_t shown = std::min<size_t>(found.size(), 3);
  std::string names;
  for (size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + found[i];
  if (found.size() > shown) names += fmt::format(" and {} more", found.size() - shown);
  GF_FAIL_AS(UsageError,
             "train: --out '{}' is not empty and holds no gradflow run (it has {}; no config.json written by gradflow train): name a new "
             "or empty folder; nothing in it was changed",
             out, names);
}

}  // namespace

int cmd_train(int argc, char** argv) {
  Flags f = train_flags();
  if (!f.parse(argc, argv)) return 0;
  namespace dist = train::distributed;
  dist::start();  // under mpirun or srun: one of several processes (docs/distributed.md)
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  else if (dist::running() && !num_threads_set()) set_num_threads(dist::default_threads());  // processes on one machine share its cores
  train::TrainOptions opt = train_options(f);
  train::RunConfig c;
  std::shared_ptr<train::RunFolderLock> lock;  // rank 0 holds the folder from here to the end (the trainer shares it)
  if (opt.resume) {
    GF_CHECK_AS(UsageError, std::filesystem::is_directory(opt.out), "train: --resume '{}' is not a run folder", opt.out);
    if (dist::is_root()) lock = train::RunFolderLock::take(opt.out, "--resume");
    const std::string config_file = train::run_file(opt.out, "config.json");
    const train::RunConfig resumed = train::RunConfig::read(config_file);
    c = train_config(f, &resumed);
  } else {
    GF_CHECK_AS(UsageError, !std::filesystem::exists(opt.out) || std::filesystem::is_directory(opt.out),
                "train: --out '{}' is a file, not a folder; name a new or existing folder", opt.out);
    c = train_config(f);
    if (dist::is_root()) check_out_folder(opt.out);  // (the other ranks would see rank 0's first files)
    if (dist::is_root()) lock = train::RunFolderLock::take(opt.out, "--out");  // a run in progress is named before "already holds a run"
    GF_CHECK_AS(UsageError, !std::filesystem::exists(train::run_file(opt.out, "state.json")),
                "train: '{}' already holds a run; use --resume {} to continue it or another --out", opt.out, opt.out);
  }
  apply_builtin_options(f, c, opt);
  const ResolvedPrecision precision = apply_precision(c.precision, "train", nullptr);
  if (dist::several()) {
    if (dist::is_root())
      fmt::print("gradflow train: {} processes ({}), {} thread{} each, {} processes on this machine\n", dist::world().size,
                 dist::mpi_library(), max_threads(), max_threads() == 1 ? "" : "s", dist::world().local_size);
  } else {
    fmt::print("gradflow train: {} threads\n", max_threads());
  }
  if (dist::is_root()) fmt::print("{}\n", precision_line(precision));
  train::train_translator(c, opt);
  if (f.on("report") && dist::is_root()) {
    const std::string page = train::run_file(opt.out, "report.html");
    const nlohmann::json outside = write_run_report(opt.out, page, RunReportOptions{});
    fmt::print("{}report: {}\n", outside_files_text(outside), page);
  }
  return 0;
}

}  // namespace gf::app

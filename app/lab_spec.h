#pragma once
// An experiment declared in a file, for `gradflow lab run FILE` (docs/labs.md, "Ask your own
// question"): the question and its source, a base recipe as `gradflow train` flags, arms as flag
// overrides, optionally a factor (one flag at two or more levels), seeds, a step budget, data,
// measures from a documented vocabulary, and claims. parse_lab_spec checks all of it before anything
// runs and names the key and the problem in its error.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lab/experiment.h"
#include "lab/real_data.h"
#include "train/run/run_config.h"

namespace gf::app {

// One measure, parsed from its expression ("test_loss", "grad_norm[dec5.ffn]@1",
// "ratio(g_last, g_first)").
struct SpecMeasure {
  enum Kind {
    TrainLoss,       // train_loss[@S]: the training loss of step S (default: the last step)
    ValidLoss,       // valid_loss, test_loss: teacher-forced NLL per token at the end
    TestLoss,
    ValidAccuracy,   // valid_accuracy, test_accuracy: teacher-forced next-token accuracy at the end
    TestAccuracy,
    ExactMatch,      // exact_match: greedy outputs equal to the reference, validation split, at the end
    Bleu,            // bleu: greedy corpus BLEU (13a) on the validation split at the end
    DivergedAt,      // diverged_at: the step whose loss was not finite or diverged (steps + 1 when none)
    HeadEntropyMin,  // head_entropy_min: the least head's entropy / log(visible keys) on the first 64 held-out pairs, at the end
    GradNorm,        // grad_norm[GROUP]@S, param_norm[GROUP]@S, update_ratio[GROUP]@S: grad-stats' (GROUP "all": the model's)
    ParamNorm,
    UpdateRatio,
    Entropy,         // entropy[SITE]@S: the mean over heads of entropy / log(visible keys); entropy[SITE.hK]@S one head
    Ratio,           // ratio(A, B), difference(A, B), log_ratio(A, B): of two measures defined before it
    Difference,
    LogRatio,
  };
  std::string name;  // the key in the file
  std::string expr;  // as written
  Kind kind = TestLoss;
  std::string target;  // GROUP or SITE
  int64_t step = 0;    // @S (0: not given)
  std::string a, b;    // the operands of a ratio or difference
};

struct SpecArm {
  std::string name;
  std::vector<std::string> flags;  // overrides of the recipe
};

struct SpecClaim {
  lab::ClaimSpec spec;
  std::string type;     // "value", "difference", "ratio", "log_ratio", "trend"
  std::string measure;  // a measure's name
  lab::Condition a, b;  // value: a; difference and ratios: a against b
  std::string arm;      // trend: the arm whose factor levels are read
  lab::TrendKind trend = lab::TrendKind::Slope;
};

struct LabSpec {
  std::string file, digest;  // digest: of the file's bytes (xxHash64, hex), kept in the JSON
  std::string name, title, question, source;
  std::vector<std::string> recipe;  // train flags
  std::vector<SpecArm> arms;
  std::string factor_flag;          // "" none
  std::vector<double> levels;       // the factor's levels, increasing
  std::vector<std::string> factor_arms;  // the arms the factor varies (default: every arm)
  int seeds = 3;
  uint64_t first_seed = 1;
  int64_t steps = 0;
  // Data: the built-in corpus of `pairs` pairs (corpus seed 1), a synthetic task (drawn from each
  // run's seed, as the labs do), or a folder (real_data).
  std::string data_kind = "builtin";  // "builtin", "task", "dir"
  int64_t pairs = 2000;
  lab::TaskSettings task;
  lab::RealDataSettings real;
  std::vector<SpecMeasure> measures;
  std::vector<SpecClaim> claims;
  lab::Condition null;  // the placebo's null condition; arm "" none
  int pools = 1;
  // Every flag, after the arm's and the level's overrides: the run's recipe.
  std::vector<std::string> flags_of(const lab::Condition& c) const;
  bool arm_has_factor(const std::string& arm) const;
};

// Reads and checks FILE. Throws UsageError (app/flags.h) naming FILE, the key and the problem: an
// unknown key or flag, an unknown measure or one read before it is defined, a claim without a
// threshold, a factor with one level, a claim naming an arm or level that does not exist.
LabSpec parse_lab_spec(const std::string& file);

// The recipe of one condition as the trainer's config (the flags parsed by `gradflow train`'s own
// table). Throws UsageError naming the flag.
train::RunConfig spec_config(const LabSpec& s, const lab::Condition& c);

}  // namespace gf::app

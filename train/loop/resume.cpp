#include "train/loop/resume.h"

#include <fmt/core.h>

#include <filesystem>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/safetensors.h"
#include "train/eval/translator.h"

namespace gf::train {
namespace fs = std::filesystem;
namespace {

// A checkpoint file the state names, its digest compared with the state's copy.
SafetensorsFile load_named(const std::string& dir, const std::string& file, const std::string& digest) {
  return load_recorded(run_file(dir, file), digest);
}

// Loads the weights and optimizer state a saved state names; returns what failed, or "".
std::string try_load(const std::string& dir, const RunState& st, nn::Module& model, optim::Adam& adam) {
  try {
    model.load_state_dict(load_named(dir, st.model_file, st.model_digest).tensors, true);
    adam.load_state_dict(load_named(dir, st.optim_file, st.optim_digest).tensors);
    GF_CHECK_AS(std::runtime_error, adam.steps() == st.step, "optimizer state is at step {} but the run state says {}", adam.steps(), st.step);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

RunState resume_checkpoint(const std::string& dir, nn::Module& model, optim::Adam& adam) {
  const std::vector<SavedState> saved = saved_states(dir);
  if (saved.empty()) (void)load_state(dir);  // throws its "has no state.json" error
  std::string failures;                      // one line per saved state tried
  for (const SavedState& st : saved) {
    const std::string load_error = st.error.empty() ? try_load(dir, st.state, model, adam) : "";
    if (st.error.empty() && load_error.empty()) {
      if (!failures.empty())
        fmt::print(stderr, "warning: resuming from the previous checkpoint ({}, step {}) because the newer one cannot be loaded:{}\n", st.path,
                   st.state.step, failures);
      return st.state;
    }
    const std::string why = st.error.empty() ? fmt::format("{}: {}", fs::path(st.path).filename().string(), load_error) : st.error;
    failures += (saved.size() > 1 ? "\n  " : " ") + why;
  }
  GF_FAIL_AS(std::runtime_error, "train --resume: no loadable checkpoint in '{}':{}", dir, failures);
}

void check_best_weights(const std::string& dir, RunState& state) {
  const std::string best = run_file(dir, "best.safetensors");
  std::string problem = "is missing";
  if (fs::exists(best)) {
    try {
      (void)load_safetensors(best);
      return;
    } catch (const std::exception& e) {
      problem = fmt::format("cannot be read ({})", e.what());
    }
  }
  fmt::print(stderr, "warning: {} {}; the next validation writes it again\n", best, problem);
  state.best_valid_loss = 1e300;
}

}  // namespace gf::train

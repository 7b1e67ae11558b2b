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

// The bytes a checkpoint file of `model` may hold: its `copies` of every value of the model's state
// (weights: 1, Adam's two moments: 2) as float64, twice over, and the largest header. A larger file
// (one made huge, sparse on disk) is refused before its tensors are allocated.
uint64_t file_bound(const nn::Module& model, int copies) {
  double values = 0;
  for (const auto& [name, t] : model.state_dict()) values += static_cast<double>(t.numel());
  return 8 + kSafetensorsMaxHeader + static_cast<uint64_t>(2 * 8 * copies * values);
}

// A checkpoint file the state names, within its bound, its digest compared with the state's copy.
SafetensorsFile load_named(const std::string& dir, const std::string& file, const std::string& digest, uint64_t bound) {
  const std::string path = run_file(dir, file);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  GF_CHECK_AS(std::runtime_error, ec || size <= bound, "safetensors: '{}': {} bytes, more than a checkpoint of this model can hold ({})", path,
              size, bound);
  return load_recorded(path, digest);
}

// Loads the weights and optimizer state a saved state names; returns what failed, or "".
std::string try_load(const std::string& dir, const RunState& st, nn::Module& model, optim::Adam& adam) {
  try {
    model.load_state_dict(load_named(dir, st.model_file, st.model_digest, file_bound(model, 1)).tensors, true);
    adam.load_state_dict(load_named(dir, st.optim_file, st.optim_digest, file_bound(model, 2)).tensors);
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

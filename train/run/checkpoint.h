#pragma once
// A training run's folder (--out DIR):
//   config.json                 model and recipe (written once, at the start)
//   vocab.src.txt, vocab.tgt.txt
//   model-NNNNNNN.safetensors   the latest weights (PyTorch names); NNNNNNN = global step
//   optim-NNNNNNN.safetensors   Adam state for the same step
//   best.safetensors            the weights with the lowest validation loss so far
//   state.json                  which files are current + progress; written last
//   state.prev.json             the last checkpoint known to load (its model-/optim- files are kept too)
// Every file is written atomically (temp file, fsync, rename). state.json is replaced only after
// the files it names are complete, so a run killed at any moment leaves the previous state.json
// pointing at a complete, loadable checkpoint. Checkpoint files neither state names are deleted
// afterwards, only gradflow's own (own_weights_file): a file of another program is never deleted.
// If the current checkpoint's files are later found damaged, --resume falls back to the previous.
// The rule that keeps that fallback: a save never removes the last checkpoint that loaded. So the
// state rotated into state.prev.json is the one the caller knows good (resumed from, or saved by
// this process), never an unread or unparsable state.json.
#include <map>
#include <string>
#include <vector>

#include "tensor/io/safetensors.h"
#include "tensor/tensor.h"

namespace gf::train {

struct CurvePoint {
  double step, loss;
};

struct RunState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch in progress (1-based once started)
  int64_t batch_in_epoch = 0;  // batches of that epoch already done
  double train_seconds = 0;
  double best_valid_loss = 1e300;
  std::string model_file, optim_file;  // relative to the folder
  // Each file's digest as written (tensor/io/safetensors.h); "" in states from before digests.
  // The file checks itself against its own copy on every load; this copy also catches a file whose
  // own digest was damaged or removed.
  std::string model_digest, optim_digest;
  std::vector<CurvePoint> train_curve, valid_curve;
  std::vector<CurvePoint> lr_curve;  // (step, learning rate) beside each train_curve point; absent from older state.json
  int64_t skipped_long = 0;
  int64_t skipped_nonfinite = 0;  // steps skipped by --skip-nonfinite
};

std::string state_to_json(const RunState& s);
// Parses state.json's text; `where` names the file in errors. Throws std::runtime_error
// "<where>: malformed run state: ..." naming the field for bad JSON, a missing field, a wrong type,
// a negative count, a non-finite number or a checkpoint file name that is not a plain file name.
RunState state_from_json(const std::string& text, const std::string& where);

// Writes weights and optimizer state for s.step, then state.prev.json naming `last_good` (the last
// checkpoint known to load: the one resumed from, or this process's previous save), then
// state.json naming the new files, then removes the checkpoint files neither names: those named
// exactly model-NNNNNNN.safetensors or optim-NNNNNNN.safetensors that are its own (own_weights_file).
// With no `last_good` (a new run) an existing state.json is rotated only when it parses; a
// malformed one is left out.
void save_checkpoint(const std::string& dir, RunState& s, const std::map<std::string, Tensor>& weights,
                     const std::map<std::string, Tensor>& optimizer, const std::map<std::string, std::string>& metadata,
                     const RunState* last_good = nullptr);
// Reads state.json; throws naming the file when absent or malformed.
RunState load_state(const std::string& dir);

// Whether `dir` holds a gradflow run: a config.json of gradflow's format ("format":
// "gradflow-run-N"), the first file every run writes. train --out refuses a folder that is not
// empty and holds no run: its files are not gradflow's to replace or delete.
bool holds_run(const std::string& dir);
// Whether a file of a run folder is gradflow's own, which a save may delete: a regular file (not a
// link) whose safetensors header carries gradflow's format metadata (kGradflowFormat). Callers
// match the name to their exact pattern first (model-NNNNNNN.safetensors, ...). A file that does
// not read as one (another program's, a damaged one) is never deleted.
bool own_weights_file(const std::string& path);

// Loads a weights or optimizer file that a saved state names (the file checks its own digest) and
// compares its digest with the state's copy (`recorded`; "" in states from before digests): a file
// whose own digest was damaged or stripped, or another checkpoint put in its place, is refused,
// "safetensors: '<path>': its digest is missing but the run state recorded xxh3-64:...".
SafetensorsFile load_recorded(const std::string& path, const std::string& recorded);
// The digest state.json (or else state.prev.json) in `dir` records for its file `name` (its
// model_file or optim_file), "" when neither state names it or records one. A state that does not
// parse is passed over.
std::string recorded_digest(const std::string& dir, const std::string& name);

// state.json and state.prev.json, newest first, as far as they exist; a malformed one has its
// error instead of a state. For resuming from the newest checkpoint that loads.
struct SavedState {
  std::string path;
  RunState state;
  std::string error;  // empty when `state` was read
};
std::vector<SavedState> saved_states(const std::string& dir);

// Size bounds of the files read from a run folder (tensor/io/plain_file.h), far above what a run
// writes: a folder someone else made is outside input.
constexpr uint64_t kMaxStateBytes = uint64_t{64} << 20;     // state.json: its curves hold a point per 20 steps
constexpr uint64_t kMaxTextFileBytes = uint64_t{64} << 20;  // read_text_file's default
// The largest step, epoch or count state.json may hold (1e15): far beyond any run, and small enough
// that no loop or sum over steps overflows an int64 and every step is exact as a double.
constexpr int64_t kMaxStateCount = 1'000'000'000'000'000;

// A regular file's bytes (symbolic links followed), at most max_bytes; std::runtime_error naming
// the file when it is missing, not a regular file (a FIFO, /dev/zero) or larger.
std::string read_text_file(const std::string& path, uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace gf::train

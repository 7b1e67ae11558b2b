#include "train/run/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/plain_file.h"
#include "tensor/io/safetensors.h"
#include "train/run/json_fields.h"
#include "train/run/run_config.h"

namespace gf::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace json_fields;

std::string read_text_file(const std::string& path, uint64_t max_bytes) { return read_regular_file(path, max_bytes, "read_text_file"); }

std::string state_to_json(const RunState& s) {
  json j;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["batch_in_epoch"] = s.batch_in_epoch;
  j["train_seconds"] = s.train_seconds;
  j["best_valid_loss"] = s.best_valid_loss;
  j["model_file"] = s.model_file;
  j["optim_file"] = s.optim_file;
  j["model_digest"] = s.model_digest;
  j["optim_digest"] = s.optim_digest;
  j["skipped_long"] = s.skipped_long;
  j["skipped_nonfinite"] = s.skipped_nonfinite;
  auto curve = [](const std::vector<CurvePoint>& c) {
    json a = json::array();
    for (auto& p : c) a.push_back({p.step, p.loss});
    return a;
  };
  j["train_curve"] = curve(s.train_curve);
  j["valid_curve"] = curve(s.valid_curve);
  j["lr_curve"] = curve(s.lr_curve);
  return j.dump(1) + "\n";
}

RunState state_from_json(const std::string& text, const std::string& where) {
  RunState s;
  try {
    const json j = parse(text, kMaxRunJsonDepth);
    if (!j.is_object()) throw FieldError(fmt::format("the file holds a JSON {}, not an object", j.type_name()));
    read_required(j, "step", s.step);
    read_required(j, "epoch", s.epoch);
    read_required(j, "batch_in_epoch", s.batch_in_epoch);
    read_required(j, "train_seconds", s.train_seconds);
    read_required(j, "best_valid_loss", s.best_valid_loss);
    read_required(j, "model_file", s.model_file);
    read_required(j, "optim_file", s.optim_file);
    read_optional(j, "model_digest", s.model_digest);
    read_optional(j, "optim_digest", s.optim_digest);
    read_optional(j, "skipped_long", s.skipped_long);
    read_optional(j, "skipped_nonfinite", s.skipped_nonfinite);
    for (const auto& [key, v] : {std::pair<const char*, int64_t>{"step", s.step}, {"epoch", s.epoch}, {"batch_in_epoch", s.batch_in_epoch},
                                 {"skipped_long", s.skipped_long}, {"skipped_nonfinite", s.skipped_nonfinite}})
      if (v < 0 || v > kMaxStateCount) bad_field(key, j.at(key), "an integer from 0 to 10^15");
    // The checkpoint files sit in the run folder itself: plain file names, no path.
    for (const auto& [key, name] : {std::pair<const char*, const std::string&>{"model_file", s.model_file}, {"optim_file", s.optim_file}})
      if (name.empty() || name == "." || name == ".." || name.find_first_of(std::string_view("/\0", 2)) != std::string::npos)
        bad_field(key, j.at(key), "a file name in the run folder");
    for (const auto& [key, curve] : {std::pair<const char*, std::vector<CurvePoint>*>{"train_curve", &s.train_curve}, {"valid_curve", &s.valid_curve},
                                     {"lr_curve", &s.lr_curve}}) {
      auto it = j.find(key);
      if (it == j.end() && curve == &s.lr_curve) continue;  // optional: state.json written before it was kept
      if (it == j.end()) throw FieldError(fmt::format("missing field '{}'", key));
      if (!it->is_array()) bad_field(key, *it, "an array of [step, loss] pairs");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& p = (*it)[i];
        const std::string at = fmt::format("{}[{}]", key, i);
        if (!p.is_array() || p.size() != 2) bad_field(at, p, "a [step, loss] pair");
        CurvePoint point;
        read_value(p[0], at + "[0]", point.step);
        read_value(p[1], at + "[1]", point.loss);
        if (point.step < 0 || point.step > static_cast<double>(kMaxStateCount)) bad_field(at + "[0]", p[0], "a step from 0 to 10^15");
        curve->push_back(point);
      }
    }
  } catch (const json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run state: {}", where, e.what());
  } catch (const json_fields::FieldError& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run state: {}", where, e.what());
  }
  return s;
}

void save_checkpoint(const std::string& dir, RunState& s, const std::map<std::string, Tensor>& weights,
                     const std::map<std::string, Tensor>& optimizer, const std::map<std::string, std::string>& metadata,
                     const RunState* last_good) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "%07lld", static_cast<long long>(s.step));
  const std::string model_file = std::string("model-") + tag + ".safetensors";
  const std::string optim_file = std::string("optim-") + tag + ".safetensors";
  const std::string model_digest = save_safetensors((fs::path(dir) / model_file).string(), weights, metadata);
  const std::string optim_digest = save_safetensors((fs::path(dir) / optim_file).string(), optimizer, metadata);
  // The last checkpoint known to load stays resumable as state.prev.json, in case the new one is
  // later damaged on disk (resume falls back to it). It is parsed before anything is overwritten:
  // a malformed state.json (the very case resume falls back from) must not replace a good
  // state.prev.json, nor a state.json whose files failed to load send it to state.prev.json.
  const fs::path state = fs::path(dir) / "state.json", prev = fs::path(dir) / "state.prev.json";
  std::set<std::string> keep{model_file, optim_file};
  std::optional<RunState> rotate;
  if (last_good) {
    rotate = *last_good;
  } else if (fs::exists(state)) {
    try {
      rotate = state_from_json(read_text_file(state.string(), kMaxStateBytes), state.string());
    } catch (const std::runtime_error&) {  // unreadable: not a checkpoint that can be relied on
    }
  }
  if (rotate) {
    write_file_atomic(prev.string(), state_to_json(*rotate));
    keep.insert({rotate->model_file, rotate->optim_file});
  }
  s.model_file = model_file;
  s.optim_file = optim_file;
  s.model_digest = model_digest;
  s.optim_digest = optim_digest;
  write_file_atomic(state.string(), state_to_json(s));
  // Only now are the other checkpoints' files unreferenced (also those of a run killed mid-save).
  // Only its own: the exact name, and gradflow's format in the header.
  static const std::regex checkpoint_name("(model|optim)-[0-9]{7,}\\.safetensors");
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, checkpoint_name) && !keep.count(name) && own_weights_file(e.path().string())) fs::remove(e.path(), ec);
  }
}

bool holds_run(const std::string& dir) {
  try {
    const json j = parse(read_regular_file((fs::path(dir) / "config.json").string(), RunConfig::kMaxConfigBytes, "run config"),
                         kMaxRunJsonDepth);
    const json* format = j.is_object() ? find_member(j, "format") : nullptr;
    return format && format->is_string() && format->get<std::string>().starts_with("gradflow-run-");
  } catch (const std::exception&) {  // missing, not a regular file, too large, not JSON: not a run's
    return false;
  }
}

bool own_weights_file(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  try {
    const std::map<std::string, std::string> meta = read_safetensors_metadata(path);
    const auto f = meta.find("format");
    return f != meta.end() && f->second == kGradflowFormat;
  } catch (const std::exception&) {
    return false;
  }
}

RunState load_state(const std::string& dir) {
  std::string path = (fs::path(dir) / "state.json").string();
  GF_CHECK_AS(std::runtime_error, fs::exists(path), "'{}' has no state.json: not a gradflow training folder (or no epoch finished)", dir);
  return state_from_json(read_text_file(path, kMaxStateBytes), path);
}

SafetensorsFile load_recorded(const std::string& path, const std::string& recorded) {
  SafetensorsFile f = load_safetensors(path);
  GF_CHECK_AS(std::runtime_error, recorded.empty() || f.digest == recorded, "safetensors: '{}': its digest is {} but the run state recorded {}",
              path, f.digest.empty() ? "missing" : f.digest, recorded);
  return f;
}

std::string recorded_digest(const std::string& dir, const std::string& name) {
  for (const SavedState& st : saved_states(dir)) {
    if (!st.error.empty()) continue;
    if (st.state.model_file == name) return st.state.model_digest;
    if (st.state.optim_file == name) return st.state.optim_digest;
  }
  return "";
}

std::vector<SavedState> saved_states(const std::string& dir) {
  std::vector<SavedState> out;
  for (const char* name : {"state.json", "state.prev.json"}) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) continue;
    SavedState st{path, {}, {}};
    try {
      st.state = state_from_json(read_text_file(path, kMaxStateBytes), path);
    } catch (const std::exception& e) {
      st.error = e.what();
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace gf::train

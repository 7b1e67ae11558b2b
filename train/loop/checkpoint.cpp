#include "train/loop/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"

namespace gf::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GF_CHECK_AS(std::runtime_error, in, "read_text_file: cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string state_to_json(const RunState& s) {
  json j;
  j["step"] = s.step;
  j["epoch"] = s.epoch;
  j["batch_in_epoch"] = s.batch_in_epoch;
  j["train_seconds"] = s.train_seconds;
  j["best_valid_loss"] = s.best_valid_loss;
  j["model_file"] = s.model_file;
  j["optim_file"] = s.optim_file;
  j["skipped_long"] = s.skipped_long;
  j["skipped_nonfinite"] = s.skipped_nonfinite;
  auto curve = [](const std::vector<CurvePoint>& c) {
    json a = json::array();
    for (auto& p : c) a.push_back({p.step, p.loss});
    return a;
  };
  j["train_curve"] = curve(s.train_curve);
  j["valid_curve"] = curve(s.valid_curve);
  return j.dump(1) + "\n";
}

RunState state_from_json(const std::string& text, const std::string& where) {
  RunState s;
  try {
    json j = json::parse(text);
    s.step = j.at("step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.batch_in_epoch = j.at("batch_in_epoch").get<int64_t>();
    s.train_seconds = j.at("train_seconds").get<double>();
    s.best_valid_loss = j.at("best_valid_loss").get<double>();
    s.model_file = j.at("model_file").get<std::string>();
    s.optim_file = j.at("optim_file").get<std::string>();
    s.skipped_long = j.value("skipped_long", int64_t{0});
    s.skipped_nonfinite = j.value("skipped_nonfinite", int64_t{0});
    for (auto& p : j.at("train_curve")) s.train_curve.push_back({p.at(0).get<double>(), p.at(1).get<double>()});
    for (auto& p : j.at("valid_curve")) s.valid_curve.push_back({p.at(0).get<double>(), p.at(1).get<double>()});
  } catch (const json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run state: {}", where, e.what());
  }
  return s;
}

void save_checkpoint(const std::string& dir, RunState& s, const std::map<std::string, Tensor>& weights,
                     const std::map<std::string, Tensor>& optimizer, const std::map<std::string, std::string>& metadata) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "%07lld", static_cast<long long>(s.step));
  const std::string model_file = std::string("model-") + tag + ".safetensors";
  const std::string optim_file = std::string("optim-") + tag + ".safetensors";
  save_safetensors((fs::path(dir) / model_file).string(), weights, metadata);
  save_safetensors((fs::path(dir) / optim_file).string(), optimizer, metadata);
  // The checkpoint being replaced stays resumable as state.prev.json, in case the new one is later
  // damaged on disk (resume falls back to it); the one before it is dropped.
  const fs::path state = fs::path(dir) / "state.json", prev = fs::path(dir) / "state.prev.json";
  std::set<std::string> keep{model_file, optim_file};
  if (fs::exists(state)) {
    const std::string old_text = read_text_file(state.string());
    write_file_atomic(prev.string(), old_text);
    const RunState old = state_from_json(old_text, state.string());
    keep.insert({old.model_file, old.optim_file});
  }
  s.model_file = model_file;
  s.optim_file = optim_file;
  write_file_atomic(state.string(), state_to_json(s));
  // Only now are the other checkpoints' files unreferenced (also those of a run killed mid-save).
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool checkpoint_file = (name.starts_with("model-") || name.starts_with("optim-")) && name.ends_with(".safetensors");
    if (checkpoint_file && !keep.count(name)) fs::remove(e.path(), ec);
  }
}

RunState load_state(const std::string& dir) {
  std::string path = (fs::path(dir) / "state.json").string();
  GF_CHECK_AS(std::runtime_error, fs::exists(path), "'{}' has no state.json: not a gradflow training folder (or no epoch finished)", dir);
  return state_from_json(read_text_file(path), path);
}

std::vector<SavedState> saved_states(const std::string& dir) {
  std::vector<SavedState> out;
  for (const char* name : {"state.json", "state.prev.json"}) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) continue;
    SavedState st{path, {}, {}};
    try {
      st.state = state_from_json(read_text_file(path), path);
    } catch (const std::exception& e) {
      st.error = e.what();
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace gf::train

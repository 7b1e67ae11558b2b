#include "train/loop/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "train/loop/json_fields.h"

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
  using namespace json_fields;
  RunState s;
  try {
    const json j = json::parse(text);
    if (!j.is_object()) throw FieldError(fmt::format("the file holds a JSON {}, not an object", j.type_name()));
    read_required(j, "step", s.step);
    read_required(j, "epoch", s.epoch);
    read_required(j, "batch_in_epoch", s.batch_in_epoch);
    read_required(j, "train_seconds", s.train_seconds);
    read_required(j, "best_valid_loss", s.best_valid_loss);
    read_required(j, "model_file", s.model_file);
    read_required(j, "optim_file", s.optim_file);
    read_optional(j, "skipped_long", s.skipped_long);
    for (const auto& [key, v] : {std::pair<const char*, int64_t>{"step", s.step}, {"epoch", s.epoch}, {"batch_in_epoch", s.batch_in_epoch},
                                 {"skipped_long", s.skipped_long}})
      if (v < 0) bad_field(key, j.at(key), "a non-negative integer");
    // The checkpoint files sit in the run folder itself: plain file names, no path.
    for (const auto& [key, name] : {std::pair<const char*, const std::string&>{"model_file", s.model_file}, {"optim_file", s.optim_file}})
      if (name.empty() || name == "." || name == ".." || name.find_first_of(std::string_view("/\0", 2)) != std::string::npos)
        bad_field(key, j.at(key), "a file name in the run folder");
    for (const auto& [key, curve] : {std::pair<const char*, std::vector<CurvePoint>*>{"train_curve", &s.train_curve}, {"valid_curve", &s.valid_curve}}) {
      auto it = j.find(key);
      if (it == j.end()) throw FieldError(fmt::format("missing field '{}'", key));
      if (!it->is_array()) bad_field(key, *it, "an array of [step, loss] pairs");
      for (size_t i = 0; i < it->size(); ++i) {
        const json& p = (*it)[i];
        const std::string at = fmt::format("{}[{}]", key, i);
        if (!p.is_array() || p.size() != 2) bad_field(at, p, "a [step, loss] pair");
        CurvePoint point;
        read_value(p[0], at + "[0]", point.step);
        read_value(p[1], at + "[1]", point.loss);
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
                     const std::map<std::string, Tensor>& optimizer, const std::map<std::string, std::string>& metadata) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "%07lld", static_cast<long long>(s.step));
  const std::string old_model = s.model_file, old_optim = s.optim_file;
  const std::string model_file = std::string("model-") + tag + ".safetensors";
  const std::string optim_file = std::string("optim-") + tag + ".safetensors";
  save_safetensors((fs::path(dir) / model_file).string(), weights, metadata);
  save_safetensors((fs::path(dir) / optim_file).string(), optimizer, metadata);
  s.model_file = model_file;
  s.optim_file = optim_file;
  write_file_atomic((fs::path(dir) / "state.json").string(), state_to_json(s));
  // Only now are the older files unreferenced.
  std::error_code ec;
  for (const auto& f : {old_model, old_optim})
    if (!f.empty() && f != model_file && f != optim_file) fs::remove(fs::path(dir) / f, ec);
}

RunState load_state(const std::string& dir) {
  std::string path = (fs::path(dir) / "state.json").string();
  GF_CHECK_AS(std::runtime_error, fs::exists(path), "'{}' has no state.json: not a gradflow training folder (or no epoch finished)", dir);
  return state_from_json(read_text_file(path), path);
}

}  // namespace gf::train

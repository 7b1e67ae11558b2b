// The run report's data and page (declared in app/run_report.h).
#include "app/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "app/report_attention.h"
#include "app/report_page.h"
#include "optim/adam.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "korean/builtin_corpus.h"
#include "train/run/run_data.h"
#include "train/eval/translator.h"
#include "train/run/checkpoint.h"
#include "train/run/run_config.h"

namespace gf::app {
namespace fs = std::filesystem;
namespace {

double number_or_nan(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }  // grad_stats writes NaN as null

// The indices of `n` items to draw in at most `max` columns: every k-th, and the last.
std::vector<size_t> columns_of(size_t n, size_t max) {
  std::vector<size_t> keep;
  const size_t k = std::max<size_t>(1, (n + max - 1) / std::max<size_t>(1, max));
  for (size_t i = 0; i < n; i += k) keep.push_back(i);
  if (n > 0 && keep.back() != n - 1) keep.push_back(n - 1);
  return keep;
}

// NaN (a statistic grad_stats wrote as null) stays null: a grey cell, a gap in a curve.
nlohmann::json rounded(const std::vector<double>& v) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : v) out.push_back(std::isfinite(x) ? nlohmann::json(round_significant(x)) : nlohmann::json());
  return out;
}

// The learning rate the trainer set at each step (step s, 1-based, is optimizer step s - 1). The
// inverse-sqrt schedule depends on the step alone: enough points to draw the warm-up's corner and
// the decay. wsd's depends on the budget's progress (time, with --minutes): the rates the trainer
// recorded in state.json every 20 steps, after the warm-up's corner.
nlohmann::json lr_schedule(const train::RunConfig& c, const train::RunState& state) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t steps = state.step;
  if (c.schedule != "inverse-sqrt") {
    const optim::LrSchedule sched = c.lr_schedule();
    for (int64_t s : {int64_t{1}, c.warmup})
      if (s <= steps && (state.lr_curve.empty() || s < state.lr_curve.front().step)) out.push_back({s, round_significant(sched.lr(c.lr, s - 1, 0.0))});
    for (const train::CurvePoint& p : state.lr_curve) out.push_back({static_cast<int64_t>(p.step), round_significant(p.loss)});
    return out;
  }
  const int64_t last = std::max<int64_t>(steps, 1);
  std::vector<int64_t> at;
  const int64_t every = std::max<int64_t>(1, last / 400);
  for (int64_t s = 1; s <= last; s += every) at.push_back(s);
  if (c.warmup >= 1 && c.warmup <= last) at.push_back(c.warmup);  // the peak
  at.push_back(last);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  for (int64_t s : at) out.push_back({s, round_significant(optim::warmup_inverse_sqrt(c.lr, s - 1, c.warmup))});
  return out;
}

// How the learning-rate chart was drawn, for the page's note.
std::string lr_note(const train::RunConfig& c) {
  if (c.schedule == "wsd")
    return fmt::format("warm-up-stable-decay: linear warm-up over {} steps, constant, then a 1-sqrt decay to 0 over the last {:g}% of the {}; "
                       "the rates recorded every 20 steps",
                       c.warmup, 100 * c.decay_fraction, c.minutes > 0 ? "time budget" : c.steps > 0 ? "steps" : "epochs");
  return fmt::format("linear warm-up over {} steps, then inverse square root decay", c.warmup);
}

nlohmann::json curve_json(const std::vector<train::CurvePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points) out.push_back({p.step, round_significant(p.loss, 5)});
  return out;
}

// config.json as the page lists it: the file's own fields and nesting.
nlohmann::json config_json(const std::string& run_dir) {
  const std::string path = train::run_file(run_dir, "config.json");
  try {
    return nlohmann::json::parse(train::read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: not JSON: {}", path, e.what());
  }
}

nlohmann::json model_json(const train::Translator& t) {
  const auto& l = t.config.layer;
  return {{"arch", t.config.arch},
          {"layers", t.config.layers},
          {"d_model", l.d_model},
          {"heads", l.nhead},
          {"kv_heads", l.key_value_heads()},
          {"parameters", t.net->module().num_parameters()},
          {"weights", fs::path(t.weights_file).filename().string()},
          {"src_vocab", t.src_vocab.size()},
          {"tgt_vocab", t.tgt_vocab.size()}};
}

// The explorer's sentences: --src, or the first test sentences that are not too long to read.
nlohmann::json attention_json(const train::Translator& t, const RunReportOptions& o) {
  nlohmann::json a = {{"sentences", nlohmann::json::array()}, {"note", nullptr}};
  const int64_t H = t.config.layer.nhead, KV = t.config.layer.key_value_heads();
  nlohmann::json groups = nlohmann::json::array();  // the key/value head of each query head
  for (int64_t h = 0; h < H; ++h) groups.push_back(h / (H / KV));
  a["kv_group"] = groups;
  if (!o.sources.empty()) {
    for (const std::string& s : o.sources) a["sentences"].push_back(sentence_report(t, s, ""));
    a["from"] = "--src";
    return a;
  }
  train::RunData data;
  try {
    data = train::load_run_data(t.config, false, train::kMaxLineBytes, train::korean_run_data);
  } catch (const std::exception& e) {
    a["note"] = fmt::format("the run's test sentences could not be read ({}); give sentences with --src", e.what());
    return a;
  }
  const std::vector<train::TokenPair>& pairs = data.test.empty() ? data.valid : data.test;
  a["from"] = data.test.empty() ? data.valid_name : data.test_name;
  auto join = [](const train::Tokens& tokens) {
    std::string s;
    for (const auto& w : tokens) s += (s.empty() ? "" : " ") + w;
    return s;
  };
  for (const auto& [src, tgt] : pairs) {
    if (static_cast<int64_t>(a["sentences"].size()) >= o.sentences) break;
    const std::string text = join(src);
    if (static_cast<int64_t>(t.segmenters.src.split(text).size()) > o.max_tokens) continue;
    a["sentences"].push_back(sentence_report(t, text, join(tgt)));
  }
  return a;
}

}  // namespace

nlohmann::json grad_stats_data(const std::string& path, size_t max_steps) {
  std::ifstream in(path);
  GF_CHECK_AS(std::runtime_error, in, "report: cannot read '{}'", path);
  std::vector<nlohmann::json> lines;
  std::vector<std::string> text;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) text.push_back(line);
  bool torn = false;
  for (size_t i = 0; i < text.size(); ++i) {
    nlohmann::json j = nlohmann::json::parse(text[i], nullptr, false);
    const bool ok = !j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() && j.contains("groups") &&
                    j["groups"].is_array();
    if (!ok && i + 1 == text.size()) {
      torn = true;  // a run killed while writing its last line
      continue;
    }
    GF_CHECK_AS(std::runtime_error, ok, "report: {} line {}: not a grad-stats record (an object with an integer \"step\" and \"groups\")",
                path, i + 1);
    lines.push_back(std::move(j));
  }
  GF_CHECK_AS(std::runtime_error, !lines.empty(), "report: {} holds no record", path);
  nlohmann::json g;
  g["recorded"] = lines.size();
  g["torn_last_line"] = torn;
  const std::vector<size_t> cols = columns_of(lines.size(), max_steps);
  // Rows: the first line's groups and attention heads (every line of a run has the same).
  std::vector<std::string> groups;
  for (const auto& grp : lines[0]["groups"]) groups.push_back(grp.value("name", ""));
  std::vector<std::pair<std::string, size_t>> heads;  // (attention, head)
  if (lines[0].contains("attention"))
    for (const auto& a : lines[0]["attention"])
      for (size_t h = 0; h < a["entropy"].size(); ++h) heads.emplace_back(a.value("name", ""), h);
  std::vector<double> steps, loss, lr;
  std::map<std::string, std::vector<std::vector<double>>> stat;  // statistic -> [group][column]
  for (const char* key : {"grad_norm", "param_norm", "update_ratio"}) stat[key].assign(groups.size(), {});
  std::vector<std::vector<double>> entropy(heads.size()), uniform(heads.size());
  for (size_t c : cols) {
    const nlohmann::json& j = lines[c];
    steps.push_back(j["step"].get<double>());
    loss.push_back(number_or_nan(j.value("loss", nlohmann::json())));
    lr.push_back(number_or_nan(j.value("lr", nlohmann::json())));
    std::map<std::string, const nlohmann::json*> by_name;
    for (const auto& grp : j["groups"]) by_name[grp.value("name", "")] = &grp;
    for (size_t r = 0; r < groups.size(); ++r)
      for (auto& [key, rows] : stat) {
        auto it = by_name.find(groups[r]);
        rows[r].push_back(it == by_name.end() ? NAN : number_or_nan(it->second->value(key, nlohmann::json())));
      }
    std::map<std::string, const nlohmann::json*> att;
    if (j.contains("attention"))
      for (const auto& a : j["attention"]) att[a.value("name", "")] = &a;
    for (size_t r = 0; r < heads.size(); ++r) {
      auto it = att.find(heads[r].first);
      const bool has = it != att.end() && heads[r].second < (*it->second)["entropy"].size();
      entropy[r].push_back(has ? number_or_nan((*it->second)["entropy"][heads[r].second]) : NAN);
      uniform[r].push_back(has ? number_or_nan(it->second->value("uniform", nlohmann::json())) : NAN);
    }
  }
  g["steps"] = steps;
  g["loss"] = rounded(loss);
  g["lr"] = rounded(lr);
  g["groups"] = groups;
  for (auto& [key, rows] : stat) {
    g[key] = nlohmann::json::array();
    for (const auto& row : rows) g[key].push_back(rounded(row));
  }
  g["heads"] = nlohmann::json::array();
  for (const auto& [name, h] : heads) g["heads"].push_back({{"attention", name}, {"head", h}});
  g["entropy"] = nlohmann::json::array();
  g["uniform"] = nlohmann::json::array();
  for (size_t r = 0; r < heads.size(); ++r) g["entropy"].push_back(rounded(entropy[r])), g["uniform"].push_back(rounded(uniform[r]));
  return g;
}

nlohmann::json run_report_data(const std::string& run_dir, const RunReportOptions& o) {
  GF_CHECK_AS(std::runtime_error, fs::is_directory(run_dir), "report: '{}' is not a run folder", run_dir);
  GF_CHECK_AS(std::runtime_error, fs::exists(train::run_file(run_dir, "config.json")),
              "report: '{}' is neither a training run (it has no config.json) nor a lab's output (no NAME.json from gradflow lab)", run_dir);
  nlohmann::json d;
  d["kind"] = "run";
  d["run"] = run_dir;
  d["config"] = config_json(run_dir);
  const train::RunState state = train::load_state(run_dir);
  d["state"] = {{"step", state.step},
                {"epoch", state.epoch},
                {"train_seconds", round_significant(state.train_seconds)},
                {"best_valid_loss", state.best_valid_loss < 1e299 ? nlohmann::json(round_significant(state.best_valid_loss, 5)) : nlohmann::json()}};
  const train::Translator t = train::Translator::load(run_dir);
  d["model"] = model_json(t);
  d["curves"] = {{"train", curve_json(state.train_curve)},
                 {"train_note", "label-smoothed training loss, means of 20 steps"},
                 {"valid", curve_json(state.valid_curve)},
                 {"valid_note", "validation NLL per target token, after each epoch"},
                 {"lr", lr_schedule(t.config, state)},
                 {"lr_note", lr_note(t.config)}};
  const std::string stats = train::run_file(run_dir, "grad_stats.jsonl");
  d["grad_stats"] = fs::exists(stats) ? grad_stats_data(stats, o.max_steps) : nlohmann::json();
  d["attention"] = attention_json(t, o);
  return d;
}

void write_run_report(const std::string& run_dir, const std::string& out_file, const RunReportOptions& o) {
  const nlohmann::json data = run_report_data(run_dir, o);
  write_file_atomic(out_file, html_page("gradflow run report: " + run_dir, data, PageKind::Run));
}

}  // namespace gf::app

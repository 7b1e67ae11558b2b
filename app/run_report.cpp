// The run report's data and page (declared in app/run_report.h).
#include "app/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

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
#include "train/run/run_subwords.h"
#include "train/run/json_fields.h"
#include "train/loop/grad_stats.h"

namespace gf::app {
namespace fs = std::filesystem;
namespace {

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
// (Read as a regular file within RunConfig::kMaxConfigBytes, nested at most kMaxRunJsonDepth: the page
// writer indents each level.)
nlohmann::json config_json(const std::string& run_dir) {
  const std::string path = train::run_file(run_dir, "config.json");
  try {
    return train::json_fields::parse(train::read_text_file(path, train::RunConfig::kMaxConfigBytes), train::json_fields::kMaxRunJsonDepth);
  } catch (const train::json_fields::FieldError& e) {
    GF_FAIL_AS(std::runtime_error, "{}: malformed run config: {}", path, e.what());
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

// Whether `path` (canonical) lies within `root` (canonical).
bool within(const fs::path& path, const fs::path& root) {
  auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return r == root.end();
}

// Adds `file` to `outside` ({"path", "why"}) when it lies outside the run folder (after symbolic
// links), once.
void note_outside(nlohmann::json& outside, const std::string& run_dir, const std::string& file, const std::string& why) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(file, ec), root = fs::weakly_canonical(run_dir, ec);
  if (!ec && within(real, root)) return;
  for (const auto& o : outside)
    if (o["path"] == real.string()) return;
  outside.push_back({{"path", real.string()}, {"why", why}});
}

// The files of the run folder the report reads, any of them a symbolic link to a place outside it.
void note_links_out(nlohmann::json& outside, const std::string& run_dir, const train::Translator& t) {
  std::vector<std::string> names = {"config.json", "state.json", "vocab.src.txt", "vocab.tgt.txt", "grad_stats.jsonl",
                                    fs::path(t.weights_file).filename().string()};
  if (t.config.subwords > 0)
    for (const std::string& m : train::subword_model_files(t.config)) names.push_back(m);
  for (const std::string& name : names) {
    const std::string file = train::run_file(run_dir, name);
    if (fs::is_symlink(file)) note_outside(outside, run_dir, file, fmt::format("the run folder's {} is a link to it", name));
  }
}

// The explorer's sentences: --src, or the first test sentences that are not too long to read. The
// data files read for them go into `outside`.
nlohmann::json attention_json(const train::Translator& t, const RunReportOptions& o, const std::string& run_dir, nlohmann::json& outside) {
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
  std::vector<std::string> files;
  try {
    data = train::load_run_data(t.config, false, train::kMaxLineBytes, train::korean_run_data, &files);
  } catch (const std::exception& e) {
    a["note"] = fmt::format("the run's test sentences could not be read ({}); give sentences with --src", e.what());
  }
  for (const std::string& f : files) note_outside(outside, run_dir, f, "a data file the run's config.json names, for the explorer's sentences");
  if (!a["note"].is_null()) return a;
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

namespace {

// A source of grad_stats.jsonl's lines that can be walked more than once: calls each(line number,
// text) for every non-empty line.
using StatsLines = std::function<void(const std::function<void(size_t, const std::string&)>&)>;

// The page's grad-stats data from the lines (see grad_stats_data). Two passes: the first counts the
// records, the second checks every line and keeps the numbers of the columns drawn, so that memory
// holds those columns, never the whole file.
nlohmann::json grad_stats_of(const StatsLines& walk, const std::string& name, size_t max_steps) {
  using namespace train::json_fields;
  size_t count = 0;
  std::string last;
  walk([&](size_t, const std::string& line) { ++count, last = line; });
  // A last line that is not JSON at all is a run killed while writing it (no prefix of a JSON
  // object is JSON); one that is JSON but not a record is an error like any other line.
  const bool torn = count > 0 && !nlohmann::json::accept(last);
  const size_t n = count - (torn ? 1 : 0);
  GF_CHECK_AS(std::runtime_error, n > 0, "report: {} holds no record", name);
  const std::vector<size_t> cols = columns_of(n, max_steps);
  std::vector<std::string> groups;                    // rows: the first record's groups
  std::vector<std::pair<std::string, size_t>> heads;  // and its attention heads: (attention, head)
  std::vector<double> steps, loss, lr;
  std::map<std::string, std::vector<std::vector<double>>> stat;  // statistic -> [group][column]
  std::vector<std::vector<double>> entropy, uniform;
  size_t i = 0, next_col = 0;
  walk([&](size_t number, const std::string& text) {
    const size_t at = i++;
    if (at == n) return;  // the torn last line
    train::StatsJson j;
    try {
      j = train::parse_stats_record(text);
    } catch (const std::exception& e) {  // FieldError, or nlohmann's parse_error
      GF_FAIL_AS(std::runtime_error, "report: {} line {}: not a grad-stats record: {}", name, number, e.what());
    }
    const train::StatsJson& record_groups = member(j, "groups");
    const train::StatsJson* attention = find_member(j, "attention");
    if (at == 0) {
      for (const auto& g : record_groups) groups.push_back(string_at(g, "name"));
      if (attention)
        for (const auto& a : *attention)
          for (size_t h = 0; h < member(a, "entropy").size(); ++h) heads.emplace_back(string_at(a, "name"), h);
      for (const char* key : {"grad_norm", "param_norm", "update_ratio"}) stat[key].assign(groups.size(), {});
      entropy.assign(heads.size(), {}), uniform.assign(heads.size(), {});
    }
    if (next_col >= cols.size() || cols[next_col] != at) return;
    ++next_col;
    steps.push_back(static_cast<double>(integer_at(j, "step")));
    loss.push_back(train::stats_number_at(j, "loss"));
    lr.push_back(train::stats_number_at(j, "lr"));
    std::map<std::string, const train::StatsJson*> by_name;
    for (const auto& grp : record_groups) by_name[string_at(grp, "name")] = &grp;
    for (size_t r = 0; r < groups.size(); ++r)
      for (auto& [key, rows] : stat) {
        auto it = by_name.find(groups[r]);
        rows[r].push_back(it == by_name.end() ? NAN : train::stats_number_at(*it->second, key.c_str()));
      }
    std::map<std::string, const train::StatsJson*> att;
    if (attention)
      for (const auto& a : *attention) att[string_at(a, "name")] = &a;
    for (size_t r = 0; r < heads.size(); ++r) {
      auto it = att.find(heads[r].first);
      const train::StatsJson* e = it == att.end() ? nullptr : &member(*it->second, "entropy");
      const bool has = e && heads[r].second < e->size();
      entropy[r].push_back(has ? train::stats_number((*e)[heads[r].second], "entropy") : NAN);
      uniform[r].push_back(has ? train::stats_number_at(*it->second, "uniform") : NAN);
    }
  });
  nlohmann::json g;
  g["recorded"] = n;
  g["torn_last_line"] = torn;
  g["steps"] = steps;
  g["loss"] = rounded(loss);
  g["lr"] = rounded(lr);
  g["groups"] = groups;
  for (auto& [key, rows] : stat) {
    g[key] = nlohmann::json::array();
    for (const auto& row : rows) g[key].push_back(rounded(row));
  }
  g["heads"] = nlohmann::json::array();
  for (const auto& [head_name, h] : heads) g["heads"].push_back({{"attention", head_name}, {"head", h}});
  g["entropy"] = nlohmann::json::array();
  g["uniform"] = nlohmann::json::array();
  for (size_t r = 0; r < heads.size(); ++r) g["entropy"].push_back(rounded(entropy[r])), g["uniform"].push_back(rounded(uniform[r]));
  return g;
}

}  // namespace

nlohmann::json grad_stats_data(const std::string& path, size_t max_steps) {
  return grad_stats_of([&](const auto& each) { train::for_each_stats_line(path, each); }, path, max_steps);
}

nlohmann::json grad_stats_data_of(std::string_view text, const std::string& name, size_t max_steps) {
  return grad_stats_of([&](const auto& each) { train::for_each_stats_line_of(text, name, each); }, name, max_steps);
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
  nlohmann::json outside = nlohmann::json::array();
  note_links_out(outside, run_dir, t);
  if (!o.sources_file.empty()) note_outside(outside, run_dir, o.sources_file, "--input: the explorer's sentences");
  d["attention"] = attention_json(t, o, run_dir, outside);
  d["outside_files"] = outside;
  return d;
}

nlohmann::json write_run_report(const std::string& run_dir, const std::string& out_file, const RunReportOptions& o) {
  const nlohmann::json data = run_report_data(run_dir, o);
  write_file_atomic(out_file, html_page("gradflow run report: " + run_dir, data, PageKind::Run));
  return data["outside_files"];
}

std::string outside_files_text(const nlohmann::json& outside_files) {
  std::string text;
  for (const auto& f : outside_files)
    text += fmt::format("report: read from outside the run folder: {} ({})\n", f["path"].get<std::string>(), f["why"].get<std::string>());
  return text;
}

}  // namespace gf::app

#pragma once
// The run report: one self-contained HTML page for a run folder (`gradflow report RUN`, and
// `gradflow train --report` at the end of training). It shows the run's settings (config.json),
// the training and validation loss (state.json's curves) over the learning-rate schedule, the
// gradient statistics when the run recorded them (grad_stats.jsonl), and an attention explorer
// for a few sentences (app/report_attention.h). docs/report.md describes the page.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gf::app {

struct RunReportOptions {
  std::vector<std::string> sources;  // sentences for the explorer; empty: sentences of the test split
  std::string sources_file;          // the file `sources` came from (--input), listed as read from outside the folder
  int64_t sentences = 5;             // how many test sentences
  int64_t max_tokens = 16;           // test sentences longer than this (source tokens) are passed over
  size_t max_steps = 300;            // grad-stats columns at most: every k-th recorded step and the last
};

// Everything the page draws, read from the run folder and computed with its best weights. Throws
// std::runtime_error naming the file when the folder lacks config.json or state.json, or one is
// malformed. A test split that cannot be read (data moved) leaves a note in "attention" instead.
// A run folder is outside input: "outside_files" lists every file from outside it that the report
// read ({"path", "why"}): the data files its config.json names (for the explorer's sentences), the
// --input file, and any file of the folder that is a symbolic link to a place outside it. Every
// file is read only when it is a regular file.
nlohmann::json run_report_data(const std::string& run_dir, const RunReportOptions& options);

// Writes the page to out_file (atomically); returns its "outside_files", which the caller prints.
nlohmann::json write_run_report(const std::string& run_dir, const std::string& out_file, const RunReportOptions& options);
// The lines that say so: "report: read from outside the run folder: PATH (why)", one a file.
std::string outside_files_text(const nlohmann::json& outside_files);

// grad_stats.jsonl's lines as the page's heat maps need them (exposed for tests): "steps",
// "loss", "lr", "groups" (names), "grad_norm" / "param_norm" / "update_ratio" ([group][column]),
// "heads" ([{"attention","head"}]), "entropy" and "uniform" ([head][column]), "recorded" (lines
// in the file). With more than max_steps lines, every k-th and the last are kept. Every line is
// checked (train::parse_stats_record: nesting, types, every key the page reads); throws naming the
// file, the line and the missing or mistyped key for a malformed line other than a torn last one
// (one that is not JSON at all, as a run killed mid-write leaves). The file is read as a regular
// file within train::kMaxGradStatsBytes, twice, holding only the columns drawn.
nlohmann::json grad_stats_data(const std::string& jsonl_path, size_t max_steps);
// The same of grad_stats.jsonl's text held in memory; `name` stands for the file in errors.
nlohmann::json grad_stats_data_of(std::string_view text, const std::string& name, size_t max_steps);

}  // namespace gf::app

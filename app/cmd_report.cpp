// gradflow report: one self-contained HTML page for a run folder (app/run_report.h).
#include <fmt/core.h>

#include <filesystem>

#include "app/commands.h"
#include "app/flags.h"
#include "app/lab_page.h"
#include "app/run_report.h"
#include "tensor/check.h"
#include "train/data/parallel_text.h"
#include "train/eval/translator.h"

namespace gf::app {
namespace {

// --input's sentences: a regular file (not a FIFO or device), at most train::kMaxWholeFileBytes.
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  try {
    for (std::string& line : train::split_text_lines(train::read_file_bytes(path, "report: --input"), path))
      if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(std::move(line));
  } catch (const std::exception& e) {
    GF_FAIL_AS(UsageError, "{}", e.what());
  }
  GF_CHECK_AS(UsageError, !out.empty(), "report: --input '{}' holds no sentence", path);
  return out;
}

}  // namespace

int cmd_report(int argc, char** argv) {
  RunReportOptions d;
  Flags f("report",
          "Writes one self-contained HTML page for a run folder: its settings, the loss curves over the learning-rate schedule, the\n"
          "gradient statistics (when trained with --grad-stats N), and an attention explorer (every attention by layer and head,\n"
          "gradient x input and attention rollout per output token) for a few test sentences or --src. It opens offline in a\n"
          "browser; nothing is fetched. docs/report.md describes the page.\n"
          "On a lab's output folder (gradflow lab NAME) it writes the lab's page, NAME.html; on a folder of them (lab all), an index\n"
          "page and every lab's page.");
  f.add_positional("RUN", "the run folder (written by gradflow train), or a lab's output folder, or a folder of them");
  f.add_string("out", "", "HTML file to write (default: RUN/report.html)");
  f.add_string("src", "", "a source sentence for the explorer, instead of test sentences (raw text for a run with --subwords)");
  f.add_string("input", "", "a file of source sentences for the explorer, one a line, instead of test sentences");
  f.add_int("sentences", d.sentences, "test sentences in the explorer");
  f.add_int("max-tokens", d.max_tokens, "pass over test sentences with more source tokens than this");
  if (!f.parse(argc, argv)) return 0;
  const std::string run = f.positional(0);
  // A lab's output folder, or a folder of them (gradflow lab all --out DIR): the lab pages.
  if (!std::filesystem::exists(train::run_file(run, "config.json")) && holds_lab_output(run)) {
    GF_CHECK_AS(UsageError, !f.given("src") && !f.given("input") && !f.given("out"),
                "report: '{}' holds lab output; --src, --input and --out are for a training run's folder", run);
    const std::string page = find_lab_json(run).empty() ? write_lab_index(run) : write_lab_page(run);
    fmt::print("wrote {} ({:.0f} KB)\n", page, static_cast<double>(std::filesystem::file_size(page)) / 1024.0);
    return 0;
  }
  RunReportOptions o;
  GF_CHECK_AS(UsageError, !(f.given("src") && f.given("input")), "report: give --src or --input, not both");
  if (f.given("src")) o.sources = {f.str("src")};
  if (f.given("input")) o.sources = lines_of(f.str("input")), o.sources_file = f.str("input");
  GF_CHECK_AS(UsageError, f.integer("sentences") >= 1 && f.integer("sentences") <= 50, "report: --sentences must be 1..50, got {}",
              f.integer("sentences"));
  GF_CHECK_AS(UsageError, f.integer("max-tokens") >= 1, "report: --max-tokens must be at least 1, got {}", f.integer("max-tokens"));
  o.sentences = f.integer("sentences");
  o.max_tokens = f.integer("max-tokens");
  const std::string out = f.str("out").empty() ? train::run_file(run, "report.html") : f.str("out");
  nlohmann::json outside;
  try {
    outside = write_run_report(run, out, o);
  } catch (const std::invalid_argument& e) {  // a bad --src sentence
    GF_FAIL_AS(UsageError, "{}", e.what());
  }
  fmt::print("{}wrote {} ({:.0f} KB)\n", outside_files_text(outside), out, static_cast<double>(std::filesystem::file_size(out)) / 1024.0);
  return 0;
}

}  // namespace gf::app

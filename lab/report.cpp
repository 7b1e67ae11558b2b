#include "lab/report.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"

namespace gf::lab {
namespace {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

nlohmann::json cell_json(const Cell& c) {
  if (!c.is_number) return c.text;
  if (!std::isfinite(c.number)) return fmt::format("{}", c.number);  // "nan", "inf": JSON has no such numbers
  if (c.integral) return static_cast<int64_t>(c.number);
  return c.number;
}

}  // namespace

std::string Cell::str() const {
  if (!is_number) return text;
  if (integral) return fmt::format("{}", static_cast<int64_t>(number));
  if (number == 0) return "0";
  return fmt::format("{:.4g}", number);
}

Table& Table::row(std::vector<Cell> cells) {
  GF_CHECK(cells.size() == columns.size(), "table '{}': a row of {} cells for {} columns", name, cells.size(), columns.size());
  rows.push_back(std::move(cells));
  return *this;
}

Report::Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out)
    : lab_(lab), settings_(std::move(settings)), out_(out), start_seconds_(now_seconds()) {
  for (const char* common : {"out", "seeds", "seed"}) require_setting(common);
  for (const Option& o : lab.options) require_setting(o.name);
  out_dir_ = settings_.at("out");
  GF_CHECK(seeds() >= 1, "lab {}: --seeds must be at least 1, got {}", lab.name, seeds());
  json_["lab"] = lab.name;
  json_["title"] = lab.title;
  json_["reference"] = lab.reference;
  json_["settings"] = settings_;
  json_["threads"] = max_threads();
  json_["blas_core"] = blas_core_in_use();
  json_["log"] = nlohmann::json::array();
  json_["tables"] = nlohmann::json::object();
  json_["data"] = nlohmann::json::object();
  fmt::print(out_, "lab {}: {}\n  {}\n  {}\n", lab.name, lab.title, lab.reference, lab.question);
  std::fflush(out_);
}

void Report::require_setting(const std::string& name) const {
  GF_CHECK_AS(std::logic_error, settings_.count(name), "lab {}: setting '{}' was not given", lab_.name, name);
}

int64_t Report::integer(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == v.size(), "lab {}: --{} expects an integer, got '{}'", lab_.name, name, v);
  return x;
}

double Report::real(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == v.size(), "lab {}: --{} expects a number, got '{}'", lab_.name, name, v);
  return x;
}

const std::string& Report::text(const std::string& name) const {
  require_setting(name);
  return settings_.at(name);
}

bool Report::on(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  return v == "1" || v == "true" || v == "on";
}

int Report::seeds() const { return static_cast<int>(integer("seeds")); }

uint64_t Report::seed(int i) const { return static_cast<uint64_t>(integer("seed")) + static_cast<uint64_t>(i); }

void Report::section(const std::string& title) {
  fmt::print(out_, "\n== {}\n", title);
  json_["log"].push_back("== " + title);
  std::fflush(out_);
}

void Report::say(const std::string& line) {
  fmt::print(out_, "{}\n", line);
  json_["log"].push_back(line);
  std::fflush(out_);
}

void Report::print(const Table& t) {
  std::vector<size_t> width(t.columns.size());
  for (size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
  for (const auto& r : t.rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].str().size());
  std::string s;
  for (size_t c = 0; c < t.columns.size(); ++c) s += fmt::format("{}{:>{}}", c ? "  " : "", t.columns[c], width[c]);
  s += "\n";
  for (const auto& r : t.rows) {
    for (size_t c = 0; c < r.size(); ++c)
      s += r[c].is_number ? fmt::format("{}{:>{}}", c ? "  " : "", r[c].str(), width[c]) : fmt::format("{}{:<{}}", c ? "  " : "", r[c].str(), width[c]);
    s += "\n";
  }
  fmt::print(out_, "{}", s);
  std::fflush(out_);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) {
    nlohmann::json row = nlohmann::json::array();
    for (const auto& c : r) row.push_back(cell_json(c));
    rows.push_back(row);
  }
  // A name printed again (a table per seed) gets a number instead of replacing the first one's numbers.
  std::string key = t.name;
  for (int k = 2; json_["tables"].contains(key); ++k) key = fmt::format("{} ({})", t.name, k);
  json_["tables"][key] = {{"columns", t.columns}, {"rows", rows}};
}

void Report::write_file(const std::string& name, const std::string& content) {
  std::filesystem::create_directories(out_dir_);
  const std::string path = (std::filesystem::path(out_dir_) / name).string();
  write_file_atomic(path, content);
  files_.push_back(path);
}

void Report::claim(const std::string& statement, bool holds, const std::string& evidence) {
  claims_.push_back({statement, holds, evidence});
  fmt::print(out_, "  [{}] {}: {}\n", holds ? "holds" : "FAILS", statement, evidence);
  std::fflush(out_);
}

int Report::finish() {
  GF_CHECK_AS(std::logic_error, !claims_.empty(), "lab {} checked no claim", lab_.name);
  size_t held = 0;
  for (const auto& c : claims_) held += c.holds;
  const bool agrees = held == claims_.size();
  std::string line = fmt::format("check: {} with {}: {} of {} claims hold", agrees ? "AGREES" : "DISAGREES", lab_.reference, held, claims_.size());
  for (const auto& c : claims_)
    if (!c.holds) line += fmt::format("; fails: {} ({})", c.statement, c.evidence);

  const double seconds = now_seconds() - start_seconds_;
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& c : claims_) claims.push_back({{"statement", c.statement}, {"holds", c.holds}, {"evidence", c.evidence}});
  json_["claims"] = claims;
  json_["check"] = {{"agrees", agrees}, {"line", line}};
  json_["seconds"] = seconds;
  if (!panels_.empty()) write_file(lab_.name + ".svg", figure_svg(fmt::format("gradflow lab {}: {}", lab_.name, lab_.title), panels_, 2));
  json_["files"] = files_;
  const std::string json_path = (std::filesystem::path(out_dir_) / (lab_.name + ".json")).string();
  files_.push_back(json_path);
  std::filesystem::create_directories(out_dir_);
  write_file_atomic(json_path, json_.dump(1) + "\n");

  fmt::print(out_, "\nwrote");
  for (const auto& f : files_) fmt::print(out_, " {}", f);
  fmt::print(out_, "\nran in {:.1f} s on {} threads\n{}\n", seconds, max_threads(), line);
  std::fflush(out_);
  return agrees ? 0 : 3;
}

}  // namespace gf::lab

#include "lab/output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"

namespace gf::lab {
namespace {

nlohmann::json cell_json(const Cell& c) {
  if (!c.is_number) return c.text;
  if (!std::isfinite(c.number)) return fmt::format("{}", c.number);  // "nan", "inf": JSON has no such numbers
  if (c.integral) return static_cast<int64_t>(c.number);
  return c.number;
}

nlohmann::json series(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(number_json(x));
  return a;
}

}  // namespace

nlohmann::json number_json(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

DoseBand dose_band(const DoseResponse& d) {
  DoseBand b;
  for (size_t k = 0; k < d.levels.size(); ++k) {
    std::vector<double> at;
    for (const auto& seed : d.per_seed) {
      GF_CHECK(seed.size() == d.levels.size(), "dose-response '{}': a seed has {} values for {} levels", d.name, seed.size(), d.levels.size());
      at.push_back(seed[k]);
    }
    const Interval iv = t_interval(at);
    b.mean.push_back(iv.mean), b.lo.push_back(iv.lo), b.hi.push_back(iv.hi);
  }
  return b;
}

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

Output::Output(std::string name, std::string out_dir, std::FILE* out) : name_(std::move(name)), out_dir_(std::move(out_dir)), out_(out) {
  json_["log"] = nlohmann::json::array();
  json_["tables"] = nlohmann::json::object();
  json_["data"] = nlohmann::json::object();
}

void Output::section(const std::string& title) {
  fmt::print(out_, "\n== {}\n", title);
  json_["log"].push_back("== " + title);
  std::fflush(out_);
}

void Output::say(const std::string& line) {
  fmt::print(out_, "{}\n", line);
  json_["log"].push_back(line);
  std::fflush(out_);
}

void Output::progress(const std::string& line) {
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

void Output::print(const Table& t) {
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

void Output::write_file(const std::string& name, const std::string& content) {
  std::filesystem::create_directories(out_dir_);
  const std::string path = (std::filesystem::path(out_dir_) / name).string();
  write_file_atomic(path, content);
  files_.push_back(path);
}

std::vector<double> Output::dose_response(const DoseResponse& d) {
  GF_CHECK(d.per_seed.size() >= 2, "dose-response '{}' needs 2 or more seeds, got {}", d.name, d.per_seed.size());
  const DoseBand b = dose_band(d);
  std::vector<double> trends;
  for (const auto& seed : d.per_seed) trends.push_back(trend(d.levels, seed, d.kind));
  Table t("dose-response: " + d.name, {d.factor, d.statistic + ": mean", "95% lo", "95% hi"});
  for (size_t k = 0; k < d.levels.size(); ++k) t.row({d.levels[k], b.mean[k], b.lo[k], b.hi[k]});
  print(t);
  say(fmt::format("dose-response {}: {} of the statistic on {} per seed: {:.4g}", d.name, trend_name(d.kind),
                  d.kind == TrendKind::LogSlope ? "log2(" + d.factor + ")" : d.factor, fmt::join(trends, ", ")));
  // The legend in a bottom corner the line leaves free: left when it falls, right when it rises.
  const Chart::Corner corner = b.mean.back() < b.mean.front() ? Chart::Corner::BottomLeft : Chart::Corner::BottomRight;
  add_panel(Chart{fmt::format("dose-response: {} (band: 95% t, {} seeds)", d.name, d.per_seed.size()), d.factor, d.statistic, d.log_x, false,
                  {ChartSeries{"mean over seeds", d.levels, b.mean, b.lo, b.hi, false, d.color}}, d.levels, corner});
  nlohmann::json per_seed = nlohmann::json::array(), tr = nlohmann::json::array();
  for (const auto& seed : d.per_seed) {
    nlohmann::json row = nlohmann::json::array();
    for (double v : seed) row.push_back(number_json(v));
    per_seed.push_back(row);
  }
  for (double v : trends) tr.push_back(number_json(v));
  // The contrasts between adjacent levels, per seed: a trend carried by one step shows as one
  // interval clear of 0 among others that are not.
  Table steps("adjacent levels: " + d.name, {"from", "to", "difference: mean", "95% lo", "95% hi"});
  nlohmann::json adjacent = nlohmann::json::array();
  for (size_t k = 0; k + 1 < d.levels.size(); ++k) {
    std::vector<double> diff;
    for (const auto& seed : d.per_seed) diff.push_back(seed[k + 1] - seed[k]);
    const Interval iv = t_interval(diff);
    steps.row({d.levels[k], d.levels[k + 1], iv.mean, iv.lo, iv.hi});
    adjacent.push_back({{"from", d.levels[k]}, {"to", d.levels[k + 1]}, {"mean", number_json(iv.mean)}, {"lo", number_json(iv.lo)},
                        {"hi", number_json(iv.hi)}, {"values", series(diff)}});
  }
  print(steps);
  dose_.push_back({{"name", d.name}, {"factor", d.factor}, {"statistic", d.statistic}, {"levels", series(d.levels)}, {"mean", series(b.mean)},
                   {"lo", series(b.lo)}, {"hi", series(b.hi)}, {"band", "t 95% over seeds"}, {"per_seed", per_seed},
                   {"trend", trend_name(d.kind)}, {"trends", tr}, {"adjacent", adjacent}, {"log_x", d.log_x}});
  return trends;
}

std::vector<std::string> Output::write(const std::string& name, const std::string& title, const nlohmann::json& fields) {
  for (const auto& [k, v] : fields.items()) json_[k] = v;
  if (!dose_.empty()) json_["dose_response"] = dose_;
  if (!panels_.empty()) write_file(name + ".svg", figure_svg(title, panels_, 2));
  json_["files"] = files_;
  const std::string json_path = (std::filesystem::path(out_dir_) / (name + ".json")).string();
  std::filesystem::create_directories(out_dir_);
  write_file_atomic(json_path, json_.dump(1) + "\n");
  std::vector<std::string> out = files_;
  out.push_back(json_path);
  return out;
}

std::string interval_text(const std::vector<double>& v) {
  const Interval iv = t_interval(v);
  return fmt::format("{:.3g} [{:.3g}, {:.3g}]", iv.mean, iv.lo, iv.hi);
}

ChartSeries spread_series(const std::string& name, const std::vector<double>& x, const std::vector<Spread>& s, const std::string& color,
                                 bool band) {
  ChartSeries c{name, x, {}, {}, {}, !band, color};
  for (const auto& v : s) c.y.push_back(v.mean), c.lo.push_back(v.min), c.hi.push_back(v.max);
  if (!band) c.lo.clear(), c.hi.clear();
  return c;
}

ChartSeries moving_average(const std::string& name, const std::vector<double>& y, size_t window, bool dashed, const std::string& color) {
  ChartSeries c{name, {}, {}, {}, {}, dashed, color};
  for (size_t k = window - 1; k < y.size(); ++k) {
    double v = 0;
    for (size_t j = 0; j < window; ++j) v += y[k - j] / static_cast<double>(window);
    c.x.push_back(static_cast<double>(k + 1)), c.y.push_back(v);
  }
  return c;
}

}  // namespace gf::lab

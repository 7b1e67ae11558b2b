#pragma once
// What a lab writes: lines and tables printed and kept, figures drawn into NAME.svg, raw numbers and
// files, and at the end NAME.json. The lab's own tables (describe) and the runner's (claims, the
// verdict, dose-responses) go through one Output.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lab/stats.h"
#include "train/plot/svg_chart.h"

namespace gf::lab {

// A table cell: a number (exact in the JSON, printed to 4 significant digits) or text.
struct Cell {
  Cell(double v) : number(v), is_number(true) {}
  Cell(int v) : number(v), is_number(true), integral(true) {}
  Cell(int64_t v) : number(static_cast<double>(v)), is_number(true), integral(true) {}
  Cell(size_t v) : number(static_cast<double>(v)), is_number(true), integral(true) {}
  Cell(const char* s) : text(s) {}
  Cell(std::string s) : text(std::move(s)) {}
  std::string text;
  double number = 0;
  bool is_number = false, integral = false;
  std::string str() const;  // as printed
};

struct Table {
  Table(std::string name, std::vector<std::string> columns) : name(std::move(name)), columns(std::move(columns)) {}
  // Throws std::invalid_argument when the cell count differs from the column count.
  Table& row(std::vector<Cell> cells);
  std::string name;
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

// ---- dose-response (issue 35, item 5) ----
// A lab with a causal factor measures its main statistic at 4 or more levels of it, per seed, and
// states its claim as the trend: one number per seed, decided by the paper-claim machinery
// (r.paper(id, trends)). Three ways to read a trend:
//  - Slope: the least-squares slope of the statistic on the level, for a factor that adds (a length,
//    a count of steps at one spacing);
//  - LogSlope: the slope on log2(level), per doubling, for a factor that multiplies (d_k, a learning
//    rate, epsilon swept by factors): its levels are spaced by ratios, and a slope on the raw level
//    would be set by the largest two;
//  - Rank: Spearman's rank correlation of the statistic with the level, for a bounded or ordinal
//    statistic, or one whose response need not be linear in any scale (a share, an accuracy).
struct DoseResponse {
  std::string name;       // key in NAME.json's "dose_response" and the claim's subject, e.g. "d_k"
  std::string factor;     // the x axis, "d_k (log)"
  std::string statistic;  // the y axis, "log10 |d scores| / |d p|, median row"
  std::vector<double> levels;                 // >= 4, strictly increasing
  std::vector<std::vector<double>> per_seed;  // [seed][level]: the statistic
  TrendKind kind = TrendKind::Slope;
  bool log_x = false;     // draw the levels on a log axis
  std::string color;      // "" : the palette's
};
// The mean statistic per level across seeds with its 95% t interval (the band of the figure).
struct DoseBand {
  std::vector<double> mean, lo, hi;
};
DoseBand dose_band(const DoseResponse& d);

class Output {
 public:
  Output(std::string name, std::string out_dir, std::FILE* out);
  const std::string& name() const { return name_; }  // the lab's (NAME.json, NAME.svg)

  void section(const std::string& title);  // a heading line
  void say(const std::string& line);       // printed, and kept in the JSON's "log"
  void progress(const std::string& line);  // printed only (a run's time: not a result)
  void print(const Table& table);          // printed aligned, and kept in the JSON's "tables"
  nlohmann::json& data() { return json_["data"]; }  // raw numbers, free-form
  void add_panel(Panel panel) { panels_.push_back(std::move(panel)); }  // drawn into NAME.svg
  // Another file in the output folder (a .dot, an attention map); listed in the JSON's "files".
  void write_file(const std::string& name, const std::string& content);
  // A dose-response: draws the mean statistic per level with its 95% band across seeds as a panel,
  // keeps the series in the JSON's "dose_response", prints the per-level table and the contrasts
  // between adjacent levels, and returns one trend per seed. Throws std::invalid_argument for fewer
  // than 2 seeds or a seed with a value per level missing.
  std::vector<double> dose_response(const DoseResponse& d);
  const std::string& out_dir() const { return out_dir_; }
  std::FILE* stream() const { return out_; }

 protected:
  // NAME.svg (when there are panels) and NAME.json: `fields` merged into the JSON; returns the paths.
  std::vector<std::string> write(const std::string& name, const std::string& title, const nlohmann::json& fields);
  nlohmann::json json_;

 private:
  std::string name_, out_dir_;
  std::FILE* out_;
  std::vector<Panel> panels_;
  nlohmann::json dose_ = nlohmann::json::array();
  std::vector<std::string> files_;
};

// NaN and infinities as JSON null (JSON has no such numbers).
nlohmann::json number_json(double x);
// "mean [lo, hi]" of the values' 95% t interval, to 3 significant digits.
std::string interval_text(const std::vector<double>& v);
// A line of per-x spreads: the means, with a band from min to max (band) or dashed without one.
ChartSeries spread_series(const std::string& name, const std::vector<double>& x, const std::vector<Spread>& s, const std::string& color,
                                     bool band);
// A `window`-point moving average of y, as a series at x = window, window + 1, ... (1-based steps).
ChartSeries moving_average(const std::string& name, const std::vector<double>& y, size_t window, bool dashed, const std::string& color);

}  // namespace gf::lab

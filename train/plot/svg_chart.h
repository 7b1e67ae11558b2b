#pragma once
// Line charts and value heat maps as standalone SVG, for the gradient-flow labs and training
// statistics: several series per chart, each with an optional shaded band (the spread over
// seeds), linear or logarithmic axes, and figures that set several panels in a grid under one
// title. Like svg_plot.h, hand-written SVG that browsers show as is.
#include <cmath>
#include <string>
#include <variant>
#include <vector>

namespace gf {

struct ChartSeries {
  std::string name;
  std::vector<double> x, y;    // same length; a non-finite point (or <= 0 on a log axis) is a gap
  std::vector<double> lo, hi;  // optional, as long as y: a shaded band, e.g. min..max over seeds
  bool dashed = false;
  std::string color;  // "#rrggbb"; empty: the palette's colour for the series' position
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<ChartSeries> series;
  std::vector<double> x_ticks;  // optional: ticks exactly here (e.g. the depths of a sweep)
  // The corner of the plot the legend sits in: one the data leave free.
  enum class Corner { TopLeft, TopRight, BottomLeft, BottomRight } legend = Corner::TopLeft;
};

// A grid of values coloured on one scale (viridis): rows x columns, e.g. layers x steps.
struct ValueMap {
  std::string title, x_label, y_label;
  std::vector<std::string> row_labels, col_labels;  // empty: numbered
  std::vector<std::vector<double>> values;          // (rows, cols); NaN and Inf are drawn grey
  bool log_scale = false;                           // colour by log10 (values <= 0 grey)
  std::string value_label;                          // the colour bar's caption
  double lo = NAN, hi = NAN;  // a fixed colour range (e.g. 0..1 for a share); NaN: the values' own range
};

using Panel = std::variant<Chart, ValueMap>;

// One chart as a document of its own.
std::string chart_svg(const Chart& chart);
// Panels in a grid of `columns`, under a title. Throws std::invalid_argument for columns < 1, a
// series whose x, y, lo, hi lengths disagree, or a value map with ragged rows or wrong label counts.
std::string figure_svg(const std::string& title, const std::vector<Panel>& panels, int columns = 2);

// Ticks for a log axis over [lo, hi] (both > 0): powers of ten, with 2 and 5 between them when the
// range spans less than three decades. Public for tests.
std::vector<double> log_ticks(double lo, double hi);

}  // namespace gf

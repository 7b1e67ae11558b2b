#pragma once
// Hand-written SVG pictures for the trainer: attention heatmaps and loss curves.
// The output is a complete standalone <svg> document (UTF-8) that browsers and rsvg-convert show
// as is; labels are XML-escaped and the font list falls back to CJK-capable fonts so Korean
// tokens display.
#include <string>
#include <utility>
#include <vector>

namespace gf {

// One attention matrix: weights[i][j] is how much target token i attends to source token j.
struct Heatmap {
  std::string title;
  std::vector<std::vector<float>> weights;  // (T, S), values in [0, 1] (clamped when drawn)
  std::vector<std::string> row_labels;      // T target tokens (empty: numbered 0..T-1)
  std::vector<std::string> col_labels;      // S source tokens (empty: numbered 0..S-1)
};

// A single heatmap: source tokens along the top (rotated), target tokens down the left, a white ->
// dark blue colour scale with a colour bar, and a tooltip (<title>) with the value on every cell.
// Throws std::invalid_argument when rows differ in length or label counts do not match.
std::string attention_heatmap_svg(const std::vector<std::vector<float>>& weights,
                                  const std::vector<std::string>& row_labels,
                                  const std::vector<std::string>& col_labels, const std::string& title);

// Several heatmaps (e.g. every layer x head and their average) in a grid of `columns` panels per
// row, sharing one colour bar. Throws std::invalid_argument when columns < 1 or a map is malformed.
std::string attention_grid_svg(const std::vector<Heatmap>& maps, int columns);

// Training and validation loss against step: two polylines, "nice" axis ticks, a legend.
// Points with a NaN or infinite step or loss are skipped; either series may be empty.
std::string loss_curve_svg(const std::vector<std::pair<double, double>>& train,
                           const std::vector<std::pair<double, double>>& valid, const std::string& title);

// ---- helpers, public for tests ----

// Escape & < > " ' for XML text and attribute values; drops the characters XML 1.0 forbids (controls
// other than tab, newline and carriage return; U+FFFE, U+FFFF) and turns invalid UTF-8 into U+FFFD.
std::string xml_escape(const std::string& text);

// Round tick values covering [lo, hi]: a step of 1, 2, 2.5 or 5 times a power of ten chosen so that
// about `target` ticks result; the first tick is <= lo and the last >= hi. A degenerate range
// (lo == hi) is widened around the value. Throws std::invalid_argument for non-finite bounds.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Tick label text: as many decimals as the tick spacing needs ("0.25", "1000", "2.5").
std::string format_tick(double value, double step);

}  // namespace gf

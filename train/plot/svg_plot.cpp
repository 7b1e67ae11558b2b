#include "train/plot/svg_plot.h"

#include "train/plot/svg_doc.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tensor/check.h"

namespace gf {
namespace {

// Korean tokens need a font with Hangul; generic sans-serif often has none, so name CJK fonts
// common on Linux, Windows and macOS before the generic fallback.
constexpr const char* kFontFamily =
    "'Noto Sans CJK KR', 'Noto Sans KR', 'Malgun Gothic', 'Apple SD Gothic Neo', 'Noto Sans', sans-serif";
constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------- text

// Coordinates with at most two decimals and no trailing zeros: keeps big heatmaps small.
std::string num(double v) {
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

// One UTF-8 code point at s[i]; malformed bytes decode as U+FFFD of length 1 so that broken
// input still yields well-formed XML.
struct CodePoint {
  char32_t value;
  size_t len;
  bool valid;
};

CodePoint decode_utf8(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const auto cont = [&](size_t k) { return (at(k) & 0xC0u) == 0x80u; };
  const unsigned c0 = at(0);
  if (c0 < 0x80) return {c0, 1, true};
  if (c0 >= 0xC2 && c0 <= 0xDF && cont(1)) return {((c0 & 0x1Fu) << 6) | (at(1) & 0x3Fu), 2, true};
  if (c0 >= 0xE0 && c0 <= 0xEF && cont(1) && cont(2)) {
    const char32_t v = ((c0 & 0x0Fu) << 12) | ((at(1) & 0x3Fu) << 6) | (at(2) & 0x3Fu);
    if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) return {v, 3, true};
  }
  if (c0 >= 0xF0 && c0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t v = ((c0 & 0x07u) << 18) | ((at(1) & 0x3Fu) << 12) | ((at(2) & 0x3Fu) << 6) | (at(3) & 0x3Fu);
    if (v >= 0x10000 && v <= 0x10FFFF) return {v, 4, true};
  }
  return {0xFFFD, 1, false};
}

// SVG has no text measurement, so margins are sized from an estimate of each label's width in
// em: full-width CJK/Hangul ~1 em, Latin ~0.55 em with a few narrow and wide letters.
double char_width_em(char32_t c) {
  if (c < 0x80) {
    if (c == 'i' || c == 'l' || c == 'j' || c == '.' || c == ',' || c == ';' || c == ':' || c == '!' ||
        c == '|' || c == '\'' || c == ' ')
      return 0.3;
    if (c == 'm' || c == 'w' || c == 'M' || c == 'W') return 0.9;
    if (c >= 'A' && c <= 'Z') return 0.68;
    return 0.56;
  }
  const bool wide = (c >= 0x1100 && c <= 0x115F) || (c >= 0x2580 && c <= 0x259F) ||  // Jamo, blocks (e.g. ▁)
                    (c >= 0x2E80 && c <= 0xA4CF) || (c >= 0xAC00 && c <= 0xD7A3) ||  // CJK, Hangul syllables
                    (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFE30 && c <= 0xFE4F) ||
                    (c >= 0xFF00 && c <= 0xFF60) || (c >= 0xFFE0 && c <= 0xFFE6) || c >= 0x20000;
  return wide ? 1.0 : 0.62;
}

double text_width_em(const std::string& s) {
  double w = 0;
  for (size_t i = 0; i < s.size();) {
    const CodePoint cp = decode_utf8(s, i);
    w += char_width_em(cp.value);
    i += cp.len;
  }
  return w;
}

// Shorten to at most max_em (estimated) by cutting whole code points and appending "…".
std::string truncate_label(const std::string& s, double max_em) {
  if (text_width_em(s) <= max_em) return s;
  std::string out;
  double w = 0;
  for (size_t i = 0; i < s.size();) {
    const CodePoint cp = decode_utf8(s, i);
    const double cw = char_width_em(cp.value);
    if (w + cw > max_em - 1.0) break;  // leave room for the ellipsis
    out.append(s, i, cp.len);
    w += cw;
    i += cp.len;
  }
  return out + "\u2026";
}

// ---------------------------------------------------------------- colour

// White -> dark blue through ColorBrewer "Blues" tones: more contrast in the middle than a
// straight white-to-navy blend, and identical stops feed the colour bar gradient.
struct ColorStop {
  double at;
  int r, g, b;
};
constexpr ColorStop kBlues[] = {
    {0.00, 255, 255, 255}, {0.25, 198, 219, 239}, {0.50, 107, 174, 214}, {0.75, 33, 113, 181}, {1.00, 8, 48, 107}};
constexpr int kNumStops = sizeof(kBlues) / sizeof(kBlues[0]);
constexpr const char* kNanColor = "#d9d9d9";

std::string hex(int r, int g, int b) { return fmt::format("#{:02x}{:02x}{:02x}", r, g, b); }

std::string blues(double v) {
  v = std::clamp(v, 0.0, 1.0);
  int k = 0;
  while (k + 2 < kNumStops && v > kBlues[k + 1].at) ++k;
  const ColorStop &a = kBlues[k], &b = kBlues[k + 1];
  const double t = (v - a.at) / (b.at - a.at);
  const auto mix = [t](int x, int y) { return static_cast<int>(std::lround(x + (y - x) * t)); };
  return hex(mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b));
}

// ---------------------------------------------------------------- document

void open_svg(std::string& out, double width, double height) {
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"{2}\" font-size=\"12\">\n",
      num(width), num(height), kFontFamily);
  // An explicit background: viewers and PNG converters otherwise show transparency (often black).
  out += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
}

void blues_gradient_defs(std::string& out) {
  // Bottom (0) to top (1), matching the colour bar's orientation.
  out += "<defs><linearGradient id=\"gf-blues\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (const auto& s : kBlues) out += fmt::format("<stop offset=\"{}\" stop-color=\"{}\"/>", num(s.at), hex(s.r, s.g, s.b));
  out += "</linearGradient></defs>\n";
}

// Vertical colour bar for [0, 1] with ticks every 0.25; about 50 px wide including labels.
void draw_colorbar(std::string& out, double x, double y, double height) {
  constexpr double kBarWidth = 12;
  out += "<g class=\"colorbar\">\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#gf-blues)\" stroke=\"#888888\" "
                     "stroke-width=\"0.5\"/>\n",
                     num(x), num(y), num(kBarWidth), num(height));
  for (int k = 0; k <= 4; ++k) {
    const double v = k * 0.25;
    const double ty = y + height * (1.0 - v);
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#888888\" stroke-width=\"0.5\"/>",
                       num(x + kBarWidth), num(ty), num(x + kBarWidth + 3));
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\" font-size=\"10\" fill=\"#333333\">{}</text>\n",
                       num(x + kBarWidth + 5), num(ty), format_tick(v, 0.25));
  }
  out += "</g>\n";
}
constexpr double kColorbarSpace = 52;  // bar + tick labels + margin

// ---------------------------------------------------------------- heatmap layout

// A heatmap's labels (defaults filled in) and the geometry derived from them.
struct HeatmapPanel {
  const std::string* title = nullptr;
  const std::vector<std::vector<float>>* weights = nullptr;  // (T, S)
  std::vector<std::string> rows, cols;                       // full labels (tooltips)
  std::vector<std::string> row_text, col_text;               // truncated labels (axes)
  int T = 0, S = 0;

  double cell = 0, font = 0, angle = 45;  // cell side (px), label font (px), column label angle (deg)
  double label_left = 0;                  // room for row labels, left of the grid
  double title_h = 0;                     // room for the title, above the column labels
  double col_label_h = 0;                 // vertical reach of the rotated column labels
  double overhang = 0;                    // how far column labels reach right of the grid

  double title_w = 0;                     // estimated width of the title

  double grid_w() const { return cell * S; }
  double grid_h() const { return cell * T; }
  // Right edge of everything drawn, relative to the panel's left.
  double content_w() const {
    const double grid_right = label_left + (S > 0 ? grid_w() + std::max(overhang, 0.0) : 160.0);
    return std::max(grid_right, 4 + title_w);
  }
  double width() const { return content_w() + 16; }
  double height() const { return title_h + col_label_h + std::max(grid_h(), 24.0) + 12; }
};

constexpr double kMaxLabelEm = 14;  // longer tokens are shortened on the axes (full text in tooltips)

HeatmapPanel prepare_panel(const std::string& op, const std::string& title,
                           const std::vector<std::vector<float>>& weights, const std::vector<std::string>& row_labels,
                           const std::vector<std::string>& col_labels) {
  HeatmapPanel p;
  p.title = &title;
  p.weights = &weights;
  p.T = static_cast<int>(weights.size());
  p.S = p.T > 0 ? static_cast<int>(weights[0].size()) : 0;
  for (int i = 0; i < p.T; ++i)
    GF_CHECK(static_cast<int>(weights[i].size()) == p.S, "{}: '{}': row {} has {} weights but row 0 has {}", op, title, i,
             weights[i].size(), p.S);
  GF_CHECK(row_labels.empty() || static_cast<int>(row_labels.size()) == p.T, "{}: '{}': {} row labels for {} rows of weights", op,
           title, row_labels.size(), p.T);
  GF_CHECK(col_labels.empty() || p.T == 0 || static_cast<int>(col_labels.size()) == p.S,
           "{}: '{}': {} column labels for {} columns of weights", op, title, col_labels.size(), p.S);
  for (int i = 0; i < p.T; ++i) p.rows.push_back(row_labels.empty() ? std::to_string(i) : row_labels[i]);
  for (int j = 0; j < p.S; ++j) p.cols.push_back(col_labels.empty() ? std::to_string(j) : col_labels[j]);
  for (const auto& s : p.rows) p.row_text.push_back(truncate_label(s, kMaxLabelEm));
  for (const auto& s : p.cols) p.col_text.push_back(truncate_label(s, kMaxLabelEm));
  return p;
}

// Cells shrink as the sentence grows so a panel stays around `budget` px, within readable limits.
double choose_cell(const HeatmapPanel& p, double budget) {
  const int n = std::max({p.T, p.S, 1});
  return std::clamp(std::floor(budget / n), 15.0, 36.0);
}

void layout_panel(HeatmapPanel& p, double cell) {
  p.cell = cell;
  p.font = std::clamp(std::round(cell * 0.6), 10.0, 13.0);
  // Rotated labels sit on parallel lines cell*sin(angle) apart; steepen to 60 degrees when 45
  // would make neighbouring labels touch.
  p.angle = cell * std::sin(45 * kPi / 180) >= p.font * 1.15 ? 45 : 60;
  const double a = p.angle * kPi / 180;

  double row_w = 0;
  for (const auto& s : p.row_text) row_w = std::max(row_w, text_width_em(s) * p.font);
  p.label_left = row_w + 12;

  p.title_h = p.title->empty() ? 6 : p.font + 14;
  p.title_w = text_width_em(*p.title) * (p.font + 2) * 1.1;  // bold is wider
  double reach_up = 0, overhang = 0;
  for (int j = 0; j < p.S; ++j) {
    const double w = text_width_em(p.col_text[j]) * p.font;
    reach_up = std::max(reach_up, w * std::sin(a));
    overhang = std::max(overhang, (j + 0.5) * cell + w * std::cos(a) + p.font * 0.5 - p.grid_w());
  }
  p.col_label_h = reach_up + p.font + 8;
  p.overhang = overhang;
}

// Draw one panel with its top-left corner at (ox, oy).
void draw_panel(std::string& out, const HeatmapPanel& p, double ox, double oy) {
  const double gx = ox + p.label_left;                  // grid left
  const double gy = oy + p.title_h + p.col_label_h;     // grid top
  out += "<g class=\"heatmap\">\n";
  if (!p.title->empty())
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" font-weight=\"bold\" fill=\"#222222\">{}</text>\n",
                       num(ox + 4), num(oy + p.font + 6), num(p.font + 2), xml_escape(*p.title));
  if (p.T == 0 || p.S == 0) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#888888\">(no attention weights)</text>\n", num(gx),
                       num(gy + 16));
    out += "</g>\n";
    return;
  }

  // Cells, each with a tooltip "target → source: value".
  out += "<g class=\"cells\">\n";
  for (int i = 0; i < p.T; ++i) {
    for (int j = 0; j < p.S; ++j) {
      const double v = (*p.weights)[i][j];
      const bool finite = std::isfinite(v);
      out += fmt::format(
          "<rect class=\"cell\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} \u2192 {}: {}</title></rect>\n",
          num(gx + j * p.cell), num(gy + i * p.cell), num(p.cell), num(p.cell), finite ? blues(v) : kNanColor,
          xml_escape(p.rows[i]), xml_escape(p.cols[j]), finite ? fmt::format("{:.3f}", v) : std::string("nan"));
    }
  }
  out += "</g>\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\" "
                     "stroke-width=\"0.5\"/>\n",
                     num(gx), num(gy), num(p.grid_w()), num(p.grid_h()));

  // Target tokens, right-aligned against the grid.
  out += fmt::format("<g class=\"row-labels\" font-size=\"{}\" fill=\"#222222\" text-anchor=\"end\">\n", num(p.font));
  for (int i = 0; i < p.T; ++i) {
    const std::string tip = p.row_text[i] != p.rows[i] ? "<title>" + xml_escape(p.rows[i]) + "</title>" : "";
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{}{}</text>\n", num(gx - 6),
                       num(gy + (i + 0.5) * p.cell), tip, xml_escape(p.row_text[i]));
  }
  out += "</g>\n";

  // Source tokens, rotated, each starting just above its column centre.
  out += fmt::format("<g class=\"col-labels\" font-size=\"{}\" fill=\"#222222\">\n", num(p.font));
  for (int j = 0; j < p.S; ++j) {
    const std::string tip = p.col_text[j] != p.cols[j] ? "<title>" + xml_escape(p.cols[j]) + "</title>" : "";
    out += fmt::format("<text transform=\"translate({},{}) rotate(-{})\" x=\"0\" y=\"0\" dy=\"0.35em\">{}{}</text>\n",
                       num(gx + (j + 0.5) * p.cell), num(gy - 6), num(p.angle), tip, xml_escape(p.col_text[j]));
  }
  out += "</g>\n</g>\n";
}

// ---------------------------------------------------------------- loss curve

using Series = std::vector<std::pair<double, double>>;

Series finite_sorted(const Series& s) {
  Series out;
  for (const auto& [x, y] : s)
    if (std::isfinite(x) && std::isfinite(y)) out.emplace_back(x, y);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// With more points than pixels, keep only each pixel column's first, lowest, highest and last
// point: the drawn line looks the same (spikes survive) at a fraction of the file size.
Series thin_to_pixels(const Series& s, double x0, double x1, double pixels) {
  if (s.size() <= static_cast<size_t>(2 * pixels)) return s;
  Series out;
  size_t i = 0;
  while (i < s.size()) {
    const auto column = [&](double x) { return static_cast<long>(std::floor((x - x0) / (x1 - x0) * pixels)); };
    const long c = column(s[i].first);
    size_t end = i, lo = i, hi = i;
    while (end < s.size() && column(s[end].first) == c) {
      if (s[end].second < s[lo].second) lo = end;
      if (s[end].second > s[hi].second) hi = end;
      ++end;
    }
    size_t keep[4] = {i, std::min(lo, hi), std::max(lo, hi), end - 1};
    for (int k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(s[keep[k]]);
    i = end;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- public helpers

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = decode_utf8(text, i);
    switch (cp.value) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (cp.value < 0x20 && cp.value != '\t' && cp.value != '\n' && cp.value != '\r') break;  // not allowed in XML 1.0
        if (cp.value == 0xFFFE || cp.value == 0xFFFF) break;                                   // nor are these two
        if (cp.valid)
          out.append(text, i, cp.len);
        else
          out += "\uFFFD";
    }
    i += cp.len;
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  GF_CHECK(std::isfinite(lo) && std::isfinite(hi), "nice_ticks: bounds must be finite, got [{}, {}]", lo, hi);
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
  // The small tolerance keeps lo = 0.3 with step 0.1 from rounding out to 0.2 through 0.3/0.1 = 2.9999.
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  const long count = std::lround((last - first) / step);
  std::vector<double> ticks;
  for (long k = 0; k <= count; ++k) {
    double v = first + k * step;
    if (std::abs(v) < step * 1e-9) v = 0;  // no "-0" or 1e-17 labels
    ticks.push_back(v);
  }
  return ticks;
}

std::string format_tick(double value, double step) {
  int decimals = 0;
  while (decimals < 10) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, std::abs(scaled))) break;
    ++decimals;
  }
  std::string s = fmt::format("{:.{}f}", value, decimals);
  if (s.find_first_not_of("-0.") == std::string::npos) s = s[0] == '-' ? s.substr(1) : s;  // "-0.00" -> "0.00"
  return s;
}

// ---------------------------------------------------------------- heatmaps

std::string attention_heatmap_svg(const std::vector<std::vector<float>>& weights,
                                  const std::vector<std::string>& row_labels,
                                  const std::vector<std::string>& col_labels, const std::string& title) {
  HeatmapPanel p = prepare_panel("attention_heatmap_svg", title, weights, row_labels, col_labels);
  layout_panel(p, choose_cell(p, 560));
  constexpr double kMargin = 10;
  // The colour bar sits right of the grid, below the rotated labels that may reach over it.
  const double bar_x = kMargin + p.label_left + p.grid_w() + 16;
  const double bar_h = std::max(p.grid_h(), 120.0);
  const bool has_cells = p.T > 0 && p.S > 0;  // no colour bar for an empty map
  const double width = std::max(kMargin + p.width(), has_cells ? bar_x + kColorbarSpace : 0.0);
  const double height = kMargin + std::max(p.height(), has_cells ? p.title_h + p.col_label_h + bar_h + 12 : 0.0);

  std::string out;
  open_svg(out, width, height);
  blues_gradient_defs(out);
  draw_panel(out, p, kMargin, kMargin);
  if (has_cells) draw_colorbar(out, bar_x, kMargin + p.title_h + p.col_label_h, bar_h);
  out += "</svg>\n";
  return out;
}

std::string attention_grid_svg(const std::vector<Heatmap>& maps, int columns) {
  GF_CHECK(columns >= 1, "attention_grid_svg: columns must be >= 1, got {}", columns);
  std::string out;
  if (maps.empty()) {
    open_svg(out, 240, 40);
    out += "<text x=\"10\" y=\"24\" fill=\"#888888\">(no attention maps)</text>\n</svg>\n";
    return out;
  }

  std::vector<HeatmapPanel> panels;
  for (const auto& m : maps)
    panels.push_back(prepare_panel("attention_grid_svg", m.title, m.weights, m.row_labels, m.col_labels));
  // One cell size for all panels, so the same token pair has the same size everywhere.
  double cell = 36;
  for (const auto& p : panels) cell = std::min(cell, choose_cell(p, 360));
  for (auto& p : panels) layout_panel(p, cell);

  // Line the grids up across panels: every panel gets the widest row-label area and the tallest
  // title + column-label area.
  double label_left = 0, head_h = 0;
  for (const auto& p : panels) {
    label_left = std::max(label_left, p.label_left);
    head_h = std::max(head_h, p.title_h + p.col_label_h);
  }
  for (auto& p : panels) {
    p.label_left = label_left;
    p.col_label_h = head_h - p.title_h;
  }
  // Every slot of the grid gets the largest panel's size.
  double slot_w = 0, slot_h = 0;
  for (const auto& p : panels) {
    slot_w = std::max(slot_w, p.width());
    slot_h = std::max(slot_h, p.height());
  }

  const int n = static_cast<int>(panels.size());
  const int ncol = std::min(columns, n);
  const int nrow = (n + columns - 1) / columns;
  constexpr double kMargin = 10;
  const double bar_h = std::clamp(slot_h - head_h - 12, 100.0, 300.0);
  const double width = 2 * kMargin + ncol * slot_w + 4 + kColorbarSpace;
  const double height = 2 * kMargin + std::max(nrow * slot_h, head_h + bar_h + 12);

  open_svg(out, width, height);
  blues_gradient_defs(out);
  for (int k = 0; k < n; ++k) draw_panel(out, panels[k], kMargin + (k % columns) * slot_w, kMargin + (k / columns) * slot_h);
  draw_colorbar(out, kMargin + ncol * slot_w + 4, kMargin + head_h, bar_h);
  out += "</svg>\n";
  return out;
}

// ---------------------------------------------------------------- loss curve

std::string loss_curve_svg(const std::vector<std::pair<double, double>>& train_in,
                           const std::vector<std::pair<double, double>>& valid_in, const std::string& title) {
  const Series train = finite_sorted(train_in), valid = finite_sorted(valid_in);
  constexpr double W = 760, H = 440, left = 76, right = 24, top = 44, bottom = 58;
  constexpr double pw = W - left - right, ph = H - top - bottom;  // plot area

  // Data range -> nice ticks; the axes span exactly from the first to the last tick.
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const Series* s : {&train, &valid})
    for (const auto& [x, y] : *s) {
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, y), ymax = std::max(ymax, y);
    }
  const bool empty = train.empty() && valid.empty();
  if (empty) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  // A little air above and below the data, so extreme points do not sit on the frame.
  if (!empty) {
    const double ypad = 0.04 * (ymax - ymin);
    // Losses are never negative: an all-positive series keeps its axis at or above 0.
    ymin = ymin >= 0 ? std::max(0.0, ymin - ypad) : ymin - ypad;
    ymax += ypad;
  }
  const std::vector<double> xt = nice_ticks(xmin, xmax, 7), yt = nice_ticks(ymin, ymax, 6);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  const auto sx = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  const auto sy = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };

  std::string out;
  open_svg(out, W, H);
  out += fmt::format("<text x=\"{}\" y=\"26\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\" "
                     "fill=\"#222222\">{}</text>\n",
                     num(left + pw / 2), xml_escape(title));

  // Grid lines and tick labels.
  out += "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  for (double t : xt) out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", num(sx(t)), num(top), num(top + ph));
  for (double t : yt) out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", num(left), num(sy(t)), num(left + pw));
  out += "</g>\n";
  out += "<g class=\"x-ticks\" font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\">\n";
  for (double t : xt)
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(sx(t)), num(top + ph + 18), format_tick(t, xstep));
  out += "</g>\n";
  out += "<g class=\"y-ticks\" font-size=\"11\" fill=\"#333333\" text-anchor=\"end\">\n";
  for (double t : yt)
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{}</text>\n", num(left - 8), num(sy(t)), format_tick(t, ystep));
  out += "</g>\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#555555\" "
                     "stroke-width=\"1\"/>\n",
                     num(left), num(top), num(pw), num(ph));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" fill=\"#333333\">step</text>\n",
                     num(left + pw / 2), num(H - 14));
  out += fmt::format("<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\" "
                     "fill=\"#333333\">loss</text>\n",
                     num(top + ph / 2));

  if (empty) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888888\">(no data)</text>\n</svg>\n",
                       num(left + pw / 2), num(top + ph / 2));
    return out;
  }

  // The series: a polyline each, plus dots (with tooltips) where there are few enough points to
  // tell apart, and always for a series of one point, which a polyline alone would not show.
  struct Style {
    const Series* s;
    const char* name;
    const char* color;
  };
  const Style styles[] = {{&train, "train", "#1f77b4"}, {&valid, "valid", "#ff7f0e"}};
  for (const auto& st : styles) {
    if (st.s->empty()) continue;
    out += fmt::format("<g class=\"series-{}\">\n", st.name);
    const Series pts = thin_to_pixels(*st.s, x0, x1, pw);
    std::string coords;
    for (const auto& [x, y] : pts) coords += num(sx(x)) + "," + num(sy(y)) + " ";
    if (!coords.empty()) coords.pop_back();
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" stroke-linejoin=\"round\" "
                       "points=\"{}\"/>\n",
                       st.color, coords);
    if (st.s->size() <= 60)
      for (const auto& [x, y] : *st.s)
        out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"><title>{} step {}: {:.4f}</title></circle>\n",
                           num(sx(x)), num(sy(y)), st.color, st.name, format_tick(x, xstep), y);
    out += "</g>\n";
  }

  // Legend, top right inside the plot.
  const int entries = (train.empty() ? 0 : 1) + (valid.empty() ? 0 : 1);
  const double lw = 92, lh = 8 + 18 * entries, lx = left + pw - lw - 10, ly = top + 10;
  out += "<g class=\"legend\">\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" fill-opacity=\"0.9\" "
                     "stroke=\"#bbbbbb\" stroke-width=\"0.8\"/>\n",
                     num(lx), num(ly), num(lw), num(lh));
  int row = 0;
  for (const auto& st : styles) {
    if (st.s->empty()) continue;
    const double ey = ly + 13 + 18 * row++;
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2.5\"/>",
                       num(lx + 8), num(ey), num(lx + 34), st.color);
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\" font-size=\"12\" fill=\"#222222\">{}</text>\n",
                       num(lx + 42), num(ey), st.name);
  }
  out += "</g>\n</svg>\n";
  return out;
}

// ---------------------------------------------------------------- shared with svg_chart.cpp

namespace svg {
std::string number(double v) { return num(v); }
void open_document(std::string& out, double width, double height) { open_svg(out, width, height); }
double label_width_em(const std::string& text) { return text_width_em(text); }
}  // namespace svg

}  // namespace gf

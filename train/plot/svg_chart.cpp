#include "train/plot/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tensor/check.h"
#include "train/plot/svg_doc.h"
#include "train/plot/svg_plot.h"

namespace gf {
namespace {

using svg::number;

constexpr double kPanelW = 480, kPanelH = 340;  // every panel's box in a figure
constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// ---------------------------------------------------------------- axes

// One axis: data -> pixel along [p0, p1], linear or log10.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // in data units (for log: > 0)
  double p0 = 0, p1 = 1;  // pixels
  std::vector<double> ticks;

  double t(double v) const { return log ? std::log10(v) : v; }
  double px(double v) const {
    const double a = t(lo), b = t(hi);
    return p0 + (t(v) - a) / (b - a) * (p1 - p0);
  }
  bool usable(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

std::string tick_label(double v, const Axis& a) {
  if (a.log) {
    const double e = std::log10(v);
    if (std::abs(e - std::round(e)) < 1e-9 && (std::abs(e) >= 4)) return fmt::format("1e{}", static_cast<int>(std::round(e)));
    return fmt::format("{:g}", v);
  }
  const double step = a.ticks.size() > 1 ? a.ticks[1] - a.ticks[0] : 1.0;
  if (std::abs(step) >= 1e5 || (std::abs(step) < 1e-3 && step != 0)) return fmt::format("{:.2g}", v);
  return format_tick(v, step);
}

// The range of the usable values, widened a little on a linear axis; explicit ticks win.
Axis make_axis(std::vector<double> values, bool log, const std::vector<double>& given_ticks, bool zero_floor) {
  Axis a;
  a.log = log;
  // Only ticks the axis can show (a log axis has no place for 0 or less; NaN has none anywhere).
  std::vector<double> explicit_ticks;
  for (double v : given_ticks)
    if (a.usable(v)) explicit_ticks.push_back(v);
  std::sort(explicit_ticks.begin(), explicit_ticks.end());
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (a.usable(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  for (double v : explicit_ticks)
    if (a.usable(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) lo = log ? 1 : 0, hi = log ? 10 : 1;
  if (log) {
    if (hi <= lo) lo /= 2, hi *= 2;
    std::vector<double> t = explicit_ticks.empty() ? log_ticks(lo, hi) : explicit_ticks;
    a.lo = std::min(lo, t.front());
    a.hi = std::max(hi, t.back());
    if (explicit_ticks.empty()) a.lo = t.front(), a.hi = t.back();
    a.ticks = t;
    return a;
  }
  if (explicit_ticks.empty()) {
    const double pad = 0.04 * (hi - lo);
    lo = zero_floor && lo >= 0 ? std::max(0.0, lo - pad) : lo - pad;
    hi += pad;
    a.ticks = nice_ticks(lo, hi, 6);
    a.lo = a.ticks.front(), a.hi = a.ticks.back();
  } else {
    a.ticks = explicit_ticks;
    const double pad = hi > lo ? 0.04 * (hi - lo) : 0.5;
    a.lo = lo - pad, a.hi = hi + pad;
  }
  return a;
}

// ---------------------------------------------------------------- panels

void panel_title(std::string& out, const std::string& title, double cx, double y) {
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\" fill=\"#222222\">{}</text>\n",
                     number(cx), number(y), xml_escape(title));
}

void check_series(const ChartSeries& s) {
  const bool band = !s.lo.empty() || !s.hi.empty();
  GF_CHECK(s.x.size() == s.y.size() && (!band || (s.lo.size() == s.y.size() && s.hi.size() == s.y.size())),
           "chart series '{}': x has {} values, y {}, lo {}, hi {}; they must agree", s.name, s.x.size(), s.y.size(), s.lo.size(),
           s.hi.size());
}

void draw_chart(std::string& out, const Chart& c, double ox, double oy) {
  constexpr double left = 64, right = 14, top = 30, bottom = 46;
  std::vector<double> xs, ys;
  for (const auto& s : c.series) {
    check_series(s);
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
    ys.insert(ys.end(), s.lo.begin(), s.lo.end());
    ys.insert(ys.end(), s.hi.begin(), s.hi.end());
  }
  bool all_nonneg = true;
  for (double v : ys)
    if (std::isfinite(v) && v < 0) all_nonneg = false;
  Axis ax = make_axis(xs, c.log_x, c.x_ticks, false), ay = make_axis(ys, c.log_y, {}, all_nonneg);
  ax.p0 = ox + left, ax.p1 = ox + kPanelW - right;
  ay.p0 = oy + kPanelH - bottom, ay.p1 = oy + top;
  const double pw = ax.p1 - ax.p0, ph = ay.p0 - ay.p1;

  out += "<g class=\"chart\">\n";
  panel_title(out, c.title, ax.p0 + pw / 2, oy + 18);
  out += "<g stroke=\"#e6e6e6\" stroke-width=\"1\">";
  for (double t : ax.ticks)
    if (ax.usable(t)) out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", number(ax.px(t)), number(ay.p1), number(ay.p0));
  for (double t : ay.ticks)
    if (ay.usable(t)) out += fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\"/>", number(ay.px(t)), number(ax.p0), number(ax.p1));
  out += "</g>\n<g font-size=\"10\" fill=\"#333333\">";
  for (double t : ax.ticks)
    if (ax.usable(t))
      out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", number(ax.px(t)), number(ay.p0 + 14), tick_label(t, ax));
  for (double t : ay.ticks)
    if (ay.usable(t))
      out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\" text-anchor=\"end\">{}</text>", number(ax.p0 - 6), number(ay.px(t)),
                         tick_label(t, ay));
  out += "</g>\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#555555\"/>\n", number(ax.p0),
                     number(ay.p1), number(pw), number(ph));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333333\">{}{}</text>\n",
                     number(ax.p0 + pw / 2), number(oy + kPanelH - 14), xml_escape(c.x_label), c.log_x ? " (log)" : "");
  out += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333333\">{}{}</text>\n",
                     number(ox + 14), number(ay.p1 + ph / 2), xml_escape(c.y_label), c.log_y ? " (log)" : "");

  // Values outside the axis (explicit ticks narrower than the data) are clamped to the frame.
  auto X = [&](double v) { return std::clamp(ax.px(v), ax.p0, ax.p1); };
  auto Y = [&](double v) { return std::clamp(ay.px(v), ay.p1, ay.p0); };
  for (size_t k = 0; k < c.series.size(); ++k) {
    const ChartSeries& s = c.series[k];
    const std::string color = s.color.empty() ? kPalette[k % kPaletteSize] : s.color;
    out += fmt::format("<g class=\"series\" data-name=\"{}\">\n", xml_escape(s.name));
    if (!s.lo.empty()) {  // band: the upper edge forward, the lower edge back
      std::string pts;
      for (size_t i = 0; i < s.x.size(); ++i)
        if (ax.usable(s.x[i]) && ay.usable(s.hi[i]) && ay.usable(s.lo[i])) pts += number(X(s.x[i])) + "," + number(Y(s.hi[i])) + " ";
      for (size_t i = s.x.size(); i-- > 0;)
        if (ax.usable(s.x[i]) && ay.usable(s.hi[i]) && ay.usable(s.lo[i])) pts += number(X(s.x[i])) + "," + number(Y(s.lo[i])) + " ";
      if (!pts.empty()) out += fmt::format("<polygon points=\"{}\" fill=\"{}\" fill-opacity=\"0.15\" stroke=\"none\"/>\n", pts, color);
    }
    // Polyline pieces between gaps.
    std::string pts;
    auto flush = [&] {
      if (!pts.empty())
        out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{} points=\"{}\"/>\n", color,
                           s.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
      pts.clear();
    };
    size_t drawn = 0;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!ax.usable(s.x[i]) || !ay.usable(s.y[i])) {
        flush();
        continue;
      }
      pts += number(X(s.x[i])) + "," + number(Y(s.y[i])) + " ";
      ++drawn;
    }
    flush();
    if (drawn <= 40)
      for (size_t i = 0; i < s.x.size(); ++i)
        if (ax.usable(s.x[i]) && ay.usable(s.y[i]))
          out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.6\" fill=\"{}\"><title>{}: ({:.6g}, {:.6g})</title></circle>\n",
                             number(X(s.x[i])), number(Y(s.y[i])), color, xml_escape(s.name), s.x[i], s.y[i]);
    out += "</g>\n";
  }
  // Legend, inside the plot in the chart's corner.
  double lw = 0;
  for (const auto& s : c.series) lw = std::max(lw, svg::label_width_em(s.name) * 10.5);
  if (!c.series.empty()) {
    lw += 40;
    const bool right = c.legend == Chart::Corner::TopRight || c.legend == Chart::Corner::BottomRight;
    const bool bottom = c.legend == Chart::Corner::BottomLeft || c.legend == Chart::Corner::BottomRight;
    const double lh = 6 + 14 * static_cast<double>(c.series.size());
    const double lx = right ? ax.p1 - 6 - lw : ax.p0 + 6, ly = bottom ? ay.p0 - 6 - lh : ay.p1 + 6;
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#ffffff\" fill-opacity=\"0.85\" stroke=\"#bbbbbb\" stroke-width=\"0.6\"/>\n",
                       number(lx), number(ly), number(lw), number(lh));
    for (size_t k = 0; k < c.series.size(); ++k) {
      const double ey = ly + 10 + 14 * static_cast<double>(k);
      out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2.4\"{4}/>", number(lx + 5), number(ey),
                         number(lx + 27), c.series[k].color.empty() ? kPalette[k % kPaletteSize] : c.series[k].color, c.series[k].dashed ? " stroke-dasharray=\"5 3\"" : "");
      out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\" font-size=\"10.5\" fill=\"#222222\">{}</text>\n", number(lx + 32),
                         number(ey), xml_escape(c.series[k].name));
    }
  }
  out += "</g>\n";
}

// Viridis at five stops, blended linearly.
std::string viridis(double t) {
  static constexpr double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int k = std::min(3, static_cast<int>(t));
  const double f = t - k;
  auto mix = [&](int c) { return static_cast<int>(std::lround(stops[k][c] + (stops[k + 1][c] - stops[k][c]) * f)); };
  return fmt::format("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2));
}

void draw_value_map(std::string& out, const ValueMap& m, double ox, double oy) {
  const size_t R = m.values.size(), C = R ? m.values[0].size() : 0;
  for (size_t i = 0; i < R; ++i)
    GF_CHECK(m.values[i].size() == C, "value map '{}': row {} has {} values but row 0 has {}", m.title, i, m.values[i].size(), C);
  GF_CHECK((m.row_labels.empty() || m.row_labels.size() == R) && (m.col_labels.empty() || m.col_labels.size() == C),
           "value map '{}': {} row labels for {} rows, {} column labels for {} columns", m.title, m.row_labels.size(), R,
           m.col_labels.size(), C);
  auto row_label = [&](size_t i) { return m.row_labels.empty() ? std::to_string(i) : m.row_labels[i]; };
  auto col_label = [&](size_t j) { return m.col_labels.empty() ? std::to_string(j) : m.col_labels[j]; };
  double label_w = 0;
  for (size_t i = 0; i < R; ++i) label_w = std::min(150.0, std::max(label_w, svg::label_width_em(row_label(i)) * 9.5));
  // right: the colour bar, its labels ("1.03e+05" is ~45 px) and the rotated caption beyond them.
  const double left = 22 + label_w, right = 90, top = 30, bottom = 46;
  const double gw = kPanelW - left - right, gh = kPanelH - top - bottom;
  const double cw = C ? gw / static_cast<double>(C) : gw, ch = R ? gh / static_cast<double>(R) : gh;

  auto key = [&](double v) { return m.log_scale ? (v > 0 ? std::log10(v) : NAN) : v; };
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& row : m.values)
    for (double v : row)
      if (double k = key(v); std::isfinite(k)) lo = std::min(lo, k), hi = std::max(hi, k);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (std::isfinite(m.lo)) lo = key(m.lo);  // a fixed range: values outside it take the end colours
  if (std::isfinite(m.hi)) hi = key(m.hi);
  if (hi == lo) hi = lo + 1;

  out += "<g class=\"value-map\">\n";
  panel_title(out, m.title, ox + left + gw / 2, oy + 18);
  for (size_t i = 0; i < R; ++i)
    for (size_t j = 0; j < C; ++j) {
      const double v = m.values[i][j], k = key(v);
      const std::string fill = std::isfinite(k) ? viridis((k - lo) / (hi - lo)) : std::string("#d9d9d9");
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} / {}: {:.4g}</title></rect>\n",
                         number(ox + left + cw * j), number(oy + top + ch * i), number(cw + 0.3), number(ch + 0.3), fill,
                         xml_escape(row_label(i)), xml_escape(col_label(j)), v);
    }
  // Row labels where they fit (at least 8 px apart), column labels at most ~10.
  const size_t row_every = std::max<size_t>(1, static_cast<size_t>(std::ceil(9.0 / std::max(ch, 1e-9))));
  out += "<g font-size=\"9.5\" fill=\"#333333\">";
  for (size_t i = 0; i < R; i += row_every)
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\" text-anchor=\"end\">{}</text>", number(ox + left - 4),
                       number(oy + top + ch * (i + 0.5)), xml_escape(row_label(i)));
  const size_t col_every = std::max<size_t>(1, (C + 9) / 10);
  for (size_t j = 0; j < C; j += col_every)
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", number(ox + left + cw * (j + 0.5)),
                       number(oy + top + gh + 13), xml_escape(col_label(j)));
  out += "</g>\n";
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333333\">{}</text>\n", number(ox + left + gw / 2),
                     number(oy + kPanelH - 14), xml_escape(m.x_label));
  if (!m.y_label.empty())
    out += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333333\">{}</text>\n",
                       number(ox + 10), number(oy + top + gh / 2), xml_escape(m.y_label));
  // Colour bar: 5 labelled steps.
  const double bx = ox + left + gw + 10, bw = 12;
  constexpr int kSteps = 40;
  for (int s = 0; s < kSteps; ++s)
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", number(bx), number(oy + top + gh * (1 - (s + 1.0) / kSteps)),
                       number(bw), number(gh / kSteps + 0.3), viridis((s + 0.5) / kSteps));
  out += "\n<g font-size=\"9\" fill=\"#333333\">";
  for (int s = 0; s <= 4; ++s) {
    const double k = lo + (hi - lo) * s / 4.0;
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.35em\">{:.3g}</text>", number(bx + bw + 3), number(oy + top + gh * (1 - s / 4.0)),
                       m.log_scale ? std::pow(10.0, k) : k);
  }
  out += "</g>\n";
  if (!m.value_label.empty())
    out += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\" font-size=\"10\" fill=\"#333333\">{}{}</text>\n",
                       number(ox + kPanelW - 6), number(oy + top + gh / 2), xml_escape(m.value_label), m.log_scale ? " (log)" : "");
  out += "</g>\n";
}

}  // namespace

std::vector<double> log_ticks(double lo, double hi) {
  GF_CHECK(lo > 0 && hi > 0 && std::isfinite(lo) && std::isfinite(hi), "log_ticks: bounds must be positive and finite, got [{}, {}]", lo,
           hi);
  if (hi < lo) std::swap(lo, hi);
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = std::max(e0 + 1, static_cast<int>(std::ceil(std::log10(hi) - 1e-9)));
  std::vector<double> t;
  if (e1 - e0 < 3) {  // 1, 2, 5 per decade, then only from the last tick <= lo to the first >= hi
    for (int e = e0; e < e1; ++e)
      for (double m : {1.0, 2.0, 5.0}) t.push_back(m * std::pow(10.0, e));
    t.push_back(std::pow(10.0, e1));
    size_t first = 0, last = t.size() - 1;
    while (first + 1 < t.size() && t[first + 1] <= lo * (1 + 1e-9)) ++first;
    while (last > first + 1 && t[last - 1] >= hi * (1 - 1e-9)) --last;
    return {t.begin() + static_cast<std::ptrdiff_t>(first), t.begin() + static_cast<std::ptrdiff_t>(last) + 1};
  }
  const int every = (e1 - e0 + 7) / 8;  // at most ~8 labelled decades
  int e = e0;
  for (; e < e1; e += every) t.push_back(std::pow(10.0, e));
  t.push_back(std::pow(10.0, e));
  return t;
}

std::string figure_svg(const std::string& title, const std::vector<Panel>& panels, int columns) {
  GF_CHECK(columns >= 1, "figure_svg: columns must be at least 1, got {}", columns);
  const int n = static_cast<int>(panels.size());
  const int cols = std::max(1, std::min(columns, n)), rows = (n + cols - 1) / cols;
  const double head = title.empty() ? 8 : 36;
  const double W = cols * kPanelW + 16, H = head + std::max(1, rows) * kPanelH + 8;
  std::string out;
  svg::open_document(out, W, H);
  if (!title.empty())
    out += fmt::format("<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\" fill=\"#111111\">{}</text>\n",
                       number(W / 2), xml_escape(title));
  for (int i = 0; i < n; ++i) {
    const double ox = 8 + (i % cols) * kPanelW, oy = head + (i / cols) * kPanelH;
    if (const Chart* c = std::get_if<Chart>(&panels[i]))
      draw_chart(out, *c, ox, oy);
    else
      draw_value_map(out, std::get<ValueMap>(panels[i]), ox, oy);
  }
  out += "</svg>\n";
  return out;
}

std::string chart_svg(const Chart& chart) { return figure_svg("", {chart}, 1); }

}  // namespace gf

// train/svg_chart: log-axis ticks, the errors figure_svg promises, and output that stays well-formed
// (and free of NaN/Inf coordinates) whatever the series hold.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/plot/svg_chart.h"
#include "xml_check.h"

using namespace gf;
using gf::testing::count_of;
using gf::testing::xml_problem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Every attribute value that is not a name: coordinates, sizes, points, transforms. Returns the
// first that holds "nan" or "inf", or "".
std::string bad_coordinate(const std::string& svg) {
  static const std::regex attr(R"re(\s(x|y|x1|x2|y1|y2|cx|cy|r|width|height|points|transform|d|viewBox)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), attr); it != std::sregex_iterator(); ++it) {
    std::string v = (*it)[2];
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (v.find("nan") != std::string::npos || v.find("inf") != std::string::npos) return (*it)[0];
  }
  return "";
}

// The text of every tick label of a chart's x axis: <text ... text-anchor="middle">LABEL</text>
// inside the first font-size="10" group.
std::vector<std::string> tick_texts(const std::string& svg) {
  const size_t g = svg.find("<g font-size=\"10\"");
  const size_t end = svg.find("</g>", g);
  std::vector<std::string> out;
  static const std::regex text(R"re(<text [^>]*text-anchor="middle">([^<]*)</text>)re");
  const std::string part = svg.substr(g, end - g);
  for (auto it = std::sregex_iterator(part.begin(), part.end(), text); it != std::sregex_iterator(); ++it) out.push_back((*it)[1]);
  return out;
}

ChartSeries series(std::string name, std::vector<double> x, std::vector<double> y) {
  ChartSeries s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

Chart chart(bool log_x, bool log_y, std::vector<ChartSeries> s) {
  Chart c;
  c.title = "t";
  c.x_label = "x";
  c.y_label = "y";
  c.log_x = log_x;
  c.log_y = log_y;
  c.series = std::move(s);
  return c;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

void check_ticks(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(near(got[i], want[i]));
}

}  // namespace

// ---------------------------------------------------------------- log_ticks

TEST_CASE("log_ticks: 1-2-5 within a decade or two, trimmed to bracket the range") {
  check_ticks(log_ticks(1, 10), {1, 2, 5, 10});
  check_ticks(log_ticks(3, 40), {2, 5, 10, 20, 50});
  check_ticks(log_ticks(10, 1000), {10, 20, 50, 100, 200, 500, 1000});
  check_ticks(log_ticks(0.02, 0.3), {0.02, 0.05, 0.1, 0.2, 0.5});
}

TEST_CASE("log_ticks: whole decades from three decades on, at most ~9 ticks") {
  check_ticks(log_ticks(1, 1000), {1, 10, 100, 1000});
  check_ticks(log_ticks(8, 512), {1, 10, 100, 1000});
  const std::vector<double> wide = log_ticks(1e-6, 1e3);  // 9 decades: every other one
  CHECK(wide.size() <= 9);
  CHECK(wide.front() <= 1e-6);
  CHECK(wide.back() >= 1e3);
  for (size_t i = 1; i < wide.size(); ++i) CHECK(near(wide[i] / wide[i - 1], 100));
}

TEST_CASE("log_ticks: reversed and equal bounds, and invalid ones") {
  check_ticks(log_ticks(100, 1), log_ticks(1, 100));
  const std::vector<double> one = log_ticks(5, 5);
  REQUIRE(one.size() >= 2);
  CHECK(one.front() <= 5);
  CHECK(one.back() >= 5);
  CHECK_THROWS_AS(log_ticks(0, 10), std::invalid_argument);
  CHECK_THROWS_AS(log_ticks(-1, 10), std::invalid_argument);
  CHECK_THROWS_AS(log_ticks(1, kInf), std::invalid_argument);
  CHECK_THROWS_AS(log_ticks(kNaN, 10), std::invalid_argument);
}

// ---------------------------------------------------------------- errors

TEST_CASE("figure_svg: columns < 1 and ragged input are errors") {
  const Chart ok = chart(false, false, {series("a", {1, 2, 3}, {1, 4, 9})});
  CHECK_NOTHROW(figure_svg("f", {ok}, 1));
  CHECK_THROWS_AS(figure_svg("f", {ok}, 0), std::invalid_argument);
  CHECK_THROWS_AS(figure_svg("f", {ok}, -2), std::invalid_argument);

  CHECK_THROWS_AS(figure_svg("f", {chart(false, false, {series("a", {1, 2, 3}, {1, 4})})}), std::invalid_argument);
  ChartSeries band = series("b", {1, 2, 3}, {1, 2, 3});
  band.lo = {0, 1, 2};
  band.hi = {2, 3};  // one short
  CHECK_THROWS_AS(figure_svg("f", {chart(false, false, {band})}), std::invalid_argument);
  band.hi = {2, 3, 4};
  CHECK_NOTHROW(figure_svg("f", {chart(false, false, {band})}));
  band.hi.clear();  // lo without hi
  CHECK_THROWS_AS(figure_svg("f", {chart(false, false, {band})}), std::invalid_argument);

  ValueMap m;
  m.values = {{1, 2, 3}, {4, 5}};
  CHECK_THROWS_AS(figure_svg("f", {m}), std::invalid_argument);
  m.values = {{1, 2, 3}, {4, 5, 6}};
  CHECK_NOTHROW(figure_svg("f", {m}));
  m.row_labels = {"only one"};
  CHECK_THROWS_AS(figure_svg("f", {m}), std::invalid_argument);
  m.row_labels = {"a", "b"};
  m.col_labels = {"x", "y"};
  CHECK_THROWS_AS(figure_svg("f", {m}), std::invalid_argument);
}

// ---------------------------------------------------------------- well-formed output

TEST_CASE("figure_svg: a grid of charts and value maps is one well-formed document") {
  ChartSeries banded = series("with band", {1, 2, 4, 8}, {1, 2, 3, 4});
  banded.lo = {0.5, 1.5, 2.5, 3.5};
  banded.hi = {1.5, 2.5, 3.5, 4.5};
  ChartSeries dashed = series("dashed & <escaped>", {1, 2, 4, 8}, {4, 3, 2, 1});
  dashed.dashed = true;
  ValueMap m;
  m.title = "map";
  m.values = {{1, 2}, {3, 4}, {5, 6}};
  m.row_labels = {"r0", "r1", "r2"};
  const std::string svg = figure_svg("title <&>", {chart(false, false, {banded, dashed}), m, chart(true, true, {banded})}, 2);
  CHECK(xml_problem(svg) == "");
  CHECK(bad_coordinate(svg) == "");
  CHECK(count_of(svg, "class=\"chart\"") == 2);
  CHECK(count_of(svg, "class=\"value-map\"") == 1);
  CHECK(count_of(svg, "<polygon") == 2);                    // one band per chart that has one
  CHECK(count_of(svg, "stroke-dasharray=\"6 4\"") == 1);    // the dashed series
  CHECK(svg.find("dashed &amp; &lt;escaped&gt;") != std::string::npos);
  CHECK(svg.find("width=\"976\"") != std::string::npos);   // two columns of 480 + margins
}

TEST_CASE("figure_svg: NaN, Inf and non-positive values on log axes are gaps, never NaN coordinates") {
  const std::vector<double> x = {1, 2, 3, 4, 5, 6};
  const std::vector<double> y = {1, kNaN, 3, kInf, -1, 0};
  ChartSeries s = series("gappy", x, y);
  ChartSeries band = series("band", x, {1, 2, 3, 4, 5, 6});
  band.lo = {kNaN, 1, -kInf, 2, 0, 3};
  band.hi = {2, kInf, 4, 5, 6, 7};
  for (bool log_x : {false, true})
    for (bool log_y : {false, true}) {
      CAPTURE(log_x);
      CAPTURE(log_y);
      const std::string svg = chart_svg(chart(log_x, log_y, {s, band}));
      CHECK(xml_problem(svg) == "");
      CHECK(bad_coordinate(svg) == "");
      CHECK(count_of(svg, "<polyline") >= 2);  // the gaps split the line
    }
  // Nothing usable at all: every value NaN, or every value <= 0 on a log axis.
  for (const auto& ys : {std::vector<double>{kNaN, kNaN}, std::vector<double>{0, -3}}) {
    const std::string svg = chart_svg(chart(true, true, {series("none", {0, -1}, ys)}));
    CHECK(xml_problem(svg) == "");
    CHECK(bad_coordinate(svg) == "");
    CHECK(count_of(svg, "<polyline") == 0);
  }
  // A constant series on linear axes (a zero-width range).
  const std::string flat = chart_svg(chart(false, false, {series("flat", {2, 2, 2}, {5, 5, 5})}));
  CHECK(xml_problem(flat) == "");
  CHECK(bad_coordinate(flat) == "");
}

TEST_CASE("figure_svg: value maps with NaN, Inf and non-positive cells on a log scale") {
  ValueMap m;
  m.title = "m";
  m.values = {{kNaN, 1, 10}, {kInf, -1, 0}};
  m.log_scale = true;
  std::string svg = figure_svg("", {m});
  CHECK(xml_problem(svg) == "");
  CHECK(bad_coordinate(svg) == "");
  CHECK(count_of(svg, "fill=\"#d9d9d9\"") == 4);  // NaN, Inf, -1 and 0 are grey
  m.values = {{kNaN, kNaN}, {0, -1}};            // nothing colourable
  svg = figure_svg("", {m});
  CHECK(xml_problem(svg) == "");
  CHECK(bad_coordinate(svg) == "");
  CHECK(count_of(svg, "fill=\"#d9d9d9\"") == 4);
}

TEST_CASE("figure_svg: explicit x ticks are the ticks drawn") {
  Chart c = chart(true, false, {series("s", {8, 16, 32, 64, 128}, {1, 2, 3, 4, 5})});
  c.x_ticks = {8, 16, 32, 64, 128};
  std::vector<std::string> labels = tick_texts(chart_svg(c));
  CHECK(labels == std::vector<std::string>{"8", "16", "32", "64", "128"});
  // Without them a log axis gets powers of ten.
  c.x_ticks.clear();
  labels = tick_texts(chart_svg(c));
  CHECK(std::find(labels.begin(), labels.end(), "16") == labels.end());
  CHECK(std::find(labels.begin(), labels.end(), "10") != labels.end());
  // Linear axis: exactly the given depths.
  Chart d = chart(false, false, {series("s", {2, 4, 6, 12}, {1, 2, 3, 4})});
  d.x_ticks = {2, 4, 6, 12};
  CHECK(tick_texts(chart_svg(d)) == std::vector<std::string>{"2", "4", "6", "12"});
}

TEST_CASE("figure_svg: explicit ticks a log axis cannot show are left out, not drawn at NaN") {
  Chart c = chart(true, false, {series("s", {1, 10, 100}, {1, 2, 3})});
  c.x_ticks = {0, 1, 10, 100};  // 0 has no place on a log axis
  const std::string svg = chart_svg(c);
  CHECK(xml_problem(svg) == "");
  CHECK(bad_coordinate(svg) == "");
  CHECK(tick_texts(svg) == std::vector<std::string>{"1", "10", "100"});
}

TEST_CASE("chart_svg: the legend sits 6 px inside the corner the chart names (top left unless told)") {
  // The plot frame, <rect ... fill="none" stroke="#555555"/>, and the legend box, the rect with fill-opacity 0.85.
  auto rect = [](const std::string& svg, const std::string& marker) {
    const size_t at = svg.find(marker);
    REQUIRE(at != std::string::npos);
    const std::string tag = svg.substr(svg.rfind("<rect", at), svg.find("/>", at) - svg.rfind("<rect", at));
    std::vector<double> v;
    for (const char* name : {"x", "y", "width", "height"}) {
      std::smatch m;
      REQUIRE(std::regex_search(tag, m, std::regex(std::string(" ") + name + "=\"([^\"]+)\"")));
      v.push_back(std::stod(m[1]));
    }
    return v;  // x, y, width, height
  };
  Chart c = chart(false, false, {series("a", {1, 2, 3}, {1, 2, 3}), series("b", {1, 2, 3}, {3, 2, 1})});
  for (auto corner : {Chart::Corner::TopLeft, Chart::Corner::TopRight, Chart::Corner::BottomLeft, Chart::Corner::BottomRight}) {
    c.legend = corner;
    const std::string svg = chart_svg(c);
    CHECK(xml_problem(svg) == "");
    const std::vector<double> f = rect(svg, "stroke=\"#555555\""), l = rect(svg, "fill-opacity=\"0.85\"");
    const bool right = corner == Chart::Corner::TopRight || corner == Chart::Corner::BottomRight;
    const bool bottom = corner == Chart::Corner::BottomLeft || corner == Chart::Corner::BottomRight;
    CHECK((right ? l[0] + l[2] : l[0]) == doctest::Approx(right ? f[0] + f[2] - 6 : f[0] + 6));
    CHECK((bottom ? l[1] + l[3] : l[1]) == doctest::Approx(bottom ? f[1] + f[3] - 6 : f[1] + 6));
  }
  CHECK(Chart{}.legend == Chart::Corner::TopLeft);
}

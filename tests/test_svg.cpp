#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/plot/svg_plot.h"
#include "xml_check.h"

using namespace gf;
using gf::testing::count_of;
using gf::testing::xml_problem;

namespace {

// Numbers of x,y pairs in the first polyline of the given series group.
size_t polyline_points(const std::string& svg, const std::string& series) {
  const size_t g = svg.find("class=\"series-" + series + "\"");
  if (g == std::string::npos) return 0;
  const size_t p = svg.find("points=\"", g);
  const size_t end = svg.find('"', p + 8);
  return count_of(svg.substr(p + 8, end - p - 8), ",");
}

void save(const std::string& name, const std::string& svg) {
  const std::filesystem::path dir = std::filesystem::path(GRADFLOW_BINARY_DIR) / "svg_samples";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name) << svg;
}

std::vector<std::vector<float>> soft_diagonal(int T, int S) {
  std::vector<std::vector<float>> w(T, std::vector<float>(S));
  for (int i = 0; i < T; ++i) {
    double sum = 0;
    for (int j = 0; j < S; ++j) sum += w[i][j] = static_cast<float>(std::exp(-std::abs(i * (S - 1.0) / std::max(T - 1, 1) - j)));
    for (int j = 0; j < S; ++j) w[i][j] = static_cast<float>(w[i][j] / sum);
  }
  return w;
}

}  // namespace

// ---------------------------------------------------------------- escaping and ticks

TEST_CASE("xml_escape") {
  CHECK(xml_escape("<b>&\"x\"") == "&lt;b&gt;&amp;&quot;x&quot;");
  CHECK(xml_escape("it's") == "it&apos;s");
  CHECK(xml_escape("안녕 ▁세계") == "안녕 ▁세계");              // UTF-8 passes through
  CHECK(xml_escape(std::string("a\x01" "b\x1f" "c")) == "abc");  // control characters XML forbids
  CHECK(xml_escape("a\xff" "b") == "a\uFFFD" "b");                // malformed UTF-8 -> U+FFFD
  CHECK(xml_escape("\xed\xa0\x80") == "\uFFFD\uFFFD\uFFFD");      // an encoded surrogate is malformed too
}

TEST_CASE("the well-formedness checker itself rejects bad XML") {
  CHECK(xml_problem("<svg a=\"1\"><g></g></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><g></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><text>a & b</text></svg>").empty());
  CHECK_FALSE(xml_problem("<svg><text a=\"<\"/></svg>").empty());
  CHECK_FALSE(xml_problem("<svg/><svg/>").empty());
}

TEST_CASE("nice_ticks") {
  CHECK(nice_ticks(0, 10, 6) == std::vector<double>{0, 2, 4, 6, 8, 10});
  // raw step (2.7 - 0.3) / 5 = 0.48 -> 0.5; covering [0.3, 2.7] -> 0 .. 3
  const auto t = nice_ticks(0.3, 2.7, 6);
  REQUIRE(t.size() == 7);
  CHECK(t.front() == 0.0);
  CHECK(t.back() == doctest::Approx(3.0));
  // steps: (98765 - 1234) / 6 = 16255 -> 20000
  CHECK(nice_ticks(1234, 98765, 7) == std::vector<double>{0, 20000, 40000, 60000, 80000, 100000});
  // 2.5 steps: (10 - 0) / 4 = 2.5
  CHECK(nice_ticks(0, 10, 5) == std::vector<double>{0, 2.5, 5, 7.5, 10});
  // a degenerate range is widened: 5 -> [4.5, 5.5], step 0.2 -> 4.4 .. 5.6
  const auto d = nice_ticks(5, 5, 6);
  CHECK(d.front() == doctest::Approx(4.4));
  CHECK(d.back() == doctest::Approx(5.6));
  CHECK(nice_ticks(0, 0, 6) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  // negative ranges, and 0 is exactly 0 (no "-0" or 1e-17)
  const auto n = nice_ticks(-3, 7, 6);
  CHECK(n.front() == -4);
  CHECK(n.back() == 8);
  CHECK(std::count(n.begin(), n.end(), 0.0) == 1);
  CHECK_THROWS_AS(nice_ticks(0, std::numeric_limits<double>::infinity()), std::invalid_argument);
  CHECK_THROWS_AS(nice_ticks(std::nan(""), 1), std::invalid_argument);
}

TEST_CASE("nice_ticks always covers the range with evenly spaced ticks") {
  const double ranges[][2] = {{0.0123, 0.0456}, {1, 1000000}, {-5e-7, 3e-7}, {2.31, 2.34}, {7, 3}, {0, 1e-12}};
  for (const auto& r : ranges) {
    CAPTURE(r[0]);
    CAPTURE(r[1]);
    const auto t = nice_ticks(r[0], r[1], 6);
    REQUIRE(t.size() >= 2);
    CHECK(t.size() <= 12);
    CHECK(t.front() <= std::min(r[0], r[1]));
    CHECK(t.back() >= std::max(r[0], r[1]));
    const double step = t[1] - t[0];
    for (size_t k = 1; k < t.size(); ++k) CHECK(t[k] - t[k - 1] == doctest::Approx(step));
  }
}

TEST_CASE("format_tick uses as many decimals as the step needs") {
  CHECK(format_tick(0.25, 0.25) == "0.25");
  CHECK(format_tick(1000, 500) == "1000");
  CHECK(format_tick(7.5, 2.5) == "7.5");
  CHECK(format_tick(0.1 + 0.2, 0.1) == "0.3");
  CHECK(format_tick(-0.0, 0.5) == "0.0");
  CHECK(format_tick(3, 1) == "3");
}

// ---------------------------------------------------------------- heatmaps

TEST_CASE("attention heatmap: structure, cells, escaping, Korean labels") {
  const std::vector<std::string> src = {"▁안녕", "하세요", "<b>&\"x\"", "</s>"};
  const std::vector<std::string> tgt = {"▁hello", "▁there", "</s>"};
  auto w = soft_diagonal(3, 4);
  w[0][0] = 1.0f;  // -> darkest blue
  w[2][0] = 0.0f;  // -> white
  w[1][1] = 7.0f;  // out of range: clamped
  const std::string svg = attention_heatmap_svg(w, tgt, src, "layer 1 / head 2 & co");
  save("heatmap.svg", svg);
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "class=\"cell\"") == 3 * 4);
  CHECK(count_of(svg, "</rect>") == 3 * 4);  // every cell carries a tooltip
  CHECK(svg.find("&lt;b&gt;&amp;&quot;x&quot;") != std::string::npos);
  CHECK(svg.find("<b>") == std::string::npos);
  CHECK(svg.find("layer 1 / head 2 &amp; co") != std::string::npos);
  CHECK(svg.find("▁안녕") != std::string::npos);
  CHECK(svg.find("Noto Sans CJK KR") != std::string::npos);
  CHECK(svg.find("fill=\"#08306b\"><title>▁hello → ▁안녕: 1.000</title>") != std::string::npos);
  CHECK(svg.find("fill=\"#ffffff\"><title>&lt;/s&gt; → ▁안녕: 0.000</title>") != std::string::npos);
  CHECK(svg.find("fill=\"#08306b\"><title>▁there → 하세요: 7.000</title>") != std::string::npos);
  CHECK(svg.find("rotate(-45)") != std::string::npos);
  CHECK(count_of(svg, "class=\"colorbar\"") == 1);
  CHECK(svg.find("url(#gf-blues)") != std::string::npos);
}

TEST_CASE("attention heatmap: NaN cells, default labels, long labels") {
  auto w = soft_diagonal(2, 3);
  w[0][1] = std::numeric_limits<float>::quiet_NaN();
  const std::string long_token(60, 'x');
  const std::string svg = attention_heatmap_svg(w, {}, {"a", long_token, "c"}, "");
  CHECK(xml_problem(svg) == "");
  CHECK(svg.find("<title>0 → " + long_token + ": nan</title>") != std::string::npos);
  CHECK(svg.find(">1</text>") != std::string::npos);  // row label defaults to the index
  CHECK(svg.find("x\u2026</text>") != std::string::npos);  // shortened on the axis
}

TEST_CASE("attention heatmap: shape errors and empty input") {
  CHECK_THROWS_WITH_AS(attention_heatmap_svg({{0.1f, 0.2f}, {0.3f}}, {}, {}, "t"),
                       doctest::Contains("row 1 has 1 weights but row 0 has 2"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attention_heatmap_svg(soft_diagonal(2, 2), {"a"}, {}, "t"),
                       doctest::Contains("1 row labels for 2 rows"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(attention_heatmap_svg(soft_diagonal(2, 2), {}, {"a", "b", "c"}, "t"),
                       doctest::Contains("3 column labels for 2 columns"), std::invalid_argument);
  const std::string empty = attention_heatmap_svg({}, {}, {}, "nothing");
  save("heatmap_empty.svg", empty);
  CHECK(xml_problem(empty) == "");
  CHECK(count_of(empty, "class=\"cell\"") == 0);
  CHECK(empty.find("(no attention weights)") != std::string::npos);
  CHECK(count_of(empty, "class=\"colorbar\"") == 0);
}

TEST_CASE("attention grid: panels, one colour bar, errors") {
  std::vector<Heatmap> maps;
  const std::vector<std::string> src = {"▁나는", "▁학생", "이다", "."}, tgt = {"▁I", "▁am", "▁a", "▁student", "."};
  for (int layer = 0; layer < 2; ++layer)
    for (int head = 0; head < 2; ++head)
      maps.push_back({"layer " + std::to_string(layer + 1) + " head " + std::to_string(head + 1),
                      soft_diagonal(5, 4), tgt, src});
  maps.push_back({"average", soft_diagonal(5, 4), tgt, src});
  const std::string svg = attention_grid_svg(maps, 2);
  save("grid.svg", svg);
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "class=\"cell\"") == 5 * 5 * 4);
  CHECK(count_of(svg, "class=\"heatmap\"") == 5);
  CHECK(count_of(svg, "class=\"colorbar\"") == 1);
  CHECK(count_of(svg, "id=\"gf-blues\"") == 1);
  CHECK(svg.find("layer 2 head 1") != std::string::npos);

  CHECK_THROWS_WITH_AS(attention_grid_svg(maps, 0), doctest::Contains("columns must be >= 1"), std::invalid_argument);
  maps[1].row_labels.pop_back();
  CHECK_THROWS_WITH_AS(attention_grid_svg(maps, 2), doctest::Contains("'layer 1 head 2': 4 row labels for 5 rows"),
                       std::invalid_argument);
  const std::string none = attention_grid_svg({}, 3);
  CHECK(xml_problem(none) == "");
  CHECK(none.find("(no attention maps)") != std::string::npos);
}

// ---------------------------------------------------------------- loss curves

TEST_CASE("loss curve: two series with legend") {
  std::vector<std::pair<double, double>> train, valid;
  for (int s = 0; s <= 3000; s += 10) train.emplace_back(s, 8.0 * std::exp(-s / 700.0) + 1.5 + 0.2 * std::sin(s / 37.0));
  for (int s = 0; s <= 3000; s += 500) valid.emplace_back(s, 8.0 * std::exp(-s / 800.0) + 1.9);
  const std::string svg = loss_curve_svg(train, valid, "transformer <ko→en> loss");
  save("loss.svg", svg);
  CHECK(xml_problem(svg) == "");
  CHECK(count_of(svg, "<polyline") == 2);
  CHECK(polyline_points(svg, "train") == train.size());
  CHECK(polyline_points(svg, "valid") == valid.size());
  CHECK(count_of(svg, "<circle") == valid.size());  // train has too many points for dots
  CHECK(svg.find(">train</text>") != std::string::npos);
  CHECK(svg.find(">valid</text>") != std::string::npos);
  CHECK(svg.find("transformer &lt;ko→en&gt; loss") != std::string::npos);
  // x ticks 0, 500, ... 3000
  CHECK(svg.find(">3000</text>") != std::string::npos);
  CHECK(svg.find(">500</text>") != std::string::npos);
}

TEST_CASE("loss curve: empty valid, NaN/inf skipped, single points, no data") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::string a = loss_curve_svg({{0, 5}, {1, nan}, {2, 4}, {inf, 3}, {3, -inf}, {4, 2}}, {}, "t");
  CHECK(xml_problem(a) == "");
  CHECK(count_of(a, "<polyline") == 1);
  CHECK(polyline_points(a, "train") == 3);
  CHECK(a.find(">valid</text>") == std::string::npos);
  CHECK(a.find("nan") == std::string::npos);
  CHECK(a.find("inf") == std::string::npos);

  const std::string one = loss_curve_svg({{100, 2.5}}, {{100, 2.7}}, "single");
  save("loss_single.svg", one);
  CHECK(xml_problem(one) == "");
  CHECK(count_of(one, "<circle") == 2);

  const std::string none = loss_curve_svg({}, {{1, nan}}, "empty");
  save("loss_empty.svg", none);
  CHECK(xml_problem(none) == "");
  CHECK(count_of(none, "<polyline") == 0);
  CHECK(none.find("(no data)") != std::string::npos);
}

TEST_CASE("loss curve: long runs are thinned to the pixel grid but keep spikes") {
  std::vector<std::pair<double, double>> train;
  for (int s = 0; s < 200000; ++s) train.emplace_back(s, 3.0 + 0.001 * (s % 7));
  train[123456].second = 50.0;  // a spike must survive thinning
  const std::string svg = loss_curve_svg(train, {}, "long");
  save("loss_long.svg", svg);
  CHECK(xml_problem(svg) == "");
  CHECK(polyline_points(svg, "train") < 4 * 760);
  CHECK(svg.size() < 200000);
  // the spike survives: some vertex lies far above the flat part at loss ~3 (y ~ 400 px)
  const size_t p = svg.find("points=\"", svg.find("series-train"));
  std::string coords = svg.substr(p + 8, svg.find('"', p + 8) - p - 8);
  double min_y = 1e9;
  for (size_t c = coords.find(','); c != std::string::npos; c = coords.find(',', c + 1))
    min_y = std::min(min_y, std::stod(coords.substr(c + 1)));
  CHECK(min_y < 150);
}

TEST_CASE("realistic sizes: a 22 x 27 heatmap and a 3-column grid of 9 panels") {
  const std::vector<std::string> ko = {"▁그", "는", "▁어제", "▁서울", "에서", "▁열린", "▁국제", "▁회의", "에",
                                       "▁참석", "했다", ".", "▁회의", "는", "▁3", "일", "▁동안", "▁계속",
                                       "되었", "으며", ",", "▁많은", "▁사람", "들이", "▁왔다", ".", "</s>"};
  const std::vector<std::string> en = {"▁He", "▁attended", "▁an", "▁international", "▁conference", "▁held",
                                       "▁in", "▁Seoul", "▁yesterday", ".", "▁The", "▁meeting", "▁lasted",
                                       "▁three", "▁days", ",", "▁and", "▁many", "▁people", "▁came", ".", "</s>"};
  const std::string one = attention_heatmap_svg(soft_diagonal(22, 27), en, ko, "decoder layer 3, cross-attention, mean of 8 heads");
  save("heatmap_large.svg", one);
  CHECK(xml_problem(one) == "");
  CHECK(count_of(one, "class=\"cell\"") == 22 * 27);

  std::vector<Heatmap> maps;
  for (int h = 0; h < 8; ++h) maps.push_back({"layer 6 head " + std::to_string(h + 1), soft_diagonal(22, 27), en, ko});
  maps.push_back({"layer 6 average", soft_diagonal(22, 27), en, ko});
  const std::string grid = attention_grid_svg(maps, 3);
  save("grid_large.svg", grid);
  CHECK(xml_problem(grid) == "");
  CHECK(count_of(grid, "class=\"cell\"") == 9 * 22 * 27);
}

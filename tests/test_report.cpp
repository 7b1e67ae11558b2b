// The HTML report's pieces without a browser (tests/test_report_browser.cpp opens the pages): the
// page's JSON writer and assembly, grad_stats.jsonl's reader, `gradflow report` on a trained run
// (the data's shapes, rows that sum to 1) and on bad input, and the lab pages' data. The explorer's
// maps themselves (train/inspect/) are tested in tests/test_inspect.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "app/lab_page.h"
#include "app/report_page.h"
#include "app/run_report.h"
#include "optim/adam.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "tests/toy_lab.h"
#include "train/loop/trainer.h"

#include "tiny_run.h"

using namespace gf;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kBinary = GRADFLOW_BINARY_DIR "/gradflow";

// The data block of a page.
json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">\n";
  const size_t a = html.find(open), b = html.find("\n</script>", a);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  return json::parse(html.substr(a + open.size(), b - a - open.size()));
}

double row_sum(const json& row) {
  double s = 0;
  for (const auto& v : row) s += v.get<double>();
  return s;
}

}  // namespace

TEST_CASE("readable_json: nested structures indented, arrays of scalars on one line, nothing that could end the script block") {
  const json j = {{"a", {1, 2.5, nullptr}},
                  {"b", {{"c", "x</script><script>alert(1)"}, {"e", "<!--<SCRIPT>"}, {"f", "<bos> a <eos>"}}},
                  {"d", json::array({json::array({1, 2}), json::array({3})})}};
  const std::string text = app::readable_json(j);
  for (const char* bad : {"</", "<!", "<script", "<SCRIPT"}) CHECK(text.find(bad) == std::string::npos);
  CHECK(text.find("\"<bos> a <eos>\"") != std::string::npos);  // what cannot harm stays readable
  CHECK(text.find("[1,2.5,null]") != std::string::npos);
  CHECK(text.find("\n  [1,2]") != std::string::npos);  // a row of a matrix on its own line
  CHECK(json::parse(text) == j);                         // the same data back
  CHECK(json::parse(app::readable_json(json::object())) == json::object());
}

TEST_CASE("round_significant keeps 4 significant digits and leaves 0 and non-finite values alone") {
  CHECK(app::round_significant(0.000123456) == doctest::Approx(0.0001235).epsilon(1e-12));
  CHECK(app::round_significant(123456.0) == 123500.0);
  CHECK(app::round_significant(-2.71828, 3) == -2.72);
  CHECK(app::round_significant(0.0) == 0.0);
  CHECK(std::isnan(app::round_significant(NAN)));
  CHECK(std::isinf(app::round_significant(INFINITY)));
}

TEST_CASE("html_page: one file with the CSS, the scripts and the data; nothing it would fetch") {
  const std::string page = app::html_page("a <title> & more", {{"kind", "run"}, {"x", {1, 2}}}, app::PageKind::Run);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<title>a &lt;title&gt; &amp; more</title>") != std::string::npos);
  CHECK(page.find(app::asset("report.css")) != std::string::npos);
  CHECK(page.find(app::asset("common.js")) != std::string::npos);
  CHECK(page.find(app::asset("run.js")) != std::string::npos);
  CHECK(page.find(app::asset("lab.js")) == std::string::npos);
  CHECK(page_data(page)["x"] == json({1, 2}));
  // No external resource: no src= or href= to another file, no @import or url() but to the page's own ids, no fetch.
  for (const char* bad : {" src=", "href=\"http", "@import", "url(http", "url(/", "url('", "url(\"", "fetch(", "XMLHttpRequest", "<link"}) {
    CAPTURE(bad);
    CHECK(page.find(bad) == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(app::asset("nope.js"), doctest::Contains("no embedded file 'nope.js'"), std::invalid_argument);
}

TEST_CASE("the page's scripts are readable: indented and commented, not minified") {
  for (const char* name : {"common.js", "run.js", "lab.js", "report.css"}) {
    CAPTURE(name);
    const std::string text = app::asset(name);
    size_t lines = 0, longest = 0, comments = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line); ++lines) {
      longest = std::max(longest, line.size());
      if (line.find("//") != std::string::npos || line.find("/*") != std::string::npos) ++comments;
    }
    CHECK(lines >= 20);
    CHECK(longest <= 150);
    CHECK(comments >= 3);
  }
}

TEST_CASE("grad_stats_data: every k-th record and the last, a torn last line dropped, a bad line named") {
  gf::test::TempDir tmp("gf_report");
  auto line = [](int step) {
    return json{{"step", step},
                {"loss", 5.0 - step * 0.1},
                {"lr", 1e-3},
                {"groups", {{{"name", "emb"}, {"grad_norm", step * 1.0}, {"param_norm", 2.0}, {"update_ratio", nullptr}}}},
                {"attention", {{{"name", "enc0.self"}, {"entropy", {0.5, 0.7}}, {"uniform", 1.0}, {"rows", 3}}}}}
        .dump();
  };
  std::string text;
  for (int s : {1, 10, 20, 30, 40, 50, 60}) text += line(s) + "\n";
  tmp.write("g.jsonl", text + "{\"step\": 70, \"lo");  // killed mid-line
  const json g = app::grad_stats_data(tmp.file("g.jsonl"), 3);
  CHECK(g["recorded"] == 7);
  CHECK(g["torn_last_line"] == true);
  CHECK(g["steps"] == json({1, 30, 60}));
  CHECK(g["grad_norm"] == json({{1.0, 30.0, 60.0}}));
  CHECK(g["update_ratio"][0][0].is_null());  // NaN was written as null and stays a gap
  CHECK(g["heads"].size() == 2);
  CHECK(g["entropy"][1] == json({0.7, 0.7, 0.7}));
  tmp.write("bad.jsonl", line(1) + "\nnot json\n" + line(20) + "\n");
  CHECK_THROWS_WITH_AS(app::grad_stats_data(tmp.file("bad.jsonl"), 10), doctest::Contains("bad.jsonl line 2: not a grad-stats record"),
                       std::runtime_error);
}

TEST_CASE("gradflow report on a trained run: settings, curves, grad stats and the explorer's maps, shaped and normalised") {
  gf::test::TempDir tmp("gf_report");
  train::RunConfig c = gf::test::tiny_run(800);
  c.layers = 2;
  c.warmup = 10, c.max_tokens = 512, c.steps = 12, c.log_every = 1000000;
  train::TrainOptions o = gf::test::quiet_options(tmp.file("run"));
  o.samples = 0, o.grad_stats = 4;
  train::train_translator(c, o);

  const gf::test::Ran r = gf::test::run_child(kBinary, {"report", o.out, "--sentences", "2"}, tmp.path / "report", 300);
  INFO(r.out, r.err);
  REQUIRE(r.exit_code() == 0);
  CHECK(r.out.find("wrote " + o.out + "/report.html") != std::string::npos);
  const json d = page_data(gf::test::slurp(fs::path(o.out) / "report.html"));
  CHECK(d["kind"] == "run");
  CHECK(d["config"]["steps"] == 12);
  CHECK(d["state"]["step"] == 12);
  CHECK(d["model"]["heads"] == 2);
  CHECK(d["curves"]["lr"].back() == json({12, app::round_significant(optim::warmup_inverse_sqrt(c.lr, 11, c.warmup))}));  // step 12 is update 11
  CHECK(d["grad_stats"]["steps"] == json({1, 4, 8, 12}));
  const json& sentences = d["attention"]["sentences"];
  REQUIRE(sentences.size() == 2);
  for (const json& s : sentences) {
    const size_t S = s["inputs"].size(), T = s["outputs"].size();
    CHECK(s["outputs"].back() == "<eos>");
    REQUIRE(s["views"].size() == 3);
    for (const json& v : s["views"]) {
      CAPTURE(v["id"]);
      REQUIRE(v["layers"].size() == 2);
      REQUIRE(v["layers"][0].size() == 2);
      const json& map = v["layers"][1][1];
      CHECK(map.size() == v["queries"].size());
      CHECK(map[0].size() == v["keys"].size());
      for (const auto& row : map) CHECK(row_sum(row) == doctest::Approx(1.0).epsilon(0.01));  // 3 decimals a weight
    }
    CHECK(s["views"][2]["keys"].size() == S);
    CHECK(s["views"][2]["queries"].size() == T);
    REQUIRE(s["rollout"].size() == T);
    for (const auto& row : s["rollout"]) CHECK(row_sum(row) == doctest::Approx(1.0).epsilon(0.01));
    CHECK(s["grad_x_input"][0].size() == S);
  }
  // --src: that sentence alone; one longer than the model's max_len (100) is a usage error.
  const gf::test::Ran one = gf::test::run_child(kBinary, {"report", o.out, "--src", "i go to school .", "--out", tmp.file("one.html")},
                                                tmp.path / "one", 300);
  REQUIRE(one.exit_code() == 0);
  const json d1 = page_data(gf::test::slurp(tmp.file("one.html")));
  REQUIRE(d1["attention"]["sentences"].size() == 1);
  CHECK(d1["attention"]["sentences"][0]["inputs"] == json({"i", "go", "to", "school", "."}));
  CHECK(d1["attention"]["sentences"][0]["reference"].is_null());
  std::string long_src;
  for (int i = 0; i < 101; ++i) long_src += "go ";
  const gf::test::Ran too_long = gf::test::run_child(kBinary, {"report", o.out, "--src", long_src, "--out", tmp.file("x.html")}, tmp.path / "long", 300);
  CHECK(too_long.exit_code() == 2);
  CHECK(too_long.err.find("the source sentence has 101 tokens; the model takes at most 100") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.file("x.html")));
}

TEST_CASE("gradflow report: a folder that is not a run, or --src with --input, is a clear error") {
  gf::test::TempDir tmp("gf_report");
  fs::create_directories(tmp.path / "empty");
  const gf::test::Ran r = gf::test::run_child(kBinary, {"report", tmp.file("empty")}, tmp.path / "empty_log", 60);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("is neither a training run (it has no config.json) nor a lab's output") != std::string::npos);
  const gf::test::Ran missing = gf::test::run_child(kBinary, {"report", tmp.file("nope")}, tmp.path / "nope_log", 60);
  CHECK(missing.exit_code() == 1);
  CHECK(missing.err.find("is not a run folder") != std::string::npos);
  const gf::test::Ran both = gf::test::run_child(kBinary, {"report", tmp.file("empty"), "--src", "a", "--input", "b"}, tmp.path / "both_log", 60);
  CHECK(both.exit_code() == 2);
  CHECK(both.err.find("give --src or --input, not both") != std::string::npos);
}

TEST_CASE("lab pages: the lab's and its control's JSON paired, figures inlined, raw data left out; an index of every lab") {
  gf::test::TempDir tmp("gf_report");
  const fs::path lab = gf::test::write_toy_lab(tmp.path, false), control = gf::test::write_toy_lab(tmp.path, true);
  CHECK(app::find_lab_json(lab.string()) == (lab / "toy.json").string());
  CHECK(app::find_lab_json(control.string()) == (control / "toy.json").string());
  CHECK(app::find_lab_json(tmp.path.string()).empty());
  CHECK(app::holds_lab_output(tmp.path.string()));

  for (const fs::path& dir : {lab, control}) {  // the same page data from either folder
    CAPTURE(dir);
    const json d = app::lab_page_data(dir.string());
    CHECK(d["kind"] == "lab");
    CHECK(d["lab"]["name"] == "toy");
    CHECK(d["lab"]["control_removes"] == "the ingredient removed");
    CHECK(d["result"]["control"] == false);
    CHECK(d["control"]["control"] == true);
    CHECK(d["result"]["check"]["agrees"] == true);
    CHECK(d["control"]["check"]["agrees"] == false);
    CHECK_FALSE(d["result"].contains("data"));
    REQUIRE(d["result"]["claims"].size() == 3);
    const json& grows = d["result"]["claims"][0];
    CHECK(grows["id"] == "grows");
    CHECK(grows["method"] == "t 95%");
    CHECK(grows["n"] == 3);
    CHECK(grows["lo"].get<double>() < grows["mean"].get<double>());
    REQUIRE(d["result"]["figures"].size() == 1);
    CHECK(d["result"]["figures"][0]["svg"].get<std::string>().rfind("<svg", 0) == 0);
    REQUIRE(d["result"]["dose_response"].size() == 1);  // kept beside the claims (the page draws it), not in "data"
    CHECK(d["result"]["dose_response"][0]["lo"].size() == 4);
    CHECK_FALSE(d["control"].contains("dose_response"));
  }

  // Without the control's folder: the lab alone.
  fs::remove_all(control);
  CHECK(app::lab_page_data(lab.string())["control"].is_null());
  const std::string page = app::write_lab_page(lab.string());
  CHECK(page == (lab / "toy.html").string());
  const json d = page_data(gf::test::slurp(page));
  CHECK(d["result"]["tables"].contains("ratios"));

  // The index: one row per lab with its control, each lab's page written with a link back.
  gf::test::write_toy_lab(tmp.path, true);
  const std::string index = app::write_lab_index(tmp.path.string());
  const json i = page_data(gf::test::slurp(index));
  CHECK(i["kind"] == "lab-index");
  REQUIRE(i["labs"].size() == 1);
  CHECK(i["labs"][0]["page"] == json({"toy", "toy.html"}));  // segments, each encoded by the page
  CHECK(i["labs"][0]["control"]["control_targets_fail"] == 1);
  CHECK(page_data(gf::test::slurp(lab / "toy.html"))["index"] == json({"..", "index.html"}));
  CHECK_THROWS_WITH_AS(app::lab_page_data(tmp.path.string()), doctest::Contains("holds no lab output"), std::runtime_error);
}

// The lab infrastructure: lab/report.h (tables, cells, settings, claims, the check line and the
// files a lab writes) and lab/common.h (statistics, synthetic tasks, the short training loop).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab/common.h"
#include "lab/report.h"

using namespace gf;
using namespace gf::lab;
namespace fs = std::filesystem;

namespace {

Lab test_lab() {
  Lab l;
  l.name = "testlab";
  l.title = "a lab for the tests";
  l.reference = "Nobody 2024";
  l.question = "Does the report work?";
  l.options = {{"steps", Option::Int, "10", "steps"}, {"lr", Option::Real, "0.5", "rate"}, {"task", Option::Text, "copy", "task"},
               {"fast", Option::Switch, "", "switch"}};
  return l;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::path(GRADFLOW_BINARY_DIR) / "test_lab_report" / name;
  fs::remove_all(d);
  return d;
}

std::map<std::string, std::string> settings(const fs::path& out) {
  return {{"out", out.string()}, {"seeds", "3"}, {"seed", "7"}, {"steps", "12"}, {"lr", "1e-3"}, {"task", "sort"}, {"fast", "0"}};
}

// Everything written to a FILE*, read back.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.rfind('\n') + 1);
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

// ---------------------------------------------------------------- tables and cells

TEST_CASE("Table::row: the cell count must match the columns") {
  Table t("t", {"a", "b"});
  CHECK_NOTHROW(t.row({1, 2.5}));
  CHECK_THROWS_AS(t.row({1}), std::invalid_argument);
  CHECK_THROWS_AS(t.row({1, 2, 3}), std::invalid_argument);
  CHECK(t.rows.size() == 1);
}

TEST_CASE("Cell: numbers to 4 significant digits, integers exactly, text as is") {
  CHECK(Cell(3).str() == "3");
  CHECK(Cell(int64_t{123456789012}).str() == "123456789012");
  CHECK(Cell(size_t{42}).str() == "42");
  CHECK(Cell(0.0).str() == "0");
  CHECK(Cell(1234.5678).str() == "1235");
  CHECK(Cell(0.000123456).str() == "0.0001235");
  CHECK(Cell(2.0).str() == "2");
  CHECK(Cell(-1.5e-12).str() == "-1.5e-12");
  CHECK(Cell(NAN).str() == "nan");
  CHECK(Cell("text").str() == "text");
  CHECK(Cell(std::string("s")).is_number == false);
  CHECK(Cell(2.5).integral == false);
  CHECK(Cell(2).integral == true);
}

// ---------------------------------------------------------------- settings

TEST_CASE("Report: settings are parsed, and bad or missing ones are errors naming them") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("settings");
  Report r(l, settings(dir), out);
  CHECK(r.integer("steps") == 12);
  CHECK(r.real("lr") == doctest::Approx(1e-3));
  CHECK(r.text("task") == "sort");
  CHECK_FALSE(r.on("fast"));
  CHECK(r.seeds() == 3);
  CHECK(r.seed(0) == 7);
  CHECK(r.seed(2) == 9);
  CHECK(r.out_dir() == dir.string());
  CHECK_THROWS_AS(r.integer("nope"), std::logic_error);

  auto with = [&](const std::string& key, const std::string& value) {
    auto s = settings(dir);
    s[key] = value;
    return s;
  };
  for (const char* bad : {"12a", "", "1.5", "x"}) {
    CAPTURE(bad);
    Report b(l, with("steps", bad), out);
    CHECK_THROWS_WITH_AS(b.integer("steps"), doctest::Contains("--steps"), std::invalid_argument);
  }
  for (const char* bad : {"abc", "1e-3x", ""}) {
    CAPTURE(bad);
    Report b(l, with("lr", bad), out);
    CHECK_THROWS_WITH_AS(b.real("lr"), doctest::Contains("--lr"), std::invalid_argument);
  }
  for (const char* yes : {"1", "true", "on"}) CHECK(Report(l, with("fast", yes), out).on("fast"));
  CHECK_THROWS_AS(Report(l, with("seeds", "0"), out), std::invalid_argument);
  auto missing = settings(dir);
  missing.erase("task");  // a lab option
  CHECK_THROWS_WITH_AS(Report(l, missing, out), doctest::Contains("task"), std::logic_error);
  missing = settings(dir);
  missing.erase("out");  // a common one
  CHECK_THROWS_AS(Report(l, missing, out), std::logic_error);
  std::fclose(out);
}

// ---------------------------------------------------------------- claims, files, check line

TEST_CASE("Report::finish: exit code 0 when every claim holds, the JSON holds tables, claims and check") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("agrees");
  Report r(l, settings(dir), out);
  Table t("numbers", {"name", "value", "count"});
  t.row({"a", 1.5, 3}).row({"b", NAN, int64_t{4}});
  r.print(t);
  r.data()["raw"] = {1, 2, 3};
  r.add_panel(Chart{"c", "x", "y", false, false, {{"s", {1, 2}, {3, 4}, {}, {}, false, ""}}, {}});
  r.write_file("extra.dot", "digraph {}\n");
  r.claim("one", true, "1 > 0");
  r.claim("two", true, "2 > 1");
  CHECK(r.finish() == 0);

  const std::string printed = contents(out);
  CHECK(last_line(printed) == "check: AGREES with Nobody 2024: 2 of 2 claims hold");
  CHECK(printed.find("[holds] one: 1 > 0") != std::string::npos);

  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["lab"] == "testlab");
  CHECK(j["tables"]["numbers"]["columns"] == nlohmann::json({"name", "value", "count"}));
  CHECK(j["tables"]["numbers"]["rows"].size() == 2);
  CHECK(j["tables"]["numbers"]["rows"][0][1] == 1.5);
  CHECK(j["tables"]["numbers"]["rows"][0][2] == 3);
  CHECK(j["tables"]["numbers"]["rows"][1][1] == "nan");  // JSON has no NaN
  CHECK(j["data"]["raw"] == nlohmann::json({1, 2, 3}));
  CHECK(j["claims"].size() == 2);
  CHECK(j["claims"][1]["statement"] == "two");
  CHECK(j["claims"][1]["holds"] == true);
  CHECK(j["check"]["agrees"] == true);
  CHECK(j["check"]["line"] == "check: AGREES with Nobody 2024: 2 of 2 claims hold");
  CHECK(j["settings"]["task"] == "sort");
  CHECK(fs::exists(dir / "testlab.svg"));
  CHECK(fs::exists(dir / "extra.dot"));
  const std::set<std::string> files(j["files"].begin(), j["files"].end());
  CHECK(files.count((dir / "extra.dot").string()) == 1);
  CHECK(files.count((dir / "testlab.svg").string()) == 1);
  std::fclose(out);
}

TEST_CASE("Report::finish: exit code 3 and DISAGREES naming the failing claim; no claim is an error") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("disagrees");
  Report r(l, settings(dir), out);
  r.claim("holds", true, "fine");
  r.claim("grows", false, "slope 0.2");
  CHECK(r.finish() == 3);
  const std::string line = last_line(contents(out));
  CHECK(line.rfind("check: DISAGREES with Nobody 2024: 1 of 2 claims hold", 0) == 0);
  CHECK(line.find("fails: grows (slope 0.2)") != std::string::npos);
  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["check"]["agrees"] == false);
  CHECK_FALSE(fs::exists(dir / "testlab.svg"));  // no panels, no figure

  Report none(l, settings(fresh_dir("none")), out);
  CHECK_THROWS_AS(none.finish(), std::logic_error);
  std::fclose(out);
}

TEST_CASE("Report::print: a table printed twice under one name keeps both in the JSON") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("twice");
  Report r(l, settings(dir), out);
  for (int seed = 0; seed < 2; ++seed) {
    Table t("per seed", {"seed"});
    t.row({seed});
    r.print(t);
  }
  r.claim("c", true, "e");
  r.finish();
  const nlohmann::json j = read_json(dir / "testlab.json");
  REQUIRE(j["tables"].size() == 2);
  CHECK(j["tables"]["per seed"]["rows"][0][0] == 0);
  CHECK(j["tables"]["per seed (2)"]["rows"][0][0] == 1);
  std::fclose(out);
}

// ---------------------------------------------------------------- statistics

TEST_CASE("spread: mean, sample sd, min, max") {
  const Spread s = spread({1, 2, 3, 4});
  CHECK(s.mean == doctest::Approx(2.5));
  CHECK(s.sd == doctest::Approx(std::sqrt(5.0 / 3.0)));
  CHECK(s.min == 1);
  CHECK(s.max == 4);
  CHECK(spread({7}).sd == 0);
  CHECK(spread({7}).mean == 7);
  CHECK(spread({}).mean == 0);
}

TEST_CASE("loglog_slope: the exponent of a power law; unusable points skipped") {
  CHECK(loglog_slope({1, 2, 4, 8}, {3, 12, 48, 192}) == doctest::Approx(2));
  CHECK(loglog_slope({1, 10, 100}, {5, 0.5, 0.05}) == doctest::Approx(-1));
  CHECK(loglog_slope({1, 2, 0, 4, 8}, {1, 2, 5, -1, 8}) == doctest::Approx(1));  // (0, 5) and (4, -1) skipped
  CHECK(std::isnan(loglog_slope({1, 0}, {1, 1})));                              // one usable point
  CHECK(std::isnan(loglog_slope({2, 2, 2}, {1, 2, 3})));                         // no spread in x
}

TEST_CASE("spearman: rank correlation with average ranks for ties; NaN when a side is constant") {
  CHECK(spearman({1, 2, 3, 4}, {10, 20, 30, 40}) == doctest::Approx(1));
  CHECK(spearman({1, 2, 3, 4}, {4, 3, 2, 1}) == doctest::Approx(-1));
  CHECK(spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}) == doctest::Approx(0.8));
  CHECK(spearman({1, 2, 3}, {1, 8, 1000}) == doctest::Approx(1));          // ranks, not values
  CHECK(spearman({1, 1, 2, 3}, {1, 2, 3, 4}) == doctest::Approx(0.9486832980505138));  // scipy.stats.spearmanr
  CHECK(std::isnan(spearman({1, 2, 3}, {5, 5, 5})));
  CHECK(std::isnan(spearman({2, 2}, {1, 2})));
  CHECK(std::isnan(spearman({1, 2}, {1, 2, 3})));
  CHECK(std::isnan(spearman({1}, {1})));
}

TEST_CASE("sign_test_p: the binomial upper tail at one half") {
  CHECK(sign_test_p(10, 10) == doctest::Approx(1.0 / 1024));
  CHECK(sign_test_p(0, 10) == doctest::Approx(1));
  CHECK(sign_test_p(5, 10) == doctest::Approx(638.0 / 1024));                       // (252 + 210 + 120 + 45 + 10 + 1) / 1024
  CHECK(sign_test_p(64, 100) == doctest::Approx(0.0033185).epsilon(1e-4));         // scipy.stats.binomtest(64, 100, alternative='greater')
  CHECK(sign_test_p(0, 0) == doctest::Approx(1));
  CHECK_THROWS_WITH_AS(sign_test_p(11, 10), doctest::Contains("sign_test_p"), std::invalid_argument);
}

TEST_CASE("l2_norm, max_abs, count_nonfinite") {
  const Tensor t = Tensor::of({3.0, -4.0}, {2});
  CHECK(l2_norm(t) == doctest::Approx(5));
  CHECK(max_abs(t) == 4);
  CHECK(l2_norm(Tensor()) == 0);
  CHECK(std::isnan(max_abs(Tensor::of({1.0, NAN}, {2}))));
  CHECK(count_nonfinite(Tensor::of({1.0, NAN, INFINITY, -INFINITY}, {4})) == 3);
}

// ---------------------------------------------------------------- synthetic tasks

TEST_CASE("synthetic_task: copy, reverse and sort targets, symbols and lengths in range") {
  for (const std::string kind : {"copy", "reverse", "sort"}) {
    CAPTURE(kind);
    const IdData d = synthetic_task(kind, 6, 2, 5, 50, 10, 3);
    CHECK(d.src_vocab == 10);
    CHECK(d.tgt_vocab == 10);
    CHECK(d.train.size() == 50);
    CHECK(d.test.size() == 10);
    CHECK(d.src_words.size() == 10);
    CHECK(d.src_words.tokens()[4] == "s4");
    for (const auto* split : {&d.train, &d.test})
      for (const auto& p : *split) {
        CHECK(p.src.size() >= 2);
        CHECK(p.src.size() <= 5);
        for (int64_t id : p.src) CHECK((id >= 4 && id < 10));
        std::vector<int64_t> want = p.src;
        if (kind == "reverse") std::reverse(want.begin(), want.end());
        if (kind == "sort") std::sort(want.begin(), want.end());
        CHECK(p.tgt == want);
      }
  }
}

TEST_CASE("synthetic_task: deterministic per seed, test sequences unseen in training, bad arguments refused") {
  const IdData a = synthetic_task("copy", 8, 3, 6, 100, 20, 11), b = synthetic_task("copy", 8, 3, 6, 100, 20, 11),
               c = synthetic_task("copy", 8, 3, 6, 100, 20, 12);
  auto same = [](const IdData& x, const IdData& y) {
    if (x.train.size() != y.train.size() || x.test.size() != y.test.size()) return false;
    for (size_t i = 0; i < x.train.size(); ++i)
      if (x.train[i].src != y.train[i].src) return false;
    for (size_t i = 0; i < x.test.size(); ++i)
      if (x.test[i].src != y.test[i].src) return false;
    return true;
  };
  CHECK(same(a, b));
  CHECK_FALSE(same(a, c));
  std::set<std::vector<int64_t>> train;
  for (const auto& p : a.train) train.insert(p.src);
  for (const auto& p : a.test) CHECK(train.count(p.src) == 0);
  CHECK_THROWS_AS(synthetic_task("shuffle", 8, 3, 6, 10, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(synthetic_task("copy", 1, 3, 6, 10, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(synthetic_task("copy", 8, 6, 3, 10, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(synthetic_task("copy", 8, 0, 3, 10, 2, 1), std::invalid_argument);
}

// ---------------------------------------------------------------- training

TEST_CASE("fit: a tiny model learns a copy task (the loss falls)") {
  const IdData d = synthetic_task("copy", 6, 2, 4, 200, 0, 5);
  nn::Seq2SeqTransformer model(small_model(d, 32, 2, 1, 64, true), 3);
  FitOptions o;
  o.steps = 60;
  o.lr = 3e-3;
  o.max_tokens = 256;
  int64_t calls = 0;
  const FitResult r = fit(model, d.train, o, [&](int64_t step, double loss) {
    ++calls;
    CHECK(step == calls);
    CHECK(std::isfinite(loss));
  });
  REQUIRE(r.losses.size() == 60);
  CHECK(calls == 60);
  CHECK_FALSE(r.diverged);
  const double first = spread({r.losses.begin(), r.losses.begin() + 5}).mean, last = spread({r.losses.end() - 5, r.losses.end()}).mean;
  CAPTURE(first);
  CAPTURE(last);
  CHECK(last < 0.6 * first);
  o.steps = 0;
  CHECK_THROWS_AS(fit(model, d.train, o), std::invalid_argument);
}

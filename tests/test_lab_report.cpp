// The lab infrastructure: lab/report.h (tables, cells, settings, claims, the check line and the
// files a lab writes) and lab/common.h (statistics, synthetic tasks, the short training loop).
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/common.h"
#include "lab/lab.h"
#include "lab/report.h"
#include "lab/runner.h"

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

TEST_CASE("Report: the run's common settings are parsed once, and bad or missing ones are errors naming them") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("settings");
  Report r(l, settings(dir), out);
  CHECK(r.seeds() == 3);
  CHECK(r.seed(0) == 7);
  CHECK(r.seed(2) == 9);
  CHECK(r.out_dir() == dir.string());
  CHECK_FALSE(r.control());
  CHECK(r.placebo_pools(4) == 4);
  auto with = [&](const std::string& key, const std::string& value) {
    auto s = settings(dir);
    s[key] = value;
    return s;
  };
  CHECK(Report(l, with("pools", "60"), out).placebo_pools(4) == 60);
  CHECK(Report(l, with("models", "a\nb\n"), out).seeds() == 2);
  CHECK(Report(l, with("models", "a\nb\n"), out).model(1) == "b");
  for (const char* bad : {"12a", "", "1.5", "x"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(Report(l, with("seeds", bad), out), doctest::Contains("--seeds"), std::invalid_argument);
  }
  CHECK_THROWS_AS(Report(l, with("seeds", "0"), out), std::invalid_argument);
  auto missing = settings(dir);
  missing.erase("task");  // a lab option
  CHECK_THROWS_WITH_AS(Report(l, missing, out), doctest::Contains("task"), std::logic_error);
  missing = settings(dir);
  missing.erase("out");  // a common one
  CHECK_THROWS_AS(Report(l, missing, out), std::logic_error);
  std::fclose(out);
}

// A lab's own settings (lab/fields.h): a struct's defaults, one table, parsed by flag name.
struct FieldsToy {
  int64_t steps = 10;
  double lr = 0.5;
  std::string task = "copy";
  bool fast = false;
  std::vector<double> levels{0, 0.5, 1};
  TaskSettings inner{.symbols = 16};
};
TEST_CASE("Fields: the options, defaults and parsing come from one table; a bad value names its flag") {
  Fields<FieldsToy> f = {{"steps", &FieldsToy::steps, "steps"}, {"lr", &FieldsToy::lr, "rate"}, {"task", &FieldsToy::task, "task"},
                         {"fast", &FieldsToy::fast, "switch"}, {"levels", &FieldsToy::levels, "levels"}};
  f.add(Fields<FieldsToy>::nest(&FieldsToy::inner, task_fields()));
  const auto opts = f.options();
  REQUIRE(opts.size() == 11);
  CHECK(opts[0].name == "steps");
  CHECK(opts[0].kind == Option::Int);
  CHECK(opts[0].default_value == "10");
  CHECK(opts[1].default_value == "0.5");
  CHECK(opts[3].default_value == "");  // a switch: off
  CHECK(opts[4].default_value == "0,0.5,1");
  CHECK(opts[6].name == "symbols");
  CHECK(opts[6].default_value == "16");  // the enclosing struct's own default
  const FieldsToy s = f.parse({{"steps", "12"}, {"lr", "1e-3"}, {"task", "sort"}, {"fast", "1"}, {"levels", "1,2,4,8"}, {"symbols", "7"}});
  CHECK(s.steps == 12);
  CHECK(s.lr == 1e-3);
  CHECK(s.task == "sort");
  CHECK(s.fast);
  CHECK(s.levels == std::vector<double>{1, 2, 4, 8});
  CHECK(s.inner.symbols == 7);
  CHECK(f.parse({}).steps == 10);
  CHECK(f.values(s).at("levels") == "1,2,4,8");
  for (const char* bad : {"12a", "", "1.5", "x"}) CHECK_THROWS_WITH_AS(f.parse({{"steps", bad}}), doctest::Contains("--steps"), std::invalid_argument);
  for (const char* bad : {"abc", "1e-3x", "", "nan"}) CHECK_THROWS_WITH_AS(f.parse({{"lr", bad}}), doctest::Contains("--lr"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(f.parse({{"levels", "1,,2"}}), doctest::Contains("--levels"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(f.parse({{"fast", "maybe"}}), doctest::Contains("--fast"), std::invalid_argument);
}

// ---------------------------------------------------------------- intervals

// ---------------------------------------------------------------- claims, files, verdict line

namespace {

// The test lab's rows, as lab/claims.cpp would hold them.
std::vector<ClaimSpec> test_specs() {
  return {{"testlab", "grows", ClaimKind::Paper, "the effect is above 1", Compare::Above, 1.0, "Nobody 2024, Figure 1", true},
          {"testlab", "small", ClaimKind::Paper, "the side effect is below 0.5", Compare::Below, 0.5, "Nobody 2024, Table 2", false},
          {"testlab", "exact_zero", ClaimKind::Check, "the masked entries are exactly 0 (count of non-zero ones)", Compare::Below, 0.5,
           "the mask sets them to -inf", false}};
}

Lab controlled_lab() {
  Lab l = test_lab();
  l.control = "the effect removed";
  return l;
}

}  // namespace

TEST_CASE("Report::finish: AGREES when every paper claim's interval and every check lie on their side; the JSON holds it all") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("agrees");
  Report r(l, settings(dir), out, test_specs());
  CHECK_FALSE(r.control());
  Table t("numbers", {"name", "value", "count"});
  t.row({"a", 1.5, 3}).row({"b", NAN, int64_t{4}});
  r.print(t);
  r.data()["raw"] = {1, 2, 3};
  r.add_panel(Chart{"c", "x", "y", false, false, {{"s", {1, 2}, {3, 4}, {}, {}, false, ""}}, {}});
  r.write_file("extra.dot", "digraph {}\n");
  r.paper("grows", {1.5, 1.6, 1.7}, "ratios");  // t(2) 4.303 * 0.1 / sqrt(3): [1.352, 1.848], above 1
  r.paper("small", {0.1, 0.2, 0.3, 0.2});
  r.check("exact_zero", 0, "0 of 28 non-zero");
  CHECK(r.finish() == 0);
  CHECK(r.verdict() == "check: AGREES with Nobody 2024: supports 2, contradicts 0, unsettled 0 of 2 paper claims (1 exact check passes)");

  const std::string printed = contents(out);
  CHECK(last_line(printed) == r.verdict());
  CHECK(printed.find("[supported] paper grows: the effect is above 1") != std::string::npos);
  CHECK(printed.find("1.6 [1.352, 1.848] (t 95%, n 3) > 1, a target of the control; Nobody 2024, Figure 1") != std::string::npos);
  CHECK(printed.find("[passes] check exact_zero:") != std::string::npos);
  CHECK(printed.find("per seed: 1.5, 1.6, 1.7") != std::string::npos);
  CHECK(printed.find("0 (exact) < 0.5; the mask sets them to -inf") != std::string::npos);

  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["lab"] == "testlab");
  CHECK(j["control"] == false);
  CHECK(j["tables"]["numbers"]["columns"] == nlohmann::json({"name", "value", "count"}));
  CHECK(j["tables"]["numbers"]["rows"].size() == 2);
  CHECK(j["tables"]["numbers"]["rows"][0][1] == 1.5);
  CHECK(j["tables"]["numbers"]["rows"][0][2] == 3);
  CHECK(j["tables"]["numbers"]["rows"][1][1] == "nan");  // JSON has no NaN
  CHECK(j["data"]["raw"] == nlohmann::json({1, 2, 3}));
  REQUIRE(j["claims"].size() == 3);
  const nlohmann::json& g = j["claims"][0];
  CHECK(g["id"] == "grows");
  CHECK(g["kind"] == "paper");
  CHECK(g["statement"] == "the effect is above 1");
  CHECK(g["holds"] == true);
  CHECK(g["outcome"] == "supported");
  CHECK(g["decisive"]["method"] == "t 95%");  // the only claim with per-seed values: Holm's level is 95%
  CHECK(g["mean"].get<double>() == doctest::Approx(1.6));
  CHECK(g["lo"].get<double>() == doctest::Approx(1.6 - 4.302652730 * 0.1 / std::sqrt(3.0)));
  CHECK(g["hi"].get<double>() == doctest::Approx(1.6 + 4.302652730 * 0.1 / std::sqrt(3.0)));
  CHECK(g["n"] == 3);
  CHECK(g["method"] == "t 95%");
  CHECK(g["side"] == "above");
  CHECK(g["threshold"] == 1.0);
  CHECK(g["source"] == "Nobody 2024, Figure 1");
  CHECK(g["control_targets"] == true);
  CHECK(g["evidence"] == "ratios");
  CHECK(g["values"].size() == 3);
  CHECK(j["claims"][1]["method"] == "t 95%");
  CHECK(j["claims"][1]["values"].size() == 4);
  CHECK(j["claims"][1]["side"] == "below");
  const nlohmann::json& c = j["claims"][2];
  CHECK(c["kind"] == "check");
  CHECK(c["mean"] == 0.0);
  CHECK(c["lo"] == 0.0);
  CHECK(c["hi"] == 0.0);
  CHECK(c["n"] == 1);
  CHECK(c["method"] == "exact");
  CHECK(j["check"]["agrees"] == true);
  CHECK(j["check"]["line"] == r.verdict());
  CHECK(j["check"]["paper_claims"] == 2);
  CHECK(j["check"]["paper_claims_hold"] == 2);
  CHECK(j["check"]["supported"] == 2);
  CHECK(j["check"]["contradicted"] == 0);
  CHECK(j["check"]["unsettled"] == 0);
  CHECK(j["check"]["code"] == 0);
  CHECK(j["check"]["exact_checks"] == 1);
  CHECK(j["check"]["exact_checks_pass"] == 1);
  CHECK(j["settings"]["task"] == "sort");
  CHECK(fs::exists(dir / "testlab.svg"));
  CHECK(fs::exists(dir / "extra.dot"));
  const std::set<std::string> files(j["files"].begin(), j["files"].end());
  CHECK(files.count((dir / "extra.dot").string()) == 1);
  CHECK(files.count((dir / "testlab.svg").string()) == 1);
  std::fclose(out);
}

TEST_CASE("Report verdict: supported, contradicted or unsettled on the interval; a failing check fails; the exit codes") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  auto run = [&](auto&& fill) {
    Report r(l, settings(fresh_dir("verdict")), out, test_specs());
    fill(r);
    const int code = r.finish();
    return std::pair(code, r.verdict());
  };
  // The mean is above 1, but the interval reaches below: unsettled, exit 4.
  auto [c1, v1] = run([](Report& r) {
    r.paper("grows", {0.9, 1.5, 1.6});
    r.paper("small", {0.1, 0.2, 0.15});
    r.check("exact_zero", 0);
  });
  CHECK(c1 == 4);
  CHECK(v1 == "check: UNSETTLED for Nobody 2024: supports 1, contradicts 0, unsettled 1 of 2 paper claims (1 exact check passes); unsettled: grows");
  // The interval entirely on the other side: contradicted, exit 3, "DISAGREES".
  auto [c5, v5] = run([](Report& r) {
    r.paper("grows", {0.2, 0.3, 0.25});
    r.paper("small", {0.1, 0.2, 0.15});
    r.check("exact_zero", 0);
  });
  CHECK(c5 == 3);
  CHECK(v5 == "check: DISAGREES with Nobody 2024: supports 1, contradicts 1, unsettled 0 of 2 paper claims (1 exact check passes); contradicted: grows");
  // Strictly: values exactly at the threshold leave the claim unsettled.
  auto [c2, v2] = run([](Report& r) {
    r.paper("grows", {2, 2, 2});
    r.paper("small", {0.5, 0.5});
    r.check("exact_zero", 0);
  });
  CHECK(c2 == 4);
  CHECK(v2.find("unsettled: small") != std::string::npos);
  // Every paper claim supported, an exact check fails: exit 3.
  auto [c3, v3] = run([](Report& r) {
    r.paper("grows", {2, 2.1, 2.2});
    r.paper("small", {0.1, 0.2, 0.15});
    r.check("exact_zero", 3, "3 entries non-zero");
  });
  CHECK(c3 == 3);
  CHECK(v3 == "check: FAILS an exact check, for Nobody 2024: supports 2, contradicts 0, unsettled 0 of 2 paper claims (0 of 1 exact checks pass); fails: exact_zero");
  // A diverged seed (NaN) makes the interval NaN: unsettled.
  auto [c4, v4] = run([](Report& r) {
    r.paper("grows", {2, NAN, 2.2});
    r.paper("small", {0.1, 0.2, 0.15});
    r.check("exact_zero", 0);
  });
  CHECK(c4 == 4);
  CHECK(v4.find("unsettled: grows") != std::string::npos);
  std::fclose(out);
}

TEST_CASE("Report: Holm's step-down across the paper claims asks more of each than a lone 95% interval") {
  const std::vector<ClaimSpec> specs = test_specs();
  // grows: t = 5.77 on 2 df, one-sided p 0.0144; small: t = -5.20, p 0.0175. Each alone is
  // supported at 95% (p < 0.025); together the smaller p must be below 0.025 / 2: neither is.
  const std::vector<double> grows{1.35, 1.5, 1.65}, small{0.3, 0.35, 0.4};
  CHECK(decide(specs[0].side, specs[0].threshold, grows, 0.05) == Outcome::Supported);
  CHECK(decide(specs[1].side, specs[1].threshold, small, 0.05) == Outcome::Supported);
  CHECK(side_p_values(specs[0].side, specs[0].threshold, grows).supported == doctest::Approx(0.0144).epsilon(0.02));
  CHECK(side_p_values(specs[1].side, specs[1].threshold, small).supported == doctest::Approx(0.0175).epsilon(0.02));
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("holm");
  Report r(l, settings(dir), out, specs);
  r.paper("grows", grows);
  r.paper("small", small);
  r.check("exact_zero", 0);
  CHECK(r.finish() == 4);
  CHECK(r.verdict().find("supports 0, contradicts 0, unsettled 2 of 2") != std::string::npos);
  const nlohmann::json j = read_json(dir / "testlab.json");
  for (const auto& c : {j["claims"][0], j["claims"][1]}) {
    CHECK(c["outcome"] == "unsettled");
    CHECK(c["decisive"]["method"] == "t 97.5%");  // the stopping level, 1 - 0.05 / 2
    CHECK(c["decisive"]["lo"].get<double>() < c["lo"].get<double>());
    CHECK(c["seeds_to_settle"].get<int>() == 4);  // t(0.9875, 3) = 4.18: 4.18 * 0.15 / 2 = 0.31 < 0.5 (grows); small likewise
  }
  // With the second claim decided first (p 0.0034 < 0.0125), the first is held to 95% and supported.
  Report s(l, settings(fresh_dir("holm2")), out, specs);
  s.paper("grows", grows);
  s.paper("small", {0.1, 0.2, 0.15});
  s.check("exact_zero", 0);
  CHECK(s.finish() == 0);
  std::fclose(out);
}

TEST_CASE("Report design: each claim prints its design; unsettled with fewer seeds than it needs is unsettled by design") {
  std::vector<ClaimSpec> specs = test_specs();
  // grows (> 1): its smallest effect 1 at a pilot sd of 1; small (< 0.5): no design stated.
  specs[0].min_effect = 1.0, specs[0].pilot_sd = 1.0, specs[0].pilot_n = 5, specs[0].min_effect_reason = "a toy's";
  const double alpha = design_alpha(2);  // two paper claims
  const int needed = seeds_needed(1.0, 1.0, alpha);
  REQUIRE(needed > 3);
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("design");
  Report r(l, settings(dir), out, specs);
  r.paper("grows", {0.5, 1.5, 2.5});  // mean 1.5, sd 1: the interval straddles 1
  r.paper("small", {0.1, 0.2, 0.15});
  r.check("exact_zero", 0);
  CHECK(r.finish() == 4);
  const std::string text = contents(out);
  CHECK(text.find("[unsettled by design] paper grows:") != std::string::npos);
  CHECK(text.find(fmt::format("designed to settle an effect of 1 with {} seeds (pilot sd 1, Holm level 0.025); this run has 3", needed)) !=
        std::string::npos);
  CHECK(text.find(fmt::format("unsettled by design: needs {} seeds for its smallest effect (1 beyond the threshold); the run has 3", needed)) !=
        std::string::npos);
  CHECK(text.find("design: no smallest effect stated for this claim") != std::string::npos);  // small
  CHECK(r.verdict().find("unsettled: grows (by design)") != std::string::npos);
  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["claims"][0]["outcome"] == "unsettled");
  CHECK(j["claims"][0]["design"]["by_design"] == true);
  CHECK(j["claims"][0]["design"]["seeds_needed"] == needed);
  CHECK(j["claims"][0]["design"]["min_effect"] == 1.0);
  CHECK(j["claims"][0]["design"]["pilot_sd"] == 1.0);
  CHECK(j["claims"][0]["design"]["alpha"].get<double>() == doctest::Approx(0.025));
  CHECK_FALSE(j["claims"][1].contains("design"));
  std::fclose(out);

  // With as many seeds as the design needs, an unsettled claim is plainly unsettled: the run could
  // have settled its smallest effect, and did not.
  std::FILE* out2 = std::tmpfile();
  REQUIRE(out2);
  const fs::path dir2 = fresh_dir("design2");
  Report s(l, settings(dir2), out2, specs);
  std::vector<double> straddles;
  for (int i = 0; i < needed; ++i) straddles.push_back(i % 2 ? 0.0 : 2.0);  // mean about 1: on the threshold
  s.paper("grows", straddles);
  s.paper("small", {0.1, 0.2, 0.15});
  s.check("exact_zero", 0);
  CHECK(s.finish() == 4);
  const std::string text2 = contents(out2);
  CHECK(text2.find("[unsettled] paper grows:") != std::string::npos);
  CHECK(text2.find("by design") == std::string::npos);
  CHECK(read_json(dir2 / "testlab.json")["claims"][0]["design"]["by_design"] == false);
  std::fclose(out2);
}

TEST_CASE("t_interval_at: the level's quantile, clipped to the statistic's range; a bounded claim gets a bootstrap beside it") {
  const Interval a = t_interval_at({1, 2, 3, 4, 5}, 0.95, -INFINITY, INFINITY), b = t_interval({1, 2, 3, 4, 5});
  CHECK(a.lo == doctest::Approx(b.lo));
  CHECK(a.hi == doctest::Approx(b.hi));
  const Interval c = t_interval_at({0.9, 0.99, 0.97}, 0.95, 0, 1);
  CHECK(c.hi == 1.0);  // clipped: a share cannot exceed 1
  CHECK(c.lo > 0.0);
  ClaimSpec share{"testlab", "grows", ClaimKind::Paper, "a share above 0.5", Compare::Above, 0.5, "s", false, 0.0, 1.0};
  CHECK(share.bounded());
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("bounded");
  Report r(l, settings(dir), out, {share});
  r.paper("grows", {0.9, 0.99, 0.97});
  CHECK(r.finish() == 0);
  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["claims"][0]["hi"] == 1.0);
  CHECK(j["claims"][0]["bootstrap"]["method"] == "bootstrap 95%");
  CHECK(j["claims"][0]["bootstrap"]["hi"].get<double>() <= 1.0);
  CHECK(j["claims"][0]["range"] == nlohmann::json({0.0, 1.0}));
  std::fclose(out);
}

TEST_CASE("Report::check over seeds: decided on the worst seed") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  ClaimSpec big{"testlab", "big", ClaimKind::Check, "every seed above 1", Compare::Above, 1.0, "arithmetic", false};
  Report r(l, settings(fresh_dir("check_seeds")), out, {big});
  r.check("big", std::vector<double>{1.4, 0.9, 1.5}, "per seed");
  CHECK(r.finish() == 3);
  CHECK(r.claims()[0].interval.mean == 0.9);
  CHECK(r.claims()[0].values.size() == 3);
  std::fclose(out);
}

TEST_CASE("Report: a lab with exact checks only is a demonstration") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const std::vector<ClaimSpec> checks{test_specs()[2]};
  Report r(l, settings(fresh_dir("demo")), out, checks);
  r.check("exact_zero", 0);
  CHECK(r.finish() == 0);
  CHECK(r.verdict() == "demonstration: 1 exact check passes");
  Report f(l, settings(fresh_dir("demo_fails")), out, checks);
  f.check("exact_zero", 1);
  CHECK(f.finish() == 3);
  CHECK(f.verdict() == "demonstration: FAILS: 0 of 1 exact checks pass; fails: exact_zero");
  std::fclose(out);
}

TEST_CASE("Report --control: printed first, named in the verdict, and the targets still supported are named") {
  const Lab l = controlled_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  auto with_control = [](const fs::path& dir) {
    auto s = settings(dir);
    s["control"] = "1";
    return s;
  };
  {
    const fs::path dir = fresh_dir("control");
    std::rewind(out);
    Report r(l, with_control(dir), out, test_specs());
    CHECK(r.control());
    r.paper("grows", {0.9, 1.0, 1.1});  // the effect is gone: the target is not supported
    r.paper("small", {0.1, 0.2, 0.15});       // not a target: may be supported
    r.check("exact_zero", 0);
    CHECK(r.finish() == 4);
    CHECK(r.verdict() == "check: UNSETTLED for Nobody 2024 (control: the effect removed): supports 1, contradicts 0, unsettled 1 of 2 paper "
                         "claims (1 exact check passes); unsettled: grows");
    const std::string printed = contents(out);
    CHECK(printed.find("control: the effect removed") < printed.find("[unsettled] paper grows"));
    CHECK(printed.find("control: 1 of 1 targeted claims not supported: without the causal ingredient the lab does not find the effect") !=
          std::string::npos);
    const nlohmann::json j = read_json(dir / "testlab.json");
    CHECK(j["control"] == true);
    CHECK(j["control_removes"] == "the effect removed");
    CHECK(j["check"]["control_targets"] == 1);
    CHECK(j["check"]["control_targets_fail"] == 1);
  }
  {
    // A control whose target is still supported: the lab cannot tell the effect from its absence.
    Report r(l, with_control(fresh_dir("control_holds")), out, test_specs());
    r.paper("grows", {2, 2.1, 2.2});
    r.paper("small", {0.7, 0.8});
    r.check("exact_zero", 0);
    CHECK(r.finish() == 4);
    CHECK(r.verdict().find("unsettled: small; targets of the control still supported: grows") != std::string::npos);
  }
  // A lab without a control refuses --control.
  CHECK_THROWS_WITH_AS(Report(test_lab(), with_control(fresh_dir("no_control")), out, test_specs()), doctest::Contains("no negative control"),
                       std::invalid_argument);
  std::fclose(out);
}

TEST_CASE("Report claims: unknown ids, the wrong kind, a claim twice or a row never reported are the lab's bugs") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  Report r(l, settings(fresh_dir("errors")), out, test_specs());
  CHECK_THROWS_WITH_AS(r.paper("nope", {1, 2}), doctest::Contains("no claim 'nope'"), std::logic_error);
  CHECK_THROWS_WITH_AS(r.paper("nope", {1, 2}), doctest::Contains("grows, small, exact_zero"), std::logic_error);
  CHECK_THROWS_WITH_AS(r.check("grows", 1), doctest::Contains("is a paper claim"), std::logic_error);
  CHECK_THROWS_WITH_AS(r.paper("exact_zero", {1, 2}), doctest::Contains("is a check claim"), std::logic_error);
  CHECK_THROWS_WITH_AS(r.paper("grows", {1.5}), doctest::Contains("at least 2 seeds"), std::invalid_argument);
  r.paper("grows", {1.5, 1.6});
  CHECK_THROWS_WITH_AS(r.paper("grows", {1.5, 1.6}), doctest::Contains("twice"), std::logic_error);
  r.check("exact_zero", 0);
  CHECK_THROWS_WITH_AS(r.finish(), doctest::Contains("'small'"), std::logic_error);  // never reported

  Report none(l, settings(fresh_dir("none")), out, {});
  CHECK_THROWS_AS(none.finish(), std::logic_error);
  std::fclose(out);
}

TEST_CASE("Report::print: a table printed twice under one name keeps both in the JSON") {
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const fs::path dir = fresh_dir("twice");
  Report r(l, settings(dir), out, test_specs());
  for (int seed = 0; seed < 2; ++seed) {
    Table t("per seed", {"seed"});
    t.row({seed});
    r.print(t);
  }
  r.paper("grows", {2, 3});
  r.paper("small", {0, 0.1});
  r.check("exact_zero", 0);
  r.finish();
  const nlohmann::json j = read_json(dir / "testlab.json");
  REQUIRE(j["tables"].size() == 2);
  CHECK(j["tables"]["per seed"]["rows"][0][0] == 0);
  CHECK(j["tables"]["per seed (2)"]["rows"][0][0] == 1);
  std::fclose(out);
}

// ---------------------------------------------------------------- the claims table

TEST_CASE("claims table: every row belongs to a lab of the registry, and every lab with a control has a target") {
  REQUIRE_NOTHROW(claim_specs());
  std::set<std::string> names;
  for (const auto& l : labs()) names.insert(l.name);
  for (const auto& c : claim_specs()) {
    CAPTURE(c.lab);
    CAPTURE(c.id);
    CHECK(names.count(c.lab) == 1);
    CHECK_FALSE(c.source.empty());
    CHECK((c.kind == ClaimKind::Paper || !c.control_targets));
    CHECK(&find_claim(c.lab, c.id) != nullptr);
  }
  for (const auto& l : labs()) {
    if (l.control.empty()) continue;
    CAPTURE(l.name);
    int targets = 0;
    for (const auto& c : claim_specs_of(l.name)) targets += c.control_targets;
    CHECK(targets >= 1);
  }
  CHECK_THROWS_WITH_AS(find_claim("norm", "no_such_claim"), doctest::Contains("no claim 'no_such_claim'"), std::logic_error);
}

TEST_CASE("claims table: every paper claim states its smallest effect, why that size, and its pilot's sd (issue 35, item 2)") {
  for (const auto& c : claim_specs()) {
    CAPTURE(c.lab);
    CAPTURE(c.id);
    if (c.kind == ClaimKind::Check) {
      CHECK_FALSE(c.designed());  // a check is one exact value: no seeds to design
      continue;
    }
    CHECK(c.designed());
    CHECK(c.min_effect > 0);
    CHECK(std::isfinite(c.pilot_sd));
    CHECK(c.pilot_n >= 2);
    CHECK_FALSE(c.min_effect_reason.empty());
  }
}

// ---------------------------------------------------------------- statistics

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

TEST_CASE("Report --ablate: a placebo lab's second control, named in the verdict; --control and --ablate are two runs") {
  Lab l = test_lab();
  l.control = "placebo: two groups of seeds of one arm";
  l.placebo = true;
  l.ablation = "the effect removed";
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  auto with = [](const fs::path& dir, const std::string& key) {
    auto s = settings(dir);
    s[key] = "1";
    return s;
  };
  const fs::path dir = fresh_dir("ablate");
  Report r(l, with(dir, "ablate"), out, test_specs());
  CHECK(r.ablate());
  CHECK(r.ablation_mode());
  CHECK_FALSE(r.placebo_mode());
  r.paper("grows", {2, 2.1, 2.2});  // a target still supported: the ablation failed
  r.paper("small", {0.1, 0.2, 0.15});
  r.check("exact_zero", 0);
  r.finish();
  CHECK(r.verdict().find("(control: the effect removed)") != std::string::npos);
  CHECK(r.verdict().find("targets of the control still supported: grows") != std::string::npos);
  const nlohmann::json j = read_json(dir / "testlab.json");
  CHECK(j["control"] == true);
  CHECK(j["ablate"] == true);
  CHECK(j["control_removes"] == "the effect removed");
  auto both = with(fresh_dir("ablate_both"), "ablate");
  both["control"] = "1";
  CHECK_THROWS_AS(Report(l, both, out, test_specs()), std::invalid_argument);
  CHECK_THROWS_WITH_AS(Report(test_lab(), with(fresh_dir("no_ablation"), "ablate"), out, test_specs()), doctest::Contains("no ablation"),
                       std::invalid_argument);
  std::fclose(out);
}

// ---------------------------------------------------------------- dose-response (issue 35, item 5)

TEST_CASE("Report::dose_response: an increasing statistic's trend is supported, a flat noisy one is not; the band is in the JSON and the figure") {
  const std::vector<ClaimSpec> specs = {
      {"testlab", "grows", ClaimKind::Paper, "the statistic rises with the level: its slope is above 0", Compare::Above, 0.0, "Nobody 2024", false},
      {"testlab", "small", ClaimKind::Paper, "the statistic's rank correlation with the level is above 0", Compare::Above, 0.0, "Nobody 2024",
       false, -1.0, 1.0}};
  const Lab l = test_lab();
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const std::vector<double> levels = {1, 2, 4, 8};
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0.0, 1.0);
  auto sweep = [&](double slope, int seeds) {
    std::vector<std::vector<double>> per_seed(static_cast<size_t>(seeds));
    for (auto& s : per_seed)
      for (double x : levels) s.push_back(slope * x + noise(rng));
    return per_seed;
  };
  {
    const fs::path dir = fresh_dir("dose_supported");
    auto s = settings(dir);
    s["seeds"] = "5";
    Report r(l, s, out, specs);
    const DoseResponse up{"level", "level", "statistic", levels, sweep(1.0, 5), TrendKind::Slope, true, ""};
    const std::vector<double> slopes = r.dose_response(up);
    REQUIRE(slopes.size() == 5);
    for (size_t i = 0; i < 5; ++i) CHECK(slopes[i] == doctest::Approx(least_squares_slope(levels, up.per_seed[i])));
    r.paper("grows", slopes, "slopes");
    const DoseResponse rank{"level (rank)", "level", "statistic", levels, sweep(1.0, 5), TrendKind::Rank, false, ""};
    r.paper("small", r.dose_response(rank), "rank correlations");
    CHECK(r.finish() == 0);
    CHECK(r.claims()[0].outcome == Outcome::Supported);
    CHECK(r.claims()[1].outcome == Outcome::Supported);
    const nlohmann::json j = read_json(dir / "testlab.json");
    REQUIRE(j["dose_response"].size() == 2);
    const auto& d = j["dose_response"][0];
    CHECK(d["levels"].size() == 4);
    CHECK(d["trend"] == "slope");
    CHECK(d["trends"].size() == 5);
    const DoseBand b = dose_band(up);
    for (size_t k = 0; k < 4; ++k) {
      std::vector<double> at;
      for (const auto& seed : up.per_seed) at.push_back(seed[k]);
      const Interval iv = t_interval(at);
      CHECK(d["mean"][k].get<double>() == doctest::Approx(iv.mean));
      CHECK(d["lo"][k].get<double>() == doctest::Approx(iv.lo));
      CHECK(d["hi"][k].get<double>() == doctest::Approx(iv.hi));
      CHECK(b.lo[k] < b.mean[k]);
      CHECK(b.mean[k] < b.hi[k]);
    }
    CHECK(j["dose_response"][1]["trend"] == "Spearman rho");
    CHECK(fs::exists(dir / "testlab.svg"));
    CHECK(contents(out).find("dose-response level: slope of the statistic on level per seed") != std::string::npos);
  }
  {
    // Flat and noisy: no trend, so neither claim may be supported.
    Report r(l, settings(fresh_dir("dose_flat")), out, specs);
    r.paper("grows", r.dose_response({"level", "level", "statistic", levels, sweep(0.0, 3), TrendKind::Slope, false, ""}));
    r.paper("small", r.dose_response({"level (rank)", "level", "statistic", levels, sweep(0.0, 3), TrendKind::Rank, false, ""}));
    r.finish();
    CHECK(r.claims()[0].outcome != Outcome::Supported);
    CHECK(r.claims()[1].outcome != Outcome::Supported);
  }
  Report r(l, settings(fresh_dir("dose_bad")), out, specs);
  CHECK_THROWS_AS(r.dose_response({"one", "level", "statistic", levels, sweep(1.0, 1), TrendKind::Slope, false, ""}), std::invalid_argument);
  CHECK_THROWS_AS(r.dose_response({"ragged", "level", "statistic", levels, {{1, 2, 3, 4}, {1, 2, 3}}, TrendKind::Slope, false, ""}),
                  std::invalid_argument);
}


// ---------------------------------------------------------------- the runner's placebo

namespace {

// A toy experiment: arms "a" and "b" (b with a factor of 4 levels); each run's measurement is a draw
// of noise from its seed, plus `effect` in arm b. Its null condition is arm a.
struct Toy {
  double effect = 0;
};
struct ToyRun {
  double x = 0;
  uint64_t seed = 0;
};
void to_json(nlohmann::json& j, const ToyRun& m) { j = {{"x", m.x}}; }
Lab toy_experiment(double effect, int pools) {
  static std::map<uint64_t, int> measured;  // how often each seed was measured, across the test
  Experiment<Toy, NoContext, ToyRun> e{
      .info = {.name = "toyrunner", .title = "t", .reference = "Nobody 2024", .question = "q", .default_seeds = 5,
               .null = {"a", 0}, .null_description = "arm a", .placebo_pools = pools},
      .settings = Fields<Toy>(std::vector<Field<Toy>>{}),
      .arms = [](const Toy&) { return std::vector<ArmSpec>{{"a", {}}, {"b", {1, 2, 3, 4}}}; },
      .measure =
          [effect](const Toy&, NoContext&, const RunKey& k) {
            std::mt19937_64 rng(k.seed);
            std::normal_distribution<double> z(0, 1);
            ++measured[k.seed];
            return ToyRun{z(rng) + (k.cond.arm == "b" ? effect * k.cond.level : 0), k.seed};
          },
      .claims =
          [](const Toy&) {
            ClaimDef<ToyRun> contrast{.spec = {.id = "b_above_a", .kind = ClaimKind::Paper, .statement = "b above a", .side = Compare::Above,
                                               .threshold = 0, .source = "s"},
                                      .per_seed = [](const SeedView<ToyRun>& v) { return v("b", 4).x - v("a").x; }};
            ClaimDef<ToyRun> rising{.spec = {.id = "b_rises", .kind = ClaimKind::Paper, .statement = "b rises", .side = Compare::Above,
                                             .threshold = 0, .source = "s"},
                                    .trend = TrendDef<ToyRun>{"level", "b", [](const ToyRun& m) { return m.x; }, TrendKind::Slope, "level", "x"}};
            ClaimDef<ToyRun> alone{.spec = {.id = "a_alone", .kind = ClaimKind::Paper, .statement = "a near 0", .side = Compare::Below,
                                            .threshold = 10, .source = "s"},
                                   .per_seed = [](const SeedView<ToyRun>& v) { return v("a").x; }};
            return std::vector<ClaimDef<ToyRun>>{contrast, rising, alone};
          }};
  return make_lab(e);
}

nlohmann::json run_toy(const Lab& l, bool control, const std::string& dir, int* code) {
  std::FILE* out = std::tmpfile();
  Report r(l, {{"out", fresh_dir(dir).string()}, {"seeds", "5"}, {"seed", "1"}, {"control", control ? "1" : "0"}}, out);
  l.run(r);
  *code = r.finish();
  std::fclose(out);
  return read_json(fs::path(GRADFLOW_BINARY_DIR) / "test_lab_report" / dir / "toyrunner.json");
}

}  // namespace

TEST_CASE("runner placebo: each claim's own statistic over pools that share no run; no effect passes, a real one fails") {
  int code = -1;
  const nlohmann::json j = run_toy(toy_experiment(0, 60), true, "toy_placebo", &code);
  const auto& ps = j.at("placebo").at("claims");
  const bool within = ps[0].at("rate").get<double>() <= 0.05 && ps[1].at("rate").get<double>() <= 0.05;
  CHECK(code == (within ? 0 : 3));
  REQUIRE(ps.size() == 3);
  CHECK(ps[0].at("id") == "b_above_a");
  CHECK(ps[0].at("splits") == 60);
  CHECK(ps[0].at("pool") == 60 * 5 * 2);  // pools x seeds x the 2 conditions it reads
  CHECK(ps[0].at("rate").get<double>() <= 0.1);  // about 2.5% in expectation (the one-sided 95% rule)
  CHECK(ps[1].at("pool") == 60 * 5 * 4);  // the trend reads 4 levels
  CHECK(ps[1].at("rate").get<double>() <= 0.1);
  CHECK(ps[2].at("splits") == 0);  // one condition against a threshold: no placebo
  CHECK(ps[2].at("how").get<std::string>().find("no placebo") != std::string::npos);
  // The statistic is the claim's own; with every condition replaced by arm a on seeds of its own, a
  // real effect in arm b cannot show, whatever its size.
  const nlohmann::json big = run_toy(toy_experiment(5, 20), true, "toy_placebo_big", &code);
  CHECK(big.at("claims")[0].at("values") == j.at("claims")[0].at("values"));  // the first pool's: the same runs of arm a
  CHECK(big.at("claims")[1].at("values") == j.at("claims")[1].at("values"));
  // The lab itself, with the effect, finds it.
  const nlohmann::json lab = run_toy(toy_experiment(5, 20), false, "toy_lab", &code);
  CHECK(lab.at("claims")[0].at("outcome") == "supported");
  CHECK(lab.at("claims")[1].at("outcome") == "supported");
  CHECK(lab.at("data").at("runs").size() == 5 * 5);  // 5 conditions x 5 seeds, each kept
}

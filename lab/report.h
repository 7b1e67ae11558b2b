#pragma once
// What a lab fills while it runs: settings in, and out the printed tables, the figure (NAME.svg),
// the raw numbers (NAME.json) and the claims of lab/claims.cpp's table, each tested against the
// lab's own numbers. The last line printed is the verdict, which counts paper claims only:
//   check: AGREES with Xiong et al. 2020 ...: 3 of 3 paper claims hold (2 exact checks pass)
//   check: DISAGREES with ...: 2 of 3 paper claims hold (2 exact checks pass); fails: postln_grows
// and, under --control (the same protocol with the paper's causal ingredient removed, or made equal
// in both arms; Report::control()), first a line "control: <what was removed>", then
//   check: DISAGREES with ... (control: Pre-LN in both arms): 0 of 3 paper claims hold; fails: ...
// A lab with no paper claim prints "demonstration: N exact checks pass" and must say why.
//
// The API (stable; issue 27):
//   r.paper("postln_grows", per_seed);   // one statistic per seed; holds when its t 95% interval
//                                        // lies strictly on the spec's side of its threshold
//   r.paper("id", interval);             // an interval computed otherwise (bootstrap_interval)
//   r.check("id", value);                // an exact property: value against the threshold
// A claim id that is not among the lab's rows of lab/claims.cpp, or of the other kind, a claim
// reported twice, and a row never reported are std::logic_error (bugs of the lab).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/lab.h"
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

// A 95% interval of a mean across seeds (seeds are the unit of replication).
struct Interval {
  // Constructors, not an aggregate, so that r.paper("id", {1.2, 1.5, 1.4}) means the per-seed values.
  Interval() = default;
  Interval(double mean, double lo, double hi, int n, std::string method) : mean(mean), lo(lo), hi(hi), n(n), method(std::move(method)) {}
  double mean = 0, lo = 0, hi = 0;
  int n = 0;
  std::string method;  // "t 95%", "bootstrap 95%" or, for an exact check, "exact"
};
// Student t: mean +- t(0.975, n - 1) * sd / sqrt(n). Throws std::invalid_argument for n < 2.
// A non-finite value gives a NaN interval (which lies on no side of a threshold).
Interval t_interval(const std::vector<double>& per_seed);
// Percentile bootstrap of the mean: 10,000 resamples with replacement drawn from `seed`, the
// 2.5% and 97.5% points of their means. Throws std::invalid_argument for n < 2.
Interval bootstrap_interval(const std::vector<double>& values, uint64_t seed);
// t(0.975, df), the two-sided 95% quantile of Student's t (df >= 1).
double t_quantile_975(int df);

struct Claim {
  ClaimSpec spec;              // its row of lab/claims.cpp
  bool holds = false;          // computed from this run's numbers
  Interval interval;           // paper: across seeds; check: mean = lo = hi = the value, n 1, "exact"
  std::vector<double> values;  // paper: the per-seed values (empty when an interval was given)
  std::string evidence;        // the numbers behind the verdict
};

class Report {
 public:
  // settings: every option of the lab by name (defaults filled in), plus "out", "seeds", "seed",
  // and optionally "control" ("1": the lab's negative control; lab.control says what it removes).
  // The claims are the lab's rows of claim_specs().
  Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out = stdout);
  // The same with the claims given (the tests' labs, which have no rows in the table).
  Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out, std::vector<ClaimSpec> specs);

  // ---- settings ----
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  bool on(const std::string& name) const;
  int seeds() const;                    // --seeds (>= 1)
  bool control() const;                 // --control: run the protocol without the causal ingredient
  uint64_t seed(int i) const;           // --seed + i: the i-th run's seed
  const std::string& out_dir() const { return out_dir_; }
  const Lab& lab() const { return lab_; }

  // ---- output ----
  void section(const std::string& title);  // a heading line
  void say(const std::string& line);       // printed, and kept in the JSON's "log"
  void print(const Table& table);          // printed aligned, and kept in the JSON's "tables"
  nlohmann::json& data() { return json_["data"]; }  // raw numbers, free-form
  void add_panel(Panel panel) { panels_.push_back(std::move(panel)); }  // drawn into NAME.svg
  // Another file in the output folder (a .dot, an attention map); listed in the JSON's "files".
  void write_file(const std::string& name, const std::string& content);
  // ---- claims (lab/claims.h) ----
  // A paper claim from one value of its statistic per seed (t interval; needs >= 2 values).
  void paper(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence = "");
  // A paper claim from an interval computed by the lab (e.g. bootstrap_interval over sentences).
  void paper(const std::string& id, const Interval& interval, const std::string& evidence = "");
  // An exact check: `value` against the row's threshold.
  void check(const std::string& id, double value, const std::string& evidence = "");
  const std::vector<Claim>& claims() const { return claims_; }
  const std::vector<ClaimSpec>& specs() const { return specs_; }

  // Writes NAME.json and NAME.svg, prints where, and the verdict line. Returns 0 when every paper
  // claim holds and every exact check passes, 3 otherwise. Throws std::logic_error when the lab
  // made no claim or left one of its rows unreported.
  int finish();
  const std::string& verdict() const { return verdict_; }  // the verdict line, once finish() ran

 private:
  void require_setting(const std::string& name) const;
  const ClaimSpec& spec(const std::string& id, ClaimKind kind) const;
  void record(Claim c);
  std::string verdict_line(bool* agrees) const;

  const Lab& lab_;
  std::map<std::string, std::string> settings_;
  std::FILE* out_;
  std::string out_dir_;
  nlohmann::json json_;
  std::vector<Panel> panels_;
  std::vector<ClaimSpec> specs_;
  std::string verdict_;
  std::vector<Claim> claims_;
  std::vector<std::string> files_;
  double start_seconds_;
};

}  // namespace gf::lab

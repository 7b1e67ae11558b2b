#pragma once
// What a lab fills while it runs: settings in, and out the printed tables, the figure (NAME.svg),
// the raw numbers (NAME.json) and the claims of lab/claims.cpp's table, each tested against the
// lab's own numbers. The last line printed is the verdict, which counts paper claims in three
// outcomes (issue 35):
//   check: AGREES with Xiong et al. 2020 ...: supports 7, contradicts 0, unsettled 0 of 7 paper claims
//   check: UNSETTLED for ...: supports 5, contradicts 0, unsettled 2 of 7 paper claims; unsettled: a, b
//   check: DISAGREES with ...: supports 5, contradicts 1, unsettled 1 of 7 paper claims; contradicted: c
// A paper claim is *supported* when its interval lies strictly on the claimed side of its
// threshold, *contradicted* when it lies strictly on the other side, and *unsettled* when it
// contains the threshold. The intervals that decide are Holm-adjusted across the lab's paper claims
// (a family-wise 95%), so a lab with seven claims asks more of each than a lab with one.
// Under each paper claim a design line (issue 35, item 2): "designed to settle an effect of E with N
// seeds (pilot sd S, Holm level a); this run has n", from the claim's min_effect and pilot_sd
// (lab/claims.h, seeds_needed below); an unsettled claim with n < N is "unsettled by design".
// Exit codes (finish()): 0 every paper claim supported and every exact check passing; 3 a claim
// contradicted or an exact check failing; 4 otherwise (something unsettled).
// Under --control (the same protocol with the paper's causal ingredient removed, or made equal in
// both arms; Report::control()), a line "control: <what was removed>" comes first, and the claims
// marked control_targets must not be supported.
// A lab with no paper claim prints "demonstration: N exact checks pass" and must say why.
//
// The API (stable; issue 27):
//   r.paper("postln_grows", per_seed);   // one statistic per seed: a t interval, Holm-adjusted
//   r.paper("id", interval);             // an interval computed otherwise (not Holm-adjusted)
//   r.check("id", value);                // an exact property: value against the threshold
// A claim id that is not among the lab's rows of lab/claims.cpp, or of the other kind, a claim
// reported twice, and a row never reported are std::logic_error (bugs of the lab).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/stats.h"
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

// A placebo (--control of a lab with Lab::placebo): one paper claim's statistic between two groups of
// different seeds of the same arm, over many splits of one pool of runs.
struct Placebo {
  std::string id;
  std::string how;  // which arm, and which run plays which side
  int pool = 0, group = 0, splits = 0, supported = 0, contradicted = 0;
  double rate() const { return splits > 0 ? static_cast<double>(supported) / splits : NAN; }  // the false-positive rate
};
constexpr int kPlaceboSplits = 100;
constexpr double kPlaceboMaxRate = 0.05;

// ---- dose-response (issue 35, item 5) ----
// A lab with a causal factor measures its main statistic at 4 or more levels of it, per seed, and
// states its claim as the trend: one number per seed, decided by the paper-claim machinery
// (r.paper(id, trends)). Three ways to read a trend:
//  - Slope: the least-squares slope of the statistic on the level, for a factor that adds (a length,
//    a count of steps at one spacing);
//  - LogSlope: the slope on log2(level), per doubling, for a factor that multiplies (d_k, a learning
//    rate, epsilon swept by factors): its levels are spaced by ratios, and a slope on the raw level
//    would be set by the largest two;
//  - Rank: Spearman's rank correlation of the statistic with the level, for a bounded or ordinal
//    statistic, or one whose response need not be linear in any scale (a share, an accuracy).
struct DoseResponse {
  std::string name;       // key in NAME.json's "dose_response" and the claim's subject, e.g. "d_k"
  std::string factor;     // the x axis, "d_k (log)"
  std::string statistic;  // the y axis, "log10 |d scores| / |d p|, median row"
  std::vector<double> levels;                 // >= 4, strictly increasing
  std::vector<std::vector<double>> per_seed;  // [seed][level]: the statistic
  TrendKind kind = TrendKind::Slope;
  bool log_x = false;     // draw the levels on a log axis
  std::string color;      // "" : the palette's
};
// The mean statistic per level across seeds with its 95% t interval (the band of the figure).
struct DoseBand {
  std::vector<double> mean, lo, hi;
};
DoseBand dose_band(const DoseResponse& d);

struct Claim {
  ClaimSpec spec;              // its row of lab/claims.cpp
  bool holds = false;          // paper: supported; check: passes (decided in finish())
  Interval interval;           // paper: the 95% t interval across seeds, clipped to the statistic's
                               // range; check: mean = lo = hi = the value, n 1, "exact"
  std::vector<double> values;  // paper: the per-seed values (empty when an interval was given)
  std::string evidence;        // the numbers behind the verdict
  Outcome outcome = Outcome::Unsettled;  // paper: decided in finish() (check: supported or contradicted)
  Interval decisive;           // paper: the Holm-adjusted interval that decided it
  Interval bootstrap;          // a bounded statistic's percentile bootstrap (n 0 when not computed)
  int seeds_to_settle = -1;    // paper, unsettled: seeds_to_settle() at the level it was held to
  // The design (a paper claim whose row states min_effect and pilot_sd; lab/claims.h): the seeds that
  // would settle an effect of min_effect at design_alpha (seeds_needed), and whether the claim is
  // unsettled by design (unsettled, with fewer seeds than that: the run could not have settled its
  // smallest effect, so "unsettled" says nothing against the claim).
  int seeds_needed = 0;        // 0: no design stated
  double design_alpha = 0;
  bool by_design = false;
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
  bool control() const;                 // --control: the lab's placebo, or its ablation where it has no placebo
  bool ablate() const;                  // --ablate: the protocol without the causal ingredient (Lab::ablation)
  // Either way the causal ingredient is removed and the control's targets must not be supported.
  bool ablation_mode() const { return ablate() || (control() && !lab_.placebo); }
  uint64_t seed(int i) const;           // --seed + i: the i-th run's seed
  // --models: the trained run folders, one a seed (then seeds() is their number); empty otherwise.
  std::vector<std::string> models() const;
  std::string model(int i) const;       // the i-th seed's folder ("" without --models)
  const std::string& out_dir() const { return out_dir_; }
  const std::map<std::string, std::string>& settings() const { return settings_; }
  // The placebo's pools: --pools when given, else the lab's own number.
  int placebo_pools(int lab_default) const;
  const Lab& lab() const { return lab_; }

  // ---- output ----
  void section(const std::string& title);  // a heading line
  void say(const std::string& line);       // printed, and kept in the JSON's "log"
  void progress(const std::string& line);  // printed only (a run's time: not a result)
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
  // A check that every seed must pass (arithmetic that holds seed by seed, not a mean): decided on
  // the worst seed's value; the per-seed values are kept.
  void check(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence);
  const std::vector<Claim>& claims() const { return claims_; }
  // A dose-response (above): draws the mean statistic per level with its 95% band across seeds as a
  // panel of NAME.svg, keeps the series in NAME.json's "dose_response" (the HTML page draws it from
  // there), prints the per-level table, and returns one trend per seed for r.paper(id, trends).
  // Throws std::invalid_argument for fewer than 2 seeds or a seed with a value per level missing.
  std::vector<double> dose_response(const DoseResponse& d);
  // ---- the placebo (--control of a lab with Lab::placebo) ----
  bool placebo_mode() const { return control() && lab_.placebo; }
  // The runs of one arm the lab makes for its placebo, at seeds seed(0) .. seed(pool - 1): twice
  // the lab's seeds and two more, so that the splits differ in more than their order.
  int placebo_pool() const { return 2 * seeds() + 2; }
  // A paper claim's placebo: `stat(a, b)` is its statistic with pool run a in the first arm's place
  // and run b in the second's. kPlaceboSplits random splits of the pool into two disjoint groups of
  // seeds() runs, paired in order, each decided by the plain 95% rule (no Holm: the most lenient
  // level a claim can be held to); the share called supported is the false-positive rate. The
  // first split's values are also reported as the claim (so the control's JSON has every claim).
  void placebo(const std::string& id, const std::function<double(int a, int b)>& stat, const std::string& how);
  // A trend claim's placebo: runs of ONE level of the factor, each on its own seed, assigned to the
  // level labels, so that the true trend is zero. `trend_of(runs)` is the claim's per-seed trend with
  // pool run runs[j] at level j. kPlaceboSplits random draws, each giving every one of the seeds()
  // placebo seeds `levels` runs of its own (no run twice in a split: a pool of at least seeds() x
  // levels runs, trend_placebo_pool()), decided by the plain 95% rule; the first draw is reported.
  int trend_placebo_pool(int levels) const { return seeds() * levels + 2; }
  void placebo_trend(const std::string& id, int levels, const std::function<double(const std::vector<int>& runs)>& trend_of,
                     const std::string& how);
  // A paper claim that is no contrast between arms (one arm's statistic against a threshold) has no
  // placebo: it is listed with the reason, and is not counted in the placebo's verdict.
  void no_placebo(const std::string& id, const std::string& why);
  // A placebo the runner computed (lab/runner.h): its counts, and its first pool's values reported as the claim.
  void record_placebo(const Placebo& p, const std::vector<double>& first);
  const std::vector<Placebo>& placebos() const { return placebos_; }
  const std::vector<ClaimSpec>& specs() const { return specs_; }

  // Decides the paper claims (Holm across the lab's), prints them, writes NAME.json and NAME.svg,
  // prints where, and the verdict line. Returns 0 when every paper claim is supported and every
  // exact check passes, 3 when a claim is contradicted or a check fails, 4 otherwise. Throws
  // std::logic_error when the lab made no claim or left one of its rows unreported.
  int finish();
  const std::string& verdict() const { return verdict_; }  // the verdict line, once finish() ran

 private:
  void require_setting(const std::string& name) const;
  const ClaimSpec& spec(const std::string& id, ClaimKind kind) const;
  void record(Claim c);
  // The placebo's loop: `stat(order)` is one split's value for placebo seed i from the shuffled pool.
  void run_placebo(const std::string& id, int pool, const std::function<double(const std::vector<int>& order, int i)>& stat,
                   const std::string& how);
  void decide_paper_claims();
  void apply_designs();
  std::string design_line(const Claim& c) const;
  void print_claim(const Claim& c) const;
  std::string verdict_line(int* code) const;

  const Lab& lab_;
  std::map<std::string, std::string> settings_;
  std::FILE* out_;
  std::string out_dir_;
  nlohmann::json json_;
  std::vector<Panel> panels_;
  std::vector<ClaimSpec> specs_;
  std::string verdict_;
  std::vector<Claim> claims_;
  std::vector<Placebo> placebos_;
  nlohmann::json dose_ = nlohmann::json::array();
  std::vector<std::string> files_;
  double start_seconds_;
};

}  // namespace gf::lab

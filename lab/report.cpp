#include "lab/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>

#include "lab/common.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"

namespace gf::lab {
namespace {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

nlohmann::json cell_json(const Cell& c) {
  if (!c.is_number) return c.text;
  if (!std::isfinite(c.number)) return fmt::format("{}", c.number);  // "nan", "inf": JSON has no such numbers
  if (c.integral) return static_cast<int64_t>(c.number);
  return c.number;
}

// NaN and infinities become JSON null (JSON has no such numbers).
nlohmann::json number_json(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

std::string num(double x) { return fmt::format("{:.4g}", x); }

}  // namespace

// ---------------------------------------------------------------- dose-response

DoseBand dose_band(const DoseResponse& d) {
  DoseBand b;
  for (size_t k = 0; k < d.levels.size(); ++k) {
    std::vector<double> at;
    for (const auto& seed : d.per_seed) {
      GF_CHECK(seed.size() == d.levels.size(), "dose-response '{}': a seed has {} values for {} levels", d.name, seed.size(), d.levels.size());
      at.push_back(seed[k]);
    }
    const Interval iv = t_interval(at);
    b.mean.push_back(iv.mean), b.lo.push_back(iv.lo), b.hi.push_back(iv.hi);
  }
  return b;
}

// ---------------------------------------------------------------- cells and tables

std::string Cell::str() const {
  if (!is_number) return text;
  if (integral) return fmt::format("{}", static_cast<int64_t>(number));
  if (number == 0) return "0";
  return fmt::format("{:.4g}", number);
}

Table& Table::row(std::vector<Cell> cells) {
  GF_CHECK(cells.size() == columns.size(), "table '{}': a row of {} cells for {} columns", name, cells.size(), columns.size());
  rows.push_back(std::move(cells));
  return *this;
}

Report::Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out)
    : Report(lab, std::move(settings), out, lab.claims.empty() ? claim_specs_of(lab.name) : lab.claims) {}

Report::Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out, std::vector<ClaimSpec> specs)
    : lab_(lab), settings_(std::move(settings)), out_(out), specs_(std::move(specs)), start_seconds_(now_seconds()) {
  for (const char* common : {"out", "seeds", "seed"}) require_setting(common);
  for (const Option& o : lab.options) require_setting(o.name);
  out_dir_ = settings_.at("out");
  GF_CHECK(seeds() >= 1, "lab {}: --seeds must be at least 1, got {}", lab.name, seeds());
  json_["lab"] = lab.name;
  json_["title"] = lab.title;
  json_["reference"] = lab.reference;
  GF_CHECK(!control() || !lab.control.empty(), "lab {} has no negative control (--control)", lab.name);
  GF_CHECK(!ablate() || !lab.ablation.empty(), "lab {} has no ablation (--ablate)", lab.name);
  GF_CHECK(!(ablate() && control()), "lab {}: --control and --ablate are two runs; give one", lab.name);
  json_["settings"] = settings_;
  json_["control"] = control() || ablate();  // either way a control run (lab_page.cpp pairs it with its lab)
  json_["control_removes"] = ablate() ? lab.ablation : lab.control;
  json_["ablate"] = ablate();
  json_["threads"] = max_threads();
  json_["blas_core"] = blas_core_in_use();
  json_["log"] = nlohmann::json::array();
  json_["tables"] = nlohmann::json::object();
  json_["data"] = nlohmann::json::object();
  fmt::print(out_, "lab {}: {}\n  {}\n  {}\n", lab.name, lab.title, lab.reference, lab.question);
  if (ablate())
    fmt::print(out_, "control: {} (an ablation: the claims marked as its targets must not be supported)\n", lab.ablation);
  if (control())
    fmt::print(out_, "control: {} ({})\n", lab.control,
               lab.placebo ? "a placebo: each paper claim's contrast between two groups of seeds of one arm, which the rule must call "
                             "supported in at most 5% of splits"
                           : "a negative control: the claims marked as its targets must not be supported");
  std::fflush(out_);
}

void Report::require_setting(const std::string& name) const {
  GF_CHECK_AS(std::logic_error, settings_.count(name), "lab {}: setting '{}' was not given", lab_.name, name);
}

int64_t Report::integer(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == v.size(), "lab {}: --{} expects an integer, got '{}'", lab_.name, name, v);
  return x;
}

double Report::real(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == v.size(), "lab {}: --{} expects a number, got '{}'", lab_.name, name, v);
  return x;
}

const std::string& Report::text(const std::string& name) const {
  require_setting(name);
  return settings_.at(name);
}

bool Report::on(const std::string& name) const {
  require_setting(name);
  const std::string& v = settings_.at(name);
  return v == "1" || v == "true" || v == "on";
}

int Report::seeds() const { return models().empty() ? static_cast<int>(integer("seeds")) : static_cast<int>(models().size()); }

std::vector<std::string> Report::models() const {
  std::vector<std::string> out;
  if (!settings_.count("models")) return out;
  std::stringstream in(settings_.at("models"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string Report::model(int i) const {
  const auto m = models();
  return m.empty() ? "" : m.at(static_cast<size_t>(i));
}

bool Report::control() const { return settings_.count("control") && on("control"); }

bool Report::ablate() const { return settings_.count("ablate") && on("ablate"); }

uint64_t Report::seed(int i) const { return static_cast<uint64_t>(integer("seed")) + static_cast<uint64_t>(i); }

void Report::section(const std::string& title) {
  fmt::print(out_, "\n== {}\n", title);
  json_["log"].push_back("== " + title);
  std::fflush(out_);
}

void Report::say(const std::string& line) {
  fmt::print(out_, "{}\n", line);
  json_["log"].push_back(line);
  std::fflush(out_);
}

void Report::progress(const std::string& line) {
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);
}

int Report::placebo_pools(int lab_default) const {
  const int pools = settings_.count("pools") && !settings_.at("pools").empty() ? static_cast<int>(integer("pools")) : lab_default;
  GF_CHECK(pools >= 1, "lab {}: --pools must be at least 1, got {}", lab_.name, pools);
  return pools;
}

void Report::print(const Table& t) {
  std::vector<size_t> width(t.columns.size());
  for (size_t c = 0; c < t.columns.size(); ++c) width[c] = t.columns[c].size();
  for (const auto& r : t.rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].str().size());
  std::string s;
  for (size_t c = 0; c < t.columns.size(); ++c) s += fmt::format("{}{:>{}}", c ? "  " : "", t.columns[c], width[c]);
  s += "\n";
  for (const auto& r : t.rows) {
    for (size_t c = 0; c < r.size(); ++c)
      s += r[c].is_number ? fmt::format("{}{:>{}}", c ? "  " : "", r[c].str(), width[c]) : fmt::format("{}{:<{}}", c ? "  " : "", r[c].str(), width[c]);
    s += "\n";
  }
  fmt::print(out_, "{}", s);
  std::fflush(out_);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : t.rows) {
    nlohmann::json row = nlohmann::json::array();
    for (const auto& c : r) row.push_back(cell_json(c));
    rows.push_back(row);
  }
  // A name printed again (a table per seed) gets a number instead of replacing the first one's numbers.
  std::string key = t.name;
  for (int k = 2; json_["tables"].contains(key); ++k) key = fmt::format("{} ({})", t.name, k);
  json_["tables"][key] = {{"columns", t.columns}, {"rows", rows}};
}

void Report::write_file(const std::string& name, const std::string& content) {
  std::filesystem::create_directories(out_dir_);
  const std::string path = (std::filesystem::path(out_dir_) / name).string();
  write_file_atomic(path, content);
  files_.push_back(path);
}

std::vector<double> Report::dose_response(const DoseResponse& d) {
  GF_CHECK(d.per_seed.size() >= 2, "lab {}: dose-response '{}' needs 2 or more seeds, got {}", lab_.name, d.name, d.per_seed.size());
  const DoseBand b = dose_band(d);
  std::vector<double> trends;
  for (const auto& seed : d.per_seed) trends.push_back(trend(d.levels, seed, d.kind));
  Table t("dose-response: " + d.name, {d.factor, d.statistic + ": mean", "95% lo", "95% hi"});
  for (size_t k = 0; k < d.levels.size(); ++k) t.row({d.levels[k], b.mean[k], b.lo[k], b.hi[k]});
  print(t);
  say(fmt::format("dose-response {}: {} of the statistic on {} per seed: {:.4g}", d.name, trend_name(d.kind),
                  d.kind == TrendKind::LogSlope ? "log2(" + d.factor + ")" : d.factor, fmt::join(trends, ", ")));
  // The legend in a bottom corner the line leaves free: left when it falls, right when it rises.
  const Chart::Corner corner = b.mean.back() < b.mean.front() ? Chart::Corner::BottomLeft : Chart::Corner::BottomRight;
  add_panel(Chart{fmt::format("dose-response: {} (band: 95% t, {} seeds)", d.name, d.per_seed.size()), d.factor, d.statistic, d.log_x, false,
                  {ChartSeries{"mean over seeds", d.levels, b.mean, b.lo, b.hi, false, d.color}}, d.levels, corner});
  nlohmann::json per_seed = nlohmann::json::array(), tr = nlohmann::json::array();
  for (const auto& seed : d.per_seed) {
    nlohmann::json row = nlohmann::json::array();
    for (double v : seed) row.push_back(number_json(v));
    per_seed.push_back(row);
  }
  for (double v : trends) tr.push_back(number_json(v));
  auto series = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(number_json(x));
    return a;
  };
  dose_.push_back({{"name", d.name}, {"factor", d.factor}, {"statistic", d.statistic}, {"levels", series(d.levels)}, {"mean", series(b.mean)},
                   {"lo", series(b.lo)}, {"hi", series(b.hi)}, {"band", "t 95% over seeds"}, {"per_seed", per_seed},
                   {"trend", trend_name(d.kind)}, {"trends", tr}, {"log_x", d.log_x}});
  return trends;
}

// ---------------------------------------------------------------- claims

const ClaimSpec& Report::spec(const std::string& id, ClaimKind kind) const {
  std::vector<std::string> known;
  for (const auto& c : specs_) {
    if (c.id == id) {
      GF_CHECK_AS(std::logic_error, c.kind == kind, "lab {}: claim '{}' is a {} claim in lab/claims.cpp, reported as a {}", lab_.name, id,
                  kind_name(c.kind), kind_name(kind));
      return c;
    }
    known.push_back(c.id);
  }
  GF_FAIL_AS(std::logic_error, "lab {}: no claim '{}' in lab/claims.cpp (its claims: {})", lab_.name, id,
             known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", ")));
}

void Report::record(Claim c) {
  for (const auto& d : claims_)
    GF_CHECK_AS(std::logic_error, d.spec.id != c.spec.id, "lab {}: claim '{}' reported twice", lab_.name, c.spec.id);
  claims_.push_back(std::move(c));
}

// The design's line under a paper claim (lab/report.h, seeds_needed), and for an unsettled claim
// with fewer seeds than that, why its outcome is "unsettled by design".
std::string Report::design_line(const Claim& c) const {
  if (c.seeds_needed == 0) return "          design: no smallest effect stated for this claim (lab/claims.cpp)\n";
  const std::string needed = c.seeds_needed >= 1000 ? "1000 or more" : std::to_string(c.seeds_needed);
  std::string line = fmt::format("          designed to settle an effect of {} with {} seeds (pilot sd {}, Holm level {:.3g}); this run has {}\n",
                                 num(c.spec.min_effect), needed, num(c.spec.pilot_sd), c.design_alpha, c.interval.n);
  if (c.by_design)
    line += fmt::format("          unsettled by design: needs {} seeds for its smallest effect ({} beyond the threshold); the run has {}\n", needed,
                        num(c.spec.min_effect), c.interval.n);
  return line;
}

void Report::print_claim(const Claim& c) const {
  const bool paper = c.spec.kind == ClaimKind::Paper;
  const Interval& iv = c.interval;
  const char* tag = !paper                                  ? (c.holds ? "passes" : "FAILS")
                    : c.outcome == Outcome::Supported        ? "supported"
                    : c.outcome == Outcome::Contradicted     ? "CONTRADICTED"
                    : c.by_design                            ? "unsettled by design"
                                                             : "unsettled";
  std::string line = fmt::format("  [{}] {} {}: {}\n", tag, kind_name(c.spec.kind), c.spec.id, c.spec.statement);
  if (!paper) {
    line += fmt::format("          {} (exact) {} {}; {}\n", num(iv.mean), side_symbol(c.spec.side), num(c.spec.threshold), c.spec.source);
  } else {
    line += fmt::format("          {} [{}, {}] ({}, n {}) {} {}{}; {}\n", num(iv.mean), num(iv.lo), num(iv.hi), iv.method, iv.n,
                        side_symbol(c.spec.side), num(c.spec.threshold), c.spec.control_targets ? ", a target of the control" : "", c.spec.source);
    if (c.decisive.n > 0)
      line += fmt::format("          decided on [{}, {}] ({}, Holm-adjusted across the lab's paper claims)\n", num(c.decisive.lo), num(c.decisive.hi),
                          c.decisive.method);
    if (c.bootstrap.n > 0) line += fmt::format("          bootstrap [{}, {}] ({}, beside the t interval)\n", num(c.bootstrap.lo), num(c.bootstrap.hi), c.bootstrap.method);
    if (!c.values.empty()) {
      std::vector<std::string> v;
      for (double x : c.values) v.push_back(num(x));
      line += fmt::format("          per seed: {}\n", fmt::join(v, ", "));
    }
    if (c.seeds_to_settle == 0)
      line += "          unsettled: the mean sits on the threshold (or a value is not finite); more seeds would not settle it\n";
    else if (c.seeds_to_settle > 0)
      line += fmt::format("          unsettled at n {}: an effect of this size ({} from the threshold) with this spread would need {}{} seeds to be settled "
                          "at the level it was held to\n",
                          iv.n, num(std::abs(iv.mean - c.spec.threshold)), c.seeds_to_settle >= 1000 ? "1000 or more" : "about ",
                          c.seeds_to_settle >= 1000 ? std::string() : std::to_string(c.seeds_to_settle));
    line += design_line(c);
  }
  if (!c.evidence.empty()) line += fmt::format("          {}\n", c.evidence);
  fmt::print(out_, "{}", line);
}

void Report::paper(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Paper);
  GF_CHECK(per_seed.size() >= 2, "lab {}: paper claim '{}' needs its statistic from at least 2 seeds (an interval across seeds), got {}: "
           "run with --seeds 2 or more", lab_.name, id, per_seed.size());
  Claim c{s, false, t_interval_at(per_seed, 0.95, s.range_lo, s.range_hi), per_seed, evidence, Outcome::Unsettled, {}, {}};
  c.interval.method = "t 95%";
  if (s.bounded()) {
    c.bootstrap = bootstrap_interval(per_seed, std::hash<std::string>{}(lab_.name + "/" + id));
    c.bootstrap.lo = std::clamp(c.bootstrap.lo, s.range_lo, s.range_hi), c.bootstrap.hi = std::clamp(c.bootstrap.hi, s.range_lo, s.range_hi);
  }
  record(std::move(c));
}

void Report::paper(const std::string& id, const Interval& interval, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Paper);
  GF_CHECK(interval.n >= 2, "lab {}: paper claim '{}' needs an interval over at least 2 values, got n {}", lab_.name, id, interval.n);
  Claim c{s, false, interval, {}, evidence, Outcome::Unsettled, {}, {}};
  c.interval.lo = std::clamp(c.interval.lo, s.range_lo, s.range_hi), c.interval.hi = std::clamp(c.interval.hi, s.range_lo, s.range_hi);
  record(std::move(c));
}

void Report::check(const std::string& id, double value, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Check);
  const bool passes = on_claimed_side(s, value);
  Claim c{s, passes, {value, value, value, 1, "exact"}, {value}, evidence, Outcome::Unsettled, {}, {}};
  c.outcome = passes ? Outcome::Supported : Outcome::Contradicted;
  record(std::move(c));
}

// The seed-to-seed sd, from the 95% interval's half-width (report.h says what this returns).
// Each designed paper claim's seeds_needed at the lab's design level, and whether its unsettled
// outcome is by design: it had fewer seeds than its smallest effect needs.
void Report::apply_designs() {
  const int m = static_cast<int>(std::count_if(specs_.begin(), specs_.end(), [](const ClaimSpec& s) { return s.kind == ClaimKind::Paper; }));
  if (m == 0) return;
  for (auto& c : claims_) {
    if (c.spec.kind != ClaimKind::Paper || !c.spec.designed()) continue;
    c.design_alpha = design_alpha(m);
    c.seeds_needed = seeds_needed(c.spec.min_effect, c.spec.pilot_sd, c.design_alpha);
    c.by_design = c.outcome == Outcome::Unsettled && c.interval.n < c.seeds_needed;
  }
}

// Holm's step-down across the lab's paper claims with per-seed values, at a family-wise two-sided
// 5%: sorted by their smaller one-sided p-value, the k-th of m is decided when that p-value is
// below 0.025 / (m - k), and the first that is not stops the descent, leaving it and every later
// one unsettled. Each claim's decisive interval is the t interval at the level it was held to
// (those after the stop: the stopping level), so the printed interval and the outcome agree. A claim
// given as an interval (no per-seed values) is decided on that interval alone.
void Report::decide_paper_claims() {
  std::vector<Claim*> tested;
  for (auto& c : claims_) {
    if (c.spec.kind != ClaimKind::Paper) continue;
    if (c.values.empty()) {
      const bool finite = std::isfinite(c.interval.lo) && std::isfinite(c.interval.hi);
      const bool sup = finite && on_claimed_side(c.spec, c.spec.side == Compare::Above ? c.interval.lo : c.interval.hi);
      const bool con = finite && (c.spec.side == Compare::Above ? c.interval.hi < c.spec.threshold : c.interval.lo > c.spec.threshold);
      c.outcome = sup ? Outcome::Supported : con ? Outcome::Contradicted : Outcome::Unsettled;
    } else {
      tested.push_back(&c);
    }
  }
  const size_t m = tested.size();
  std::vector<std::pair<double, Claim*>> order;
  for (Claim* c : tested) {
    const SidePValues p = side_p_values(c->spec.side, c->spec.threshold, c->values);
    order.push_back({std::min(p.supported, p.contradicted), c});
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  bool stopped = false;
  double alpha = 0.05;
  for (size_t k = 0; k < m; ++k) {
    Claim& c = *order[k].second;
    if (!stopped) alpha = 0.05 / static_cast<double>(m - k);
    c.outcome = stopped ? Outcome::Unsettled : decide(c.spec.side, c.spec.threshold, c.values, alpha);
    if (c.outcome == Outcome::Unsettled) stopped = true;
    c.decisive = t_interval_at(c.values, 1 - alpha, c.spec.range_lo, c.spec.range_hi);
    if (c.outcome == Outcome::Unsettled) c.seeds_to_settle = seeds_to_settle(c.spec.threshold, c.values, alpha);
  }
  for (auto& c : claims_)
    if (c.spec.kind == ClaimKind::Paper) c.holds = c.outcome == Outcome::Supported;
  apply_designs();
}

void Report::check(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Check);
  GF_CHECK(!per_seed.empty(), "lab {}: check '{}' got no value", lab_.name, id);
  double worst = per_seed.front();
  for (double x : per_seed) {
    if (!std::isfinite(x)) worst = NAN;
    if (std::isfinite(worst)) worst = s.side == Compare::Above ? std::min(worst, x) : std::max(worst, x);
  }
  check(id, worst, evidence);
  claims_.back().values = per_seed;
}

void Report::run_placebo(const std::string& id, int pool, const std::function<double(const std::vector<int>&, int)>& stat,
                         const std::string& how) {
  const ClaimSpec& s = spec(id, ClaimKind::Paper);
  GF_CHECK_AS(std::logic_error, placebo_mode(), "lab {}: placebo '{}' outside --control of a placebo lab", lab_.name, id);
  const int n = seeds();
  GF_CHECK(n >= 2, "lab {}: a placebo needs --seeds 2 or more, got {}", lab_.name, n);
  Placebo p{id, how, pool, n, kPlaceboSplits, 0, 0};
  std::mt19937_64 rng(static_cast<uint64_t>(integer("seed")) * 1000003u + std::hash<std::string>{}(id));
  std::vector<int> order(static_cast<size_t>(pool));
  std::vector<double> first;
  for (int split = 0; split < kPlaceboSplits; ++split) {
    for (int i = 0; i < pool; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<double> values;
    for (int i = 0; i < n; ++i) values.push_back(stat(order, i));
    const Outcome o = decide(s.side, s.threshold, values, 0.05);
    p.supported += o == Outcome::Supported, p.contradicted += o == Outcome::Contradicted;
    if (split == 0) first = values;
  }
  placebos_.push_back(p);
  paper(id, first, fmt::format("placebo, the first of {} splits: {}; supported in {} of {} splits ({:.0f}%)", kPlaceboSplits, how, p.supported,
                               p.splits, 100 * p.rate()));
}

void Report::placebo(const std::string& id, const std::function<double(int, int)>& stat, const std::string& how) {
  const int n = seeds();
  // Two disjoint groups of n runs, paired in order: unpaired in seed.
  run_placebo(id, placebo_pool(), [&](const std::vector<int>& order, int i) {
    return stat(order[static_cast<size_t>(i)], order[static_cast<size_t>(n + i)]);
  }, how);
}

void Report::placebo_trend(const std::string& id, int levels, const std::function<double(const std::vector<int>&)>& trend_of,
                           const std::string& how) {
  GF_CHECK(levels >= 4, "lab {}: a trend's placebo needs 4 or more levels, got {}", lab_.name, levels);
  const int pool = trend_placebo_pool(levels);
  // Placebo seed i reads the runs order[i * levels .. (i + 1) * levels - 1]: no run twice in a split.
  run_placebo(id, pool, [&](const std::vector<int>& order, int i) {
    const auto from = order.begin() + static_cast<std::ptrdiff_t>(i) * levels;
    return trend_of(std::vector<int>(from, from + levels));
  }, how);
}

void Report::record_placebo(const Placebo& p, const std::vector<double>& first) {
  GF_CHECK_AS(std::logic_error, placebo_mode(), "lab {}: placebo '{}' outside --control of a placebo lab", lab_.name, p.id);
  placebos_.push_back(p);
  paper(p.id, first, fmt::format("placebo, the first of {} pools: {}; supported in {} of {} pools ({:.0f}%)", p.splits, p.how, p.supported,
                                 p.splits, 100 * p.rate()));
}

void Report::no_placebo(const std::string& id, const std::string& why) {
  spec(id, ClaimKind::Paper);
  GF_CHECK_AS(std::logic_error, placebo_mode(), "lab {}: no_placebo '{}' outside --control of a placebo lab", lab_.name, id);
  for (const auto& p : placebos_) GF_CHECK_AS(std::logic_error, p.id != id, "lab {}: placebo '{}' reported twice", lab_.name, id);
  placebos_.push_back({id, "no placebo: " + why, 0, 0, 0, 0, 0});
}

std::string Report::verdict_line(int* code) const {
  int papers = 0, sup = 0, con = 0, unset = 0, checks = 0, passed = 0;
  std::vector<std::string> contradicted, unsettled, failed_checks, targets_supported;
  for (const auto& c : claims_) {
    if (c.spec.kind == ClaimKind::Check) {
      ++checks, passed += c.holds;
      if (!c.holds) failed_checks.push_back(c.spec.id);
      continue;
    }
    ++papers;
    if (c.outcome == Outcome::Supported) ++sup;
    if (c.outcome == Outcome::Contradicted) ++con, contradicted.push_back(c.spec.id);
    if (c.outcome == Outcome::Unsettled) ++unset, unsettled.push_back(c.by_design ? c.spec.id + " (by design)" : c.spec.id);
    if (c.outcome == Outcome::Supported && c.spec.control_targets) targets_supported.push_back(c.spec.id);
  }
  *code = con > 0 || passed < checks ? 3 : unset > 0 ? 4 : 0;
  const std::string exact = checks == 0 ? "" : passed == checks ? fmt::format(" ({} exact check{} pass{})", checks, checks == 1 ? "" : "s", checks == 1 ? "es" : "")
                                                                : fmt::format(" ({} of {} exact checks pass)", passed, checks);
  std::string line;
  if (papers == 0) {
    line = passed == checks ? fmt::format("demonstration: {} exact check{} pass{}", checks, checks == 1 ? "" : "s", checks == 1 ? "es" : "")
                            : fmt::format("demonstration: FAILS: {} of {} exact checks pass", passed, checks);
  } else {
    const char* head = con > 0 ? "DISAGREES with" : passed < checks ? "FAILS an exact check, for" : unset > 0 ? "UNSETTLED for" : "AGREES with";
    line = fmt::format("check: {} {}{}: supports {}, contradicts {}, unsettled {} of {} paper claims{}", head, lab_.reference,
                       ablate() ? fmt::format(" (control: {})", lab_.ablation) : control() ? fmt::format(" (control: {})", lab_.control) : "",
                       sup, con, unset, papers, exact);
  }
  if (!contradicted.empty()) line += fmt::format("; contradicted: {}", fmt::join(contradicted, ", "));
  if (!unsettled.empty()) line += fmt::format("; unsettled: {}", fmt::join(unsettled, ", "));
  if (!failed_checks.empty()) line += fmt::format("; fails: {}", fmt::join(failed_checks, ", "));
  if (ablation_mode() && !targets_supported.empty()) line += fmt::format("; targets of the control still supported: {}", fmt::join(targets_supported, ", "));
  return line;
}

int Report::finish() {
  GF_CHECK_AS(std::logic_error, !claims_.empty() || !placebos_.empty(), "lab {} checked no claim", lab_.name);
  for (const auto& s : specs_) {
    if (placebo_mode()) {  // a placebo run tests the paper claims' decision rule only
      const bool placeboed = std::any_of(placebos_.begin(), placebos_.end(), [&](const Placebo& p) { return p.id == s.id; });
      GF_CHECK_AS(std::logic_error, s.kind == ClaimKind::Check || placeboed, "lab {}: paper claim '{}' has no placebo (nor no_placebo)", lab_.name, s.id);
      continue;
    }
    const bool reported = std::any_of(claims_.begin(), claims_.end(), [&](const Claim& c) { return c.spec.id == s.id; });
    GF_CHECK_AS(std::logic_error, reported, "lab {}: claim '{}' of lab/claims.cpp was never reported", lab_.name, s.id);
  }
  decide_paper_claims();
  fmt::print(out_, "\nclaims (paper: supported, contradicted or unsettled on the Holm-adjusted interval; check: an exact value):\n");
  for (const auto& c : claims_) print_claim(c);
  int code = 0;
  std::string line = verdict_line(&code);
  if (placebo_mode()) {
    fmt::print(out_, "\nplacebo: each paper claim between two groups of {} different seeds of one arm (a trend: runs of one level in the "
                     "levels' places), {} splits of a pool of runs; the share of splits the 95% rule calls supported must be at most {:g}:\n",
               seeds(), kPlaceboSplits, kPlaceboMaxRate);
    std::vector<std::string> over;
    int tested = 0;
    for (const auto& p : placebos_) {
      if (p.splits == 0) {
        fmt::print(out_, "  {:<34} {}\n", p.id, p.how);
        continue;
      }
      ++tested;
      fmt::print(out_, "  {:<34} supported {:>2} of {} ({:>4.1f}%), contradicted {:>3}, pool {:>2}  {}\n", p.id, p.supported, p.splits,
                 100 * p.rate(), p.contradicted, p.pool, p.how);
      if (!(p.rate() <= kPlaceboMaxRate)) over.push_back(p.id);
    }
    code = over.empty() && tested > 0 ? 0 : 3;
    line = over.empty() ? fmt::format("placebo: the rule calls a claim with no effect supported in at most {:g} of splits, for {} of {} paper "
                                      "claims of {} (the others are no contrast)", kPlaceboMaxRate, tested, placebos_.size(), lab_.reference)
                        : fmt::format("placebo: FAILS: the rule calls a claim with no effect supported in more than {:g} of splits: {}",
                                      kPlaceboMaxRate, fmt::join(over, ", "));
  }
  verdict_ = line;
  int papers = 0, sup = 0, con = 0, unset = 0, checks = 0, passed = 0, targets = 0, targets_failed = 0;
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& c : claims_) {
    const bool paper = c.spec.kind == ClaimKind::Paper;
    if (paper) ++papers, sup += c.outcome == Outcome::Supported, con += c.outcome == Outcome::Contradicted, unset += c.outcome == Outcome::Unsettled;
    else ++checks, passed += c.holds;
    targets += c.spec.control_targets, targets_failed += c.spec.control_targets && !c.holds;
    nlohmann::json values = nlohmann::json::array();
    for (double v : c.values) values.push_back(number_json(v));
    nlohmann::json j = {{"id", c.spec.id}, {"kind", kind_name(c.spec.kind)}, {"statement", c.spec.statement}, {"holds", c.holds},
                        {"outcome", paper ? outcome_name(c.outcome) : c.holds ? "passes" : "fails"},
                        {"mean", number_json(c.interval.mean)}, {"lo", number_json(c.interval.lo)}, {"hi", number_json(c.interval.hi)},
                        {"n", c.interval.n}, {"method", c.interval.method}, {"side", side_name(c.spec.side)}, {"threshold", c.spec.threshold},
                        {"source", c.spec.source}, {"control_targets", c.spec.control_targets}, {"evidence", c.evidence}, {"values", values}};
    if (c.decisive.n > 0)
      j["decisive"] = {{"lo", number_json(c.decisive.lo)}, {"hi", number_json(c.decisive.hi)}, {"method", c.decisive.method}};
    if (c.bootstrap.n > 0)
      j["bootstrap"] = {{"lo", number_json(c.bootstrap.lo)}, {"hi", number_json(c.bootstrap.hi)}, {"method", c.bootstrap.method}};
    if (c.spec.bounded()) j["range"] = {number_json(c.spec.range_lo), number_json(c.spec.range_hi)};
    if (c.seeds_to_settle >= 0) j["seeds_to_settle"] = c.seeds_to_settle;
    if (c.seeds_needed > 0)
      j["design"] = {{"min_effect", c.spec.min_effect}, {"min_effect_reason", c.spec.min_effect_reason}, {"pilot_sd", c.spec.pilot_sd},
                     {"pilot_n", c.spec.pilot_n}, {"alpha", c.design_alpha}, {"seeds_needed", c.seeds_needed}, {"by_design", c.by_design}};
    claims.push_back(j);
  }

  if (ablation_mode())
    fmt::print(out_, "\ncontrol: {} of {} targeted claims not supported{}\n", targets_failed, targets,
               targets_failed == targets && targets > 0 ? ": without the causal ingredient the lab does not find the effect, as it must"
                                                        : ": WARNING: the lab cannot tell the effect from its absence on the others");
  const double seconds = now_seconds() - start_seconds_;
  json_["claims"] = claims;
  json_["check"] = {{"agrees", code == 0},         {"code", code},           {"line", line},
                    {"paper_claims", papers},      {"paper_claims_hold", sup}, {"supported", sup},
                    {"contradicted", con},         {"unsettled", unset},      {"exact_checks", checks},
                    {"exact_checks_pass", passed}, {"control", control() || ablate()}, {"control_targets", targets},
                    {"control_targets_fail", targets_failed}, {"holm", "family-wise 95% across the lab's paper claims"}};
  if (placebo_mode()) {
    nlohmann::json ps = nlohmann::json::array();
    for (const auto& p : placebos_)
      ps.push_back({{"id", p.id}, {"how", p.how}, {"pool", p.pool}, {"group", p.group}, {"splits", p.splits}, {"supported", p.supported},
                    {"contradicted", p.contradicted}, {"rate", number_json(p.rate())}});
    json_["placebo"] = {{"claims", ps}, {"max_rate", kPlaceboMaxRate}, {"ok", code == 0}};
  }
  json_["seconds"] = seconds;
  if (!dose_.empty()) json_["dose_response"] = dose_;
  if (!panels_.empty()) write_file(lab_.name + ".svg", figure_svg(fmt::format("gradflow lab {}: {}", lab_.name, lab_.title), panels_, 2));
  json_["files"] = files_;
  const std::string json_path = (std::filesystem::path(out_dir_) / (lab_.name + ".json")).string();
  files_.push_back(json_path);
  std::filesystem::create_directories(out_dir_);
  write_file_atomic(json_path, json_.dump(1) + "\n");

  fmt::print(out_, "\nwrote");
  for (const auto& f : files_) fmt::print(out_, " {}", f);
  fmt::print(out_, "\nran in {:.1f} s on {} thread{}\n{}\n", seconds, max_threads(), max_threads() == 1 ? "" : "s", line);
  std::fflush(out_);
  return code;
}

}  // namespace gf::lab

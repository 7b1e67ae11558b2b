#include "lab/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <stdexcept>

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

// ---------------------------------------------------------------- intervals

double t_quantile_975(int df) {
  GF_CHECK(df >= 1, "t_quantile_975: degrees of freedom must be at least 1, got {}", df);
  // t(0.975, df) for df 1..30, to 9 decimals (the Student t CDF integrated numerically).
  static const double table[30] = {12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252,
                                   2.306004135,  2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688,
                                   2.131449546,  2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845,
                                   2.073873068,  2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142,
                                   2.045229642,  2.042272456};
  if (df <= 30) return table[df - 1];
  // Beyond 30: the Cornish-Fisher expansion about the normal quantile (error below 1e-6 there).
  const double z = 1.959963984540054, v = df;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * v) + (5 * z5 + 16 * z3 + 3 * z) / (96 * v * v) + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * v * v * v);
}

Interval t_interval(const std::vector<double>& per_seed) {
  const int n = static_cast<int>(per_seed.size());
  GF_CHECK(n >= 2, "t_interval: an interval needs at least 2 values (seeds), got {}", n);
  Interval iv{NAN, NAN, NAN, n, "t 95%"};
  for (double x : per_seed)
    if (!std::isfinite(x)) return iv;
  double mean = 0, ss = 0;
  for (double x : per_seed) mean += x / n;
  for (double x : per_seed) ss += (x - mean) * (x - mean);
  const double half = t_quantile_975(n - 1) * std::sqrt(ss / (n - 1)) / std::sqrt(static_cast<double>(n));
  iv.mean = mean, iv.lo = mean - half, iv.hi = mean + half;
  return iv;
}

Interval bootstrap_interval(const std::vector<double>& values, uint64_t seed) {
  const size_t n = values.size();
  GF_CHECK(n >= 2, "bootstrap_interval: an interval needs at least 2 values, got {}", n);
  Interval iv{NAN, NAN, NAN, static_cast<int>(n), "bootstrap 95%"};
  for (double x : values)
    if (!std::isfinite(x)) return iv;
  double mean = 0;
  for (double x : values) mean += x / static_cast<double>(n);
  constexpr int kResamples = 10000;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> means(kResamples);
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += values[pick(rng)];
    m = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  // The q-quantile with linear interpolation between order statistics (numpy's default).
  auto quantile = [&](double q) {
    const double pos = q * (kResamples - 1);
    const size_t i = static_cast<size_t>(pos);
    const double f = pos - static_cast<double>(i);
    return i + 1 < means.size() ? means[i] * (1 - f) + means[i + 1] * f : means[i];
  };
  iv.mean = mean, iv.lo = quantile(0.025), iv.hi = quantile(0.975);
  return iv;
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
    : Report(lab, std::move(settings), out, claim_specs_of(lab.name)) {}

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
  json_["settings"] = settings_;
  json_["control"] = control();
  json_["control_removes"] = lab.control;
  json_["threads"] = max_threads();
  json_["blas_core"] = blas_core_in_use();
  json_["log"] = nlohmann::json::array();
  json_["tables"] = nlohmann::json::object();
  json_["data"] = nlohmann::json::object();
  fmt::print(out_, "lab {}: {}\n  {}\n  {}\n", lab.name, lab.title, lab.reference, lab.question);
  if (control()) fmt::print(out_, "control: {} (a negative control: the claims marked as its targets must fail)\n", lab.control);
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

int Report::seeds() const { return static_cast<int>(integer("seeds")); }

bool Report::control() const { return settings_.count("control") && on("control"); }

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
  const Interval& iv = c.interval;
  std::string line = fmt::format("  [{}] {} {}: {}\n", c.holds ? "holds" : "FAILS", kind_name(c.spec.kind), c.spec.id, c.spec.statement);
  if (c.spec.kind == ClaimKind::Check)
    line += fmt::format("          {} (exact) {} {}; {}\n", num(iv.mean), side_symbol(c.spec.side), num(c.spec.threshold), c.spec.source);
  else
    line += fmt::format("          {} [{}, {}] ({}, n {}) {} {}{}; {}\n", num(iv.mean), num(iv.lo), num(iv.hi), iv.method, iv.n,
                        side_symbol(c.spec.side), num(c.spec.threshold), c.spec.control_targets ? ", a target of the control" : "",
                        c.spec.source);
  if (!c.evidence.empty()) line += fmt::format("          {}\n", c.evidence);
  fmt::print(out_, "{}", line);
  std::fflush(out_);
  claims_.push_back(std::move(c));
}

void Report::paper(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Paper);
  GF_CHECK(per_seed.size() >= 2, "lab {}: paper claim '{}' needs its statistic from at least 2 seeds (an interval across seeds), got {}: "
           "run with --seeds 2 or more", lab_.name, id, per_seed.size());
  Claim c{s, false, t_interval(per_seed), per_seed, evidence};
  c.holds = on_claimed_side(s, s.side == Compare::Above ? c.interval.lo : c.interval.hi);
  record(std::move(c));
}

void Report::paper(const std::string& id, const Interval& interval, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Paper);
  GF_CHECK(interval.n >= 2, "lab {}: paper claim '{}' needs an interval over at least 2 values, got n {}", lab_.name, id, interval.n);
  Claim c{s, false, interval, {}, evidence};
  // NaN bounds lie on no side.
  c.holds = std::isfinite(interval.mean) && on_claimed_side(s, s.side == Compare::Above ? interval.lo : interval.hi);
  record(std::move(c));
}

void Report::check(const std::string& id, double value, const std::string& evidence) {
  const ClaimSpec& s = spec(id, ClaimKind::Check);
  Claim c{s, on_claimed_side(s, value), {value, value, value, 1, "exact"}, {value}, evidence};
  record(std::move(c));
}

std::string Report::verdict_line(bool* agrees) const {
  int papers = 0, held = 0, checks = 0, passed = 0;
  std::vector<std::string> fails, targets_holding;
  for (const auto& c : claims_) {
    const bool paper = c.spec.kind == ClaimKind::Paper;
    (paper ? papers : checks) += 1;
    (paper ? held : passed) += c.holds;
    if (!c.holds) fails.push_back(c.spec.id);
    if (c.holds && c.spec.control_targets) targets_holding.push_back(c.spec.id);
  }
  *agrees = held == papers && passed == checks;
  const std::string exact = checks == 0 ? "" : passed == checks ? fmt::format(" ({} exact check{} pass{})", checks, checks == 1 ? "" : "s", checks == 1 ? "es" : "")
                                                                : fmt::format(" ({} of {} exact checks pass)", passed, checks);
  std::string line;
  if (papers == 0)
    line = *agrees ? fmt::format("demonstration: {} exact check{} pass{}", checks, checks == 1 ? "" : "s", checks == 1 ? "es" : "")
                   : fmt::format("demonstration: FAILS: {} of {} exact checks pass", passed, checks);
  else
    line = fmt::format("check: {} with {}{}: {} of {} paper claims hold{}", *agrees ? "AGREES" : "DISAGREES", lab_.reference,
                       control() ? fmt::format(" (control: {})", lab_.control) : "", held, papers, exact);
  if (!fails.empty()) line += fmt::format("; fails: {}", fmt::join(fails, ", "));
  if (control() && !targets_holding.empty()) line += fmt::format("; targets of the control that still hold: {}", fmt::join(targets_holding, ", "));
  return line;
}

int Report::finish() {
  GF_CHECK_AS(std::logic_error, !claims_.empty(), "lab {} checked no claim", lab_.name);
  for (const auto& s : specs_) {
    const bool reported = std::any_of(claims_.begin(), claims_.end(), [&](const Claim& c) { return c.spec.id == s.id; });
    GF_CHECK_AS(std::logic_error, reported, "lab {}: claim '{}' of lab/claims.cpp was never reported", lab_.name, s.id);
  }
  bool agrees = false;
  const std::string line = verdict_line(&agrees);
  verdict_ = line;
  int papers = 0, held = 0, checks = 0, passed = 0, targets = 0, targets_failed = 0;
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& c : claims_) {
    const bool paper = c.spec.kind == ClaimKind::Paper;
    (paper ? papers : checks) += 1;
    (paper ? held : passed) += c.holds;
    targets += c.spec.control_targets, targets_failed += c.spec.control_targets && !c.holds;
    nlohmann::json values = nlohmann::json::array();
    for (double v : c.values) values.push_back(number_json(v));
    claims.push_back({{"id", c.spec.id}, {"kind", kind_name(c.spec.kind)}, {"statement", c.spec.statement}, {"holds", c.holds},
                      {"mean", number_json(c.interval.mean)}, {"lo", number_json(c.interval.lo)}, {"hi", number_json(c.interval.hi)},
                      {"n", c.interval.n}, {"method", c.interval.method}, {"side", side_name(c.spec.side)}, {"threshold", c.spec.threshold},
                      {"source", c.spec.source}, {"control_targets", c.spec.control_targets}, {"evidence", c.evidence}, {"values", values}});
  }

  if (control())
    fmt::print(out_, "\ncontrol: {} of {} targeted claims fail{}\n", targets_failed, targets,
               targets_failed == targets && targets > 0 ? ": without the causal ingredient the lab disagrees, as it must"
                                                        : ": WARNING: the lab cannot tell the effect from its absence on the others");
  const double seconds = now_seconds() - start_seconds_;
  json_["claims"] = claims;
  json_["check"] = {{"agrees", agrees},          {"line", line},           {"paper_claims", papers},         {"paper_claims_hold", held},
                    {"exact_checks", checks},    {"exact_checks_pass", passed}, {"control", control()},    {"control_targets", targets},
                    {"control_targets_fail", targets_failed}};
  json_["seconds"] = seconds;  if (!panels_.empty()) write_file(lab_.name + ".svg", figure_svg(fmt::format("gradflow lab {}: {}", lab_.name, lab_.title), panels_, 2));
  json_["files"] = files_;
  const std::string json_path = (std::filesystem::path(out_dir_) / (lab_.name + ".json")).string();
  files_.push_back(json_path);
  std::filesystem::create_directories(out_dir_);
  write_file_atomic(json_path, json_.dump(1) + "\n");

  fmt::print(out_, "\nwrote");
  for (const auto& f : files_) fmt::print(out_, " {}", f);
  fmt::print(out_, "\nran in {:.1f} s on {} threads\n{}\n", seconds, max_threads(), line);
  std::fflush(out_);
  return agrees ? 0 : 3;
}

}  // namespace gf::lab

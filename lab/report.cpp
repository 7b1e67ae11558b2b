#include "lab/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>

#include "tensor/check.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"

namespace gf::lab {
namespace {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const std::string& setting(const std::map<std::string, std::string>& s, const std::string& name, const std::string& lab) {
  auto it = s.find(name);
  GF_CHECK_AS(std::logic_error, it != s.end(), "lab {}: setting '{}' was not given", lab, name);
  return it->second;
}

int64_t whole(const std::string& text, const std::string& flag, const std::string& lab) {
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GF_CHECK(used != 0 && used == text.size(), "lab {}: --{} expects an integer, got '{}'", lab, flag, text);
  return x;
}

bool on(const std::map<std::string, std::string>& s, const std::string& name) {
  auto it = s.find(name);
  return it != s.end() && (it->second == "1" || it->second == "true" || it->second == "on");
}

}  // namespace

Report::Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out)
    : Report(lab, std::move(settings), out, lab.claims.empty() ? claim_specs_of(lab.name) : lab.claims) {}

Report::Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out, std::vector<ClaimSpec> specs)
    : Output(lab.name, setting(settings, "out", lab.name), out), lab_(lab), settings_(std::move(settings)), specs_(std::move(specs)),
      start_seconds_(now_seconds()) {
  for (const Option& o : lab.options) setting(settings_, o.name, lab.name);
  seeds_ = static_cast<int>(whole(setting(settings_, "seeds", lab.name), "seeds", lab.name));
  seed_ = static_cast<uint64_t>(whole(setting(settings_, "seed", lab.name), "seed", lab.name));
  control_ = on(settings_, "control"), ablate_ = on(settings_, "ablate");
  if (settings_.count("pools") && !settings_.at("pools").empty()) pools_ = static_cast<int>(whole(settings_.at("pools"), "pools", lab.name));
  if (settings_.count("models")) {
    std::stringstream in(settings_.at("models"));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) models_.push_back(line);
  }
  GF_CHECK(seeds() >= 1, "lab {}: --seeds must be at least 1, got {}", lab.name, seeds());
  GF_CHECK(pools_ >= 0, "lab {}: --pools must be at least 1, got {}", lab.name, pools_);
  GF_CHECK(!control_ || !lab.control.empty(), "lab {} has no negative control (--control)", lab.name);
  GF_CHECK(!ablate_ || !lab.ablation.empty(), "lab {} has no ablation (--ablate)", lab.name);
  GF_CHECK(!(ablate_ && control_), "lab {}: --control and --ablate are two runs; give one", lab.name);
  json_["lab"] = lab.name;
  json_["title"] = lab.title;
  json_["reference"] = lab.reference;
  json_["settings"] = settings_;
  json_["control"] = control_ || ablate_;  // either way a control run (lab_page.cpp pairs it with its lab)
  json_["control_removes"] = ablate_ ? lab.ablation : lab.control;
  json_["ablate"] = ablate_;
  json_["threads"] = max_threads();
  json_["blas_core"] = blas_core_in_use();
  fmt::print(stream(), "lab {}: {}\n  {}\n  {}\n", lab.name, lab.title, lab.reference, lab.question);
  if (ablate_) fmt::print(stream(), "control: {} (an ablation: the claims marked as its targets must not be supported)\n", lab.ablation);
  if (control_)
    fmt::print(stream(), "control: {} ({})\n", lab.control,
               lab.placebo ? "a placebo: each paper claim's own statistic over pools of runs of one null condition, which the rule must call "
                             "supported in at most 5% of pools"
                           : "a negative control: the claims marked as its targets must not be supported");
  std::fflush(stream());
}

const ClaimSpec& Report::spec(const std::string& id, ClaimKind kind) const {
  std::vector<std::string> known;
  for (const auto& c : specs_) {
    if (c.id == id) {
      GF_CHECK_AS(std::logic_error, c.kind == kind, "lab {}: claim '{}' is a {} claim, reported as a {}", lab_.name, id, kind_name(c.kind),
                  kind_name(kind));
      return c;
    }
    known.push_back(c.id);
  }
  GF_FAIL_AS(std::logic_error, "lab {}: no claim '{}' (its claims: {})", lab_.name, id,
             known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", ")));
}

void Report::record(Claim c) {
  for (const auto& d : claims_) GF_CHECK_AS(std::logic_error, d.spec.id != c.spec.id, "lab {}: claim '{}' reported twice", lab_.name, c.spec.id);
  claims_.push_back(std::move(c));
}

void Report::paper(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence) {
  record(paper_claim(spec(id, ClaimKind::Paper), per_seed, evidence, lab_.name));
}

void Report::check(const std::string& id, double value, const std::string& evidence) {
  record(check_claim(spec(id, ClaimKind::Check), value, evidence));
}

void Report::check(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence) {
  record(check_claim(spec(id, ClaimKind::Check), per_seed, evidence));
}

void Report::no_placebo(const std::string& id, const std::string& why) {
  spec(id, ClaimKind::Paper);
  GF_CHECK_AS(std::logic_error, placebo_mode(), "lab {}: no_placebo '{}' outside --control of a placebo lab", lab_.name, id);
  for (const auto& p : placebos_) GF_CHECK_AS(std::logic_error, p.id != id, "lab {}: placebo '{}' reported twice", lab_.name, id);
  placebos_.push_back({id, "no placebo: " + why, 0, 0, 0, 0, 0});
}

void Report::record_placebo(const Placebo& p, const std::vector<double>& first) {
  GF_CHECK_AS(std::logic_error, placebo_mode(), "lab {}: placebo '{}' outside --control of a placebo lab", lab_.name, p.id);
  placebos_.push_back(p);
  paper(p.id, first, fmt::format("placebo, the first of {} pools: {}; supported in {} of {} pools ({:.0f}%)", p.splits, p.how, p.supported,
                                 p.splits, 100 * p.rate()));
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
    GF_CHECK_AS(std::logic_error, reported, "lab {}: claim '{}' was never reported", lab_.name, s.id);
  }
  decide(claims_);
  std::string text = "\nclaims (paper: supported, contradicted or unsettled on the Holm-adjusted interval; check: an exact value):\n";
  for (const auto& c : claims_) text += claim_text(c);
  fmt::print(stream(), "{}", text);
  const Tally t = tally(claims_);
  int code = 0;
  std::string line = verdict_line(t, lab_.reference, ablate_ ? lab_.ablation : control_ ? lab_.control : "", ablation_mode(), &code);
  if (placebo_mode()) fmt::print(stream(), "{}", placebo_text(placebos_, seeds(), lab_.reference, &line, &code));
  verdict_ = line;
  if (ablation_mode())
    fmt::print(stream(), "\ncontrol: {} of {} targeted claims not supported{}\n", t.targets_failed, t.targets,
               t.targets_failed == t.targets && t.targets > 0 ? ": without the causal ingredient the lab does not find the effect, as it must"
                                                              : ": WARNING: the lab cannot tell the effect from its absence on the others");
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& c : claims_) claims.push_back(claim_json(c));
  nlohmann::json fields = {{"claims", claims},
                           {"check", {{"agrees", code == 0}, {"code", code}, {"line", line}, {"paper_claims", t.papers},
                                      {"paper_claims_hold", t.supported}, {"supported", t.supported}, {"contradicted", t.contradicted},
                                      {"unsettled", t.unsettled}, {"exact_checks", t.checks}, {"exact_checks_pass", t.passed},
                                      {"control", control_ || ablate_}, {"control_targets", t.targets},
                                      {"control_targets_fail", t.targets_failed}, {"holm", "family-wise 95% across the lab's paper claims"}}},
                           {"seconds", now_seconds() - start_seconds_}};
  if (placebo_mode()) {
    nlohmann::json ps = nlohmann::json::array();
    for (const auto& p : placebos_)
      ps.push_back({{"id", p.id}, {"how", p.how}, {"pool", p.pool}, {"group", p.group}, {"splits", p.splits}, {"supported", p.supported},
                    {"contradicted", p.contradicted}, {"rate", number_json(p.rate())}});
    fields["placebo"] = {{"claims", ps}, {"max_rate", kPlaceboMaxRate}, {"ok", code == 0}};
  }
  const std::vector<std::string> files = write(lab_.name, fmt::format("gradflow lab {}: {}", lab_.name, lab_.title), fields);
  fmt::print(stream(), "\nwrote {}\nran in {:.1f} s on {} thread{}\n{}\n", fmt::join(files, " "), now_seconds() - start_seconds_, max_threads(),
             max_threads() == 1 ? "" : "s", line);
  std::fflush(stream());
  return code;
}

}  // namespace gf::lab

#include "app/lab_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "app/flags.h"
#include "app/command_flags.h"
#include "app/recipe_flags.h"
#include "tensor/io/digest.h"
#include "train/run/checkpoint.h"

namespace gf::app {
namespace {

using spec_json = nlohmann::ordered_json;  // keys in the file's order: a measure may read the ones before it

// The flags a recipe may set: the model's and the optimisation's. The rest of `gradflow train`'s
// (--out, --steps, --data, --seed, ...) belong to the file's own keys or to no experiment.
const std::vector<std::string>& recipe_flag_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = model_flag_names();
    n.insert(n.end(), {"lr", "warmup", "label-smoothing", "clip", "schedule", "decay-fraction", "max-tokens"});
    return n;
  }();
  return names;
}

[[noreturn]] void fail(const LabSpec& s, const std::string& key, const std::string& problem) {
  throw UsageError(fmt::format("lab run {}: {}: {}", s.file, key, problem));
}

const spec_json& need(const LabSpec& s, const spec_json& j, const std::string& key, const std::string& where) {
  if (!j.contains(key)) fail(s, where.empty() ? key : where + "." + key, "missing");
  return j.at(key);
}

void only_keys(const LabSpec& s, const spec_json& j, const std::set<std::string>& known, const std::string& where) {
  if (!j.is_object()) fail(s, where, "must be an object");
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) fail(s, where.empty() ? k : where + "." + k, fmt::format("unknown key (known: {})", fmt::join(known, ", ")));
}

std::string text(const LabSpec& s, const spec_json& j, const std::string& key) {
  if (!j.is_string()) fail(s, key, "must be a string");
  return j.get<std::string>();
}
double number(const LabSpec& s, const spec_json& j, const std::string& key) {
  if (!j.is_number() || !std::isfinite(j.get<double>())) fail(s, key, "must be a finite number");
  return j.get<double>();
}
int64_t whole(const LabSpec& s, const spec_json& j, const std::string& key, int64_t min) {
  if (!j.is_number_integer() || j.get<int64_t>() < min) fail(s, key, fmt::format("must be a whole number of at least {}", min));
  return j.get<int64_t>();
}
void check_name(const LabSpec& s, const std::string& name, const std::string& key) {
  static const std::regex ok("[A-Za-z0-9_-]+");
  if (!std::regex_match(name, ok)) fail(s, key, fmt::format("'{}' must be letters, digits, '_' or '-'", name));
}

// A flag list, from "--a 1 --b" or ["--a", "1", "--b"]; every flag a recipe flag.
std::vector<std::string> flag_list(const LabSpec& s, const spec_json& j, const std::string& key) {
  std::vector<std::string> out;
  if (j.is_string()) {
    std::istringstream in(j.get<std::string>());
    for (std::string w; in >> w;) out.push_back(w);
  } else if (j.is_array()) {
    for (const auto& w : j) out.push_back(text(s, w, key));
  } else {
    fail(s, key, "must be flags, as a string or an array of strings");
  }
  const auto& allowed = recipe_flag_names();
  for (const std::string& w : out) {
    if (!w.starts_with("--")) continue;
    const std::string name = w.substr(2, w.find('=') == std::string::npos ? std::string::npos : w.find('=') - 2);
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      fail(s, key, fmt::format("--{} is not a recipe flag (a recipe sets: --{}; the step budget, seeds and data are the file's own keys)", name,
                               fmt::join(allowed, ", --")));
  }
  return out;
}

SpecMeasure parse_measure(const LabSpec& s, const std::string& name, const std::string& expr, const std::vector<SpecMeasure>& before) {
  const std::string key = "measures." + name;
  SpecMeasure m{name, expr};
  static const std::regex pair(R"(\s*(ratio|difference|log_ratio)\(\s*([A-Za-z0-9_-]+)\s*,\s*([A-Za-z0-9_-]+)\s*\)\s*)");
  static const std::regex single(R"(\s*([a-z_]+)(\[([A-Za-z0-9_.]+)\])?(@([0-9]+))?\s*)");
  std::smatch g;
  if (std::regex_match(expr, g, pair)) {
    m.kind = g[1] == "ratio" ? SpecMeasure::Ratio : g[1] == "difference" ? SpecMeasure::Difference : SpecMeasure::LogRatio;
    m.a = g[2], m.b = g[3];
    for (const std::string& operand : {m.a, m.b})
      if (std::none_of(before.begin(), before.end(), [&](const SpecMeasure& x) { return x.name == operand; }))
        fail(s, key, fmt::format("'{}' reads '{}', which is not a measure defined before it", expr, operand));
    return m;
  }
  if (!std::regex_match(expr, g, single)) fail(s, key, fmt::format("cannot read '{}' (docs/labs.md lists the measures)", expr));
  static const std::vector<std::pair<std::string, SpecMeasure::Kind>> names = {
      {"train_loss", SpecMeasure::TrainLoss},     {"valid_loss", SpecMeasure::ValidLoss},         {"test_loss", SpecMeasure::TestLoss},
      {"valid_accuracy", SpecMeasure::ValidAccuracy}, {"test_accuracy", SpecMeasure::TestAccuracy}, {"exact_match", SpecMeasure::ExactMatch},
      {"bleu", SpecMeasure::Bleu},                {"diverged_at", SpecMeasure::DivergedAt},       {"head_entropy_min", SpecMeasure::HeadEntropyMin},
      {"grad_norm", SpecMeasure::GradNorm},       {"param_norm", SpecMeasure::ParamNorm},         {"update_ratio", SpecMeasure::UpdateRatio},
      {"entropy", SpecMeasure::Entropy}};
  auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == g[1]; });
  if (it == names.end()) {
    std::vector<std::string> known;
    for (const auto& n : names) known.push_back(n.first);
    fail(s, key, fmt::format("unknown measure '{}' (known: {}; and ratio(A, B), difference(A, B), log_ratio(A, B))", g[1].str(), fmt::join(known, ", ")));
  }
  m.kind = it->second;
  m.target = g[3];
  m.step = g[5].matched ? std::stoll(g[5]) : 0;
  const bool recorded = m.kind == SpecMeasure::GradNorm || m.kind == SpecMeasure::ParamNorm || m.kind == SpecMeasure::UpdateRatio ||
                        m.kind == SpecMeasure::Entropy;
  if (recorded && (m.target.empty() || m.step == 0))
    fail(s, key, fmt::format("'{}' needs a module or attention and a step: {}[NAME]@STEP", expr, it->first));
  if (!recorded && !m.target.empty()) fail(s, key, fmt::format("'{}' takes no [NAME]", it->first));
  if (m.step != 0 && !recorded && m.kind != SpecMeasure::TrainLoss) fail(s, key, fmt::format("'{}' is measured at the end; it takes no @STEP", it->first));
  if (m.step > s.steps) fail(s, key, fmt::format("step {} is past the run's {} steps", m.step, s.steps));
  return m;
}

lab::Condition condition(const LabSpec& s, const spec_json& j, const std::string& key) {
  only_keys(s, j, {"arm", "level"}, key);
  lab::Condition c{text(s, need(s, j, "arm", key), key + ".arm"), 0};
  if (std::none_of(s.arms.begin(), s.arms.end(), [&](const SpecArm& a) { return a.name == c.arm; }))
    fail(s, key + ".arm", fmt::format("no arm '{}'", c.arm));
  if (s.arm_has_factor(c.arm)) {
    c.level = number(s, need(s, j, "level", key), key + ".level");
    if (std::find(s.levels.begin(), s.levels.end(), c.level) == s.levels.end())
      fail(s, key + ".level", fmt::format("{} is not a level of the factor ({})", c.level, fmt::join(s.levels, ", ")));
  } else if (j.contains("level")) {
    fail(s, key + ".level", fmt::format("arm '{}' has no factor", c.arm));
  }
  return c;
}

SpecClaim parse_claim(const LabSpec& s, const spec_json& j, size_t i) {
  const std::string key = fmt::format("claims[{}]", i);
  only_keys(s, j, {"id", "statement", "source", "type", "measure", "arm", "level", "a", "b", "trend", "side", "threshold", "min_effect",
                   "min_effect_reason", "pilot_sd", "pilot_n"}, key);
  SpecClaim c;
  lab::ClaimSpec& p = c.spec;
  p.lab = s.name, p.kind = lab::ClaimKind::Paper;
  p.id = text(s, need(s, j, "id", key), key + ".id");
  check_name(s, p.id, key + ".id");
  p.statement = text(s, need(s, j, "statement", key), key + ".statement");
  p.source = j.contains("source") ? text(s, j.at("source"), key + ".source") : s.source;
  c.type = text(s, need(s, j, "type", key), key + ".type");
  c.measure = text(s, need(s, j, "measure", key), key + ".measure");
  if (std::none_of(s.measures.begin(), s.measures.end(), [&](const SpecMeasure& m) { return m.name == c.measure; }))
    fail(s, key + ".measure", fmt::format("no measure '{}'", c.measure));
  const std::string side = text(s, need(s, j, "side", key), key + ".side");
  if (side != "above" && side != "below") fail(s, key + ".side", "must be \"above\" or \"below\"");
  p.side = side == "above" ? lab::Compare::Above : lab::Compare::Below;
  if (!j.contains("threshold")) fail(s, key + ".threshold", "missing: a claim states its threshold before it runs");
  p.threshold = number(s, j.at("threshold"), key + ".threshold");
  if (j.contains("min_effect")) {
    p.min_effect = number(s, j.at("min_effect"), key + ".min_effect");
    if (!(p.min_effect > 0)) fail(s, key + ".min_effect", "must be above 0");
    p.min_effect_reason = text(s, need(s, j, "min_effect_reason", key), key + ".min_effect_reason");
    p.pilot_sd = j.contains("pilot_sd") ? number(s, j.at("pilot_sd"), key + ".pilot_sd") : NAN;
    p.pilot_n = j.contains("pilot_n") ? static_cast<int>(whole(s, j.at("pilot_n"), key + ".pilot_n", 2)) : 0;
  }
  if (c.type == "value") {
    spec_json one = {{"arm", need(s, j, "arm", key)}};
    if (j.contains("level")) one["level"] = j.at("level");
    c.a = condition(s, one, key);
  } else if (c.type == "difference" || c.type == "ratio" || c.type == "log_ratio") {
    c.a = condition(s, need(s, j, "a", key), key + ".a");
    c.b = condition(s, need(s, j, "b", key), key + ".b");
    if (c.a == c.b) fail(s, key, "a and b are the same condition");
  } else if (c.type == "trend") {
    c.arm = text(s, need(s, j, "arm", key), key + ".arm");
    if (!s.arm_has_factor(c.arm)) fail(s, key + ".arm", fmt::format("arm '{}' has no factor to read a trend over", c.arm));
    if (s.levels.size() < 4) fail(s, key, fmt::format("a trend needs 4 or more levels of the factor, the file has {}", s.levels.size()));
    const std::string t = j.contains("trend") ? text(s, j.at("trend"), key + ".trend") : "slope";
    if (t != "slope" && t != "slope_per_doubling" && t != "rank") fail(s, key + ".trend", "must be slope, slope_per_doubling or rank");
    c.trend = t == "slope" ? lab::TrendKind::Slope : t == "rank" ? lab::TrendKind::Rank : lab::TrendKind::LogSlope;
    if (c.trend == lab::TrendKind::LogSlope && s.levels.front() <= 0) fail(s, key + ".trend", "a slope per doubling needs levels above 0");
  } else {
    fail(s, key + ".type", fmt::format("unknown type '{}' (value, difference, ratio, log_ratio, trend)", c.type));
  }
  return c;
}

void parse_data(LabSpec& s, const spec_json& j) {
  if (j.is_string()) {
    if (j != "builtin") fail(s, "data", "must be \"builtin\" or an object: {\"builtin\": {...}}, {\"task\": {...}} or {\"dir\": \"PATH\", ...}");
    return;
  }
  only_keys(s, j, {"builtin", "task", "dir", "src", "tgt", "subwords", "train", "max_len"}, "data");
  if (j.contains("builtin")) {
    s.data_kind = "builtin";
    only_keys(s, j.at("builtin"), {"pairs"}, "data.builtin");
    if (j.at("builtin").contains("pairs")) s.pairs = whole(s, j.at("builtin").at("pairs"), "data.builtin.pairs", 20);
  } else if (j.contains("task")) {
    s.data_kind = "task";
    const spec_json& t = j.at("task");
    only_keys(s, t, {"task", "symbols", "min_len", "max_len", "train", "eval"}, "data.task");
    if (t.contains("task")) s.task.task = text(s, t.at("task"), "data.task.task");
    if (t.contains("symbols")) s.task.symbols = whole(s, t.at("symbols"), "data.task.symbols", 2);
    if (t.contains("min_len")) s.task.min_len = whole(s, t.at("min_len"), "data.task.min_len", 1);
    if (t.contains("max_len")) s.task.max_len = whole(s, t.at("max_len"), "data.task.max_len", 1);
    if (t.contains("train")) s.task.train = whole(s, t.at("train"), "data.task.train", 1);
    if (t.contains("eval")) s.task.eval = whole(s, t.at("eval"), "data.task.eval", 1);
  } else if (j.contains("dir")) {
    s.data_kind = "dir";
    s.real.data = text(s, j.at("dir"), "data.dir");
    if (j.contains("src")) s.real.src = text(s, j.at("src"), "data.src");
    if (j.contains("tgt")) s.real.tgt = text(s, j.at("tgt"), "data.tgt");
    if (j.contains("subwords")) s.real.subwords = whole(s, j.at("subwords"), "data.subwords", 0);
    if (j.contains("train")) s.real.data_train = whole(s, j.at("train"), "data.train", 0);
    if (j.contains("max_len")) s.real.data_max_len = whole(s, j.at("max_len"), "data.max_len", 1);
  } else {
    fail(s, "data", "names no data: \"builtin\", {\"task\": {...}} or {\"dir\": \"PATH\"}");
  }
}

}  // namespace

bool LabSpec::arm_has_factor(const std::string& arm) const {
  return !factor_flag.empty() && (factor_arms.empty() || std::find(factor_arms.begin(), factor_arms.end(), arm) != factor_arms.end());
}

std::vector<std::string> LabSpec::flags_of(const lab::Condition& c) const {
  std::vector<std::string> f = recipe;
  for (const SpecArm& a : arms)
    if (a.name == c.arm) f.insert(f.end(), a.flags.begin(), a.flags.end());
  if (arm_has_factor(c.arm)) f.insert(f.end(), {"--" + factor_flag, c.level == std::floor(c.level) ? fmt::format("{:.0f}", c.level) : fmt::format("{}", c.level)});
  return f;
}

train::RunConfig spec_config(const LabSpec& s, const lab::Condition& c) {
  Flags f = train_flags();
  std::vector<std::string> words = s.flags_of(c);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    f.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("lab run {}: the recipe of arm '{}'{}: {}", s.file, c.arm,
                                 s.arm_has_factor(c.arm) ? fmt::format(" at {} {:g}", s.factor_flag, c.level) : "", e.what()));
  }
  train::RunConfig r;
  read_recipe_flags(f, r);
  r.clip = f.real("clip"), r.schedule = f.str("schedule"), r.decay_fraction = f.real("decay-fraction");
  r.steps = s.steps;
  try {
    r.validate();
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("lab run {}: the recipe of arm '{}': {}", s.file, c.arm, e.what()));
  }
  return r;
}

LabSpec parse_lab_spec(const std::string& file) {
  LabSpec s;
  s.file = file;
  const std::string bytes = train::read_text_file(file);
  Digest d;
  d.add(bytes.data(), bytes.size());
  s.digest = d.text();
  spec_json j;
  try {
    j = spec_json::parse(bytes);
  } catch (const spec_json::parse_error& e) {
    fail(s, "(the file)", fmt::format("not JSON: {}", e.what()));
  }
  only_keys(s, j, {"name", "title", "question", "source", "recipe", "arms", "factor", "seeds", "first_seed", "steps", "data", "measures",
                   "claims", "placebo"}, "");
  s.name = text(s, need(s, j, "name", ""), "name");
  check_name(s, s.name, "name");
  s.question = text(s, need(s, j, "question", ""), "question");
  s.source = text(s, need(s, j, "source", ""), "source");
  s.title = j.contains("title") ? text(s, j.at("title"), "title") : s.question;
  s.steps = whole(s, need(s, j, "steps", ""), "steps", 1);
  s.seeds = static_cast<int>(j.contains("seeds") ? whole(s, j.at("seeds"), "seeds", 2) : 3);
  s.first_seed = static_cast<uint64_t>(j.contains("first_seed") ? whole(s, j.at("first_seed"), "first_seed", 1) : 1);
  s.recipe = j.contains("recipe") ? flag_list(s, j.at("recipe"), "recipe") : std::vector<std::string>{};
  const spec_json& arms = need(s, j, "arms", "");
  if (!arms.is_object() || arms.empty()) fail(s, "arms", "must be an object of one or more arms: {\"NAME\": \"--flag value ...\"}");
  for (const auto& [name, flags] : arms.items()) {
    check_name(s, name, "arms." + name);
    s.arms.push_back({name, flag_list(s, flags, "arms." + name)});
  }
  if (j.contains("factor")) {
    const spec_json& f = j.at("factor");
    only_keys(s, f, {"flag", "levels", "arms"}, "factor");
    s.factor_flag = text(s, need(s, f, "flag", "factor"), "factor.flag");
    if (s.factor_flag.starts_with("--")) s.factor_flag = s.factor_flag.substr(2);
    (void)flag_list(s, spec_json::array({"--" + s.factor_flag}), "factor.flag");
    const spec_json& levels = need(s, f, "levels", "factor");
    if (!levels.is_array() || levels.size() < 2) fail(s, "factor.levels", "a factor needs two or more levels");
    for (const auto& l : levels) s.levels.push_back(number(s, l, "factor.levels"));
    for (size_t k = 1; k < s.levels.size(); ++k)
      if (!(s.levels[k] > s.levels[k - 1])) fail(s, "factor.levels", "must increase");
    if (f.contains("arms"))
      for (const auto& a : f.at("arms")) {
        const std::string name = text(s, a, "factor.arms");
        if (std::none_of(s.arms.begin(), s.arms.end(), [&](const SpecArm& x) { return x.name == name; })) fail(s, "factor.arms", fmt::format("no arm '{}'", name));
        s.factor_arms.push_back(name);
      }
  }
  if (j.contains("data")) parse_data(s, j.at("data"));
  const spec_json& measures = need(s, j, "measures", "");
  if (!measures.is_object() || measures.empty()) fail(s, "measures", "must be an object of one or more measures: {\"NAME\": \"test_loss\"}");
  for (const auto& [name, expr] : measures.items()) {
    check_name(s, name, "measures." + name);
    s.measures.push_back(parse_measure(s, name, text(s, expr, "measures." + name), s.measures));
  }
  const spec_json& claims = need(s, j, "claims", "");
  if (!claims.is_array() || claims.empty()) fail(s, "claims", "must be an array of one or more claims");
  for (size_t i = 0; i < claims.size(); ++i) {
    s.claims.push_back(parse_claim(s, claims[i], i));
    for (size_t k = 0; k + 1 < s.claims.size(); ++k)
      if (s.claims[k].spec.id == s.claims.back().spec.id) fail(s, fmt::format("claims[{}].id", i), fmt::format("'{}' twice", s.claims[k].spec.id));
  }
  if (j.contains("placebo")) {
    const spec_json& p = j.at("placebo");
    only_keys(s, p, {"arm", "level", "pools"}, "placebo");
    spec_json c = {{"arm", need(s, p, "arm", "placebo")}};
    if (p.contains("level")) c["level"] = p.at("level");
    s.null = condition(s, c, "placebo");
    if (p.contains("pools")) s.pools = static_cast<int>(whole(s, p.at("pools"), "placebo.pools", 1));
  }
  for (const SpecArm& a : s.arms)  // every condition's recipe parses and validates before anything runs
    for (double l : s.arm_has_factor(a.name) ? s.levels : std::vector<double>{0}) (void)spec_config(s, {a.name, l});
  return s;
}

}  // namespace gf::app

// The lab pages (declared in app/lab_page.h).
#include "app/lab_page.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "app/report_page.h"
#include "lab/claims.h"
#include "lab/lab.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/plain_file.h"
#include "train/run/checkpoint.h"
#include "train/run/json_fields.h"

namespace gf::app {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace train::json_fields;

namespace {

constexpr const char* kControlSuffix = "-control";
constexpr uintmax_t kMaxFigureBytes = 4u << 20;  // a figure larger than this is linked to, not inlined

// ---------------------------------------------------------------- the lab's JSON, checked

// Whether a document is a lab's output: an object with a string "lab" and an array "claims" (what
// find_lab_json looks for; check_lab_run then checks the rest).
bool is_lab_json(const json& j) {
  if (!j.is_object()) return false;
  const json* lab = find_member(j, "lab");
  const json* claims = find_member(j, "claims");
  return lab && lab->is_string() && claims && claims->is_array();
}

void optional_string(const json& o, const char* key, const std::string& path) { (void)value_or(o, key, std::string(), path); }
void optional_bool(const json& o, const char* key, const std::string& path) { (void)value_or(o, key, false, path); }
// A number or null (NaN and Inf are written as null), when present.
void optional_number(const json& o, const char* key, const std::string& path) {
  if (const json* v = find_member(o, key)) (void)number_or_null(*v, path + key);
}
// An integer (a count), or a finite number, when present.
void optional_integer(const json& o, const char* key, const std::string& path) { (void)value_or(o, key, int64_t{0}, path); }
void optional_finite(const json& o, const char* key, const std::string& path) { (void)value_or(o, key, 0.0, path); }
void strings(const json& a, const std::string& name) {
  as_array(a, name);
  std::string s;
  for (size_t i = 0; i < a.size(); ++i) read_value(a[i], at_index(name, i), s);
}
void numbers(const json& a, const std::string& name) {
  as_array(a, name);
  for (size_t i = 0; i < a.size(); ++i) (void)number_or_null(a[i], at_index(name, i));
}
// An object member that must be an object (or array) when present; nullptr when absent.
const json* optional_object(const json& o, const char* key, const std::string& path) {
  const json* v = find_member(o, key);
  return v ? &as_object(*v, path + key) : nullptr;
}
const json* optional_array(const json& o, const char* key, const std::string& path) {
  const json* v = find_member(o, key);
  return v ? &as_array(*v, path + key) : nullptr;
}

void check_claim(const json& c, const std::string& at) {
  const std::string p = at + ".";
  as_object(c, at);
  (void)string_at(c, "id", p);
  for (const char* k : {"method", "outcome", "evidence", "kind", "statement", "side", "source"}) optional_string(c, k, p);
  for (const char* k : {"mean", "lo", "hi", "threshold"}) optional_number(c, k, p);
  optional_integer(c, "n", p);
  for (const char* k : {"holds", "control_targets"}) optional_bool(c, k, p);
  if (const json* d = optional_object(c, "design", p)) {
    optional_integer(*d, "seeds_needed", p + "design.");
    for (const char* k : {"min_effect", "pilot_sd", "alpha"}) optional_number(*d, k, p + "design.");
    optional_bool(*d, "by_design", p + "design.");
    optional_string(*d, "min_effect_reason", p + "design.");
  }
}

void check_table(const json& t, const std::string& at) {
  as_object(t, at);
  strings(member(t, "columns", at + "."), at + ".columns");
  const json& rows = as_array(member(t, "rows", at + "."), at + ".rows");
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string row = at_index(at + ".rows", r);
    as_array(rows[r], row);
    for (size_t k = 0; k < rows[r].size(); ++k)
      if (rows[r][k].is_object() || rows[r][k].is_array()) bad_field(at_index(row, k), rows[r][k], "a number or text");
  }
}

void check_dose_response(const json& d, const std::string& at) {
  const std::string p = at + ".";
  as_object(d, at);
  for (const char* k : {"statistic", "factor"}) (void)string_at(d, k, p);
  for (const char* k : {"trend", "band", "name"}) optional_string(d, k, p);
  optional_bool(d, "log_x", p);
  const json& levels = member(d, "levels", p);
  numbers(levels, p + "levels");
  if (levels.empty()) bad_field(p + "levels", levels, "at least one level");
  for (const char* k : {"mean", "lo", "hi"}) {
    const json& v = member(d, k, p);
    numbers(v, p + k);
    if (v.size() != levels.size()) bad_field(p + k, v, "one value per level");
  }
  if (const json* trends = find_member(d, "trends")) numbers(*trends, p + "trends");
}

// Everything of a lab's JSON that the page reads (app/report/lab.js and this file), by type: the
// keys lab/report.cpp writes. "data" (free-form raw numbers) is not read. Throws FieldError.
void check_lab_run(const json& j) {
  as_object(j, "the file");
  const std::string name = string_at(j, "lab");
  if (!lab_name_ok(name)) bad_field("lab", j.at("lab"), "a lab's name: a registered lab, or letters, digits, '_' and '-'");
  as_array(member(j, "claims"), "claims");
  for (size_t i = 0; i < j.at("claims").size(); ++i) check_claim(j.at("claims")[i], at_index("claims", i));
  for (const char* k : {"title", "reference", "control_removes", "blas_core"}) optional_string(j, k, "");
  for (const char* k : {"control", "ablate"}) optional_bool(j, k, "");
  optional_integer(j, "threads", "");
  optional_finite(j, "seconds", "");
  as_object(member(j, "settings"), "settings");
  for (const auto& [k, v] : j.at("settings").items())
    if (v.is_object() || v.is_array()) bad_field("settings." + k, v, "a number or text");
  if (const json* log = find_member(j, "log")) strings(*log, "log");
  if (const json* files = find_member(j, "files")) strings(*files, "files");
  if (const json* tables = optional_object(j, "tables", ""))
    for (const auto& [k, t] : tables->items()) check_table(t, "tables." + k);
  if (const json* check = optional_object(j, "check", "")) {
    for (const char* k : {"agrees", "control"}) optional_bool(*check, k, "check.");
    optional_string(*check, "line", "check.");
    for (const char* k : {"paper_claims", "paper_claims_hold", "exact_checks", "exact_checks_pass", "control_targets",
                          "control_targets_fail", "contradicted", "unsettled"})
      optional_integer(*check, k, "check.");
  }
  if (const json* placebo = optional_object(j, "placebo", "")) {
    optional_bool(*placebo, "ok", "placebo.");
    const json& claims = as_array(member(*placebo, "claims", "placebo."), "placebo.claims");
    for (size_t i = 0; i < claims.size(); ++i) {
      const std::string p = at_index("placebo.claims", i) + ".";
      as_object(claims[i], at_index("placebo.claims", i));
      (void)string_at(claims[i], "id", p);
      optional_string(claims[i], "how", p);
      for (const char* k : {"splits", "supported"}) optional_integer(claims[i], k, p);
    }
  }
  if (const json* dose = optional_array(j, "dose_response", ""))
    for (size_t i = 0; i < dose->size(); ++i) check_dose_response((*dose)[i], at_index("dose_response", i));
}

// A *.json file of a lab folder: a regular file within the bounds, nested at most kMaxLabJsonDepth.
json read_json(const std::string& path) {
  const std::string text = train::read_text_file(path, kMaxLabJsonBytes);
  try {
    return parse(text, kMaxLabJsonDepth);
  } catch (const FieldError& e) {
    GF_FAIL_AS(std::runtime_error, "{}: not a lab's output: {}", path, e.what());
  } catch (const json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: not JSON: {}", path, e.what());
  }
}

// The lab JSON of a folder, checked, or null when it has none.
json lab_json_in(const std::string& dir) {
  const std::string path = find_lab_json(dir);
  return path.empty() ? json() : parse_lab_json(train::read_text_file(path, kMaxLabJsonBytes), path);
}

// ---------------------------------------------------------------- the page's data

std::string folder_name(const std::string& dir) {
  const fs::path p = fs::path(dir).lexically_normal();
  return p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
}

bool ends_with_control(const std::string& s) {
  const std::string suffix = kControlSuffix;
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string without_control(std::string s) { return ends_with_control(s) ? s.substr(0, s.size() - std::string(kControlSuffix).size()) : s; }

// The SVG figures a run wrote (its "files"), found by name in its folder: the run may have been
// made from another working directory. Each file's text, which the page shows as an <img> (a
// picture, in which no script runs), never as markup; a figure missing, not a regular file or too
// large gets a note instead.
json figures_of(const json& run, const fs::path& dir) {
  json out = json::array();
  const json* files = find_member(run, "files");
  if (!files) return out;
  for (const auto& f : *files) {
    std::string file;
    read_value(f, "files[]", file);
    const fs::path name = fs::path(file).filename();
    if (name.extension() != ".svg") continue;
    const fs::path p = dir / name;
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
      out.push_back({{"name", name.string()}, {"missing", true}});
    } else if (!S_ISREG(st.st_mode)) {
      out.push_back({{"name", name.string()}, {"not_regular", file_kind(st.st_mode)}});
    } else if (static_cast<uintmax_t>(st.st_size) > kMaxFigureBytes) {
      out.push_back({{"name", name.string()}, {"too_large", static_cast<uintmax_t>(st.st_size)}});
    } else {
      out.push_back({{"name", name.string()}, {"svg", train::read_text_file(p.string(), kMaxFigureBytes)}});
    }
  }
  return out;
}

// A run as the page shows it: the JSON without its free-form "data" (the raw numbers stay in
// NAME.json beside the page; the figures and tables show them), with its figures.
json run_part(json run, const std::string& dir) {
  run.erase("data");
  run["figures"] = figures_of(run, dir);
  run["folder"] = dir;
  return run;
}

json lab_info(const std::string& name, const json& run) {
  json info = {{"name", name},
               {"title", value_or(run, "title", std::string())},
               {"reference", value_or(run, "reference", std::string())},
               {"control_removes", value_or(run, "control_removes", std::string())},
               {"question", ""}};
  for (const auto& l : lab::labs())
    if (l.name == name) info["question"] = l.question;
  json rows = json::array();
  for (const auto& c : lab::claim_specs_of(name))
    rows.push_back({{"id", c.id},
                    {"kind", lab::kind_name(c.kind)},
                    {"statement", c.statement},
                    {"side", lab::side_name(c.side)},
                    {"threshold", c.threshold},
                    {"source", c.source},
                    {"control_targets", c.control_targets}});
  info["claims_table"] = rows;  // lab/claims.cpp's rows, written before any run
  return info;
}

// The registry's position of a lab (unknown labs last).
size_t registry_index(const std::string& name) {
  const auto& all = lab::labs();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].name == name) return i;
  return all.size();
}

// A relative link as the path segments it is made of: the page encodes each one
// (encodeURIComponent), so that no folder name can become a scheme ("javascript:") or a query.
json link(std::initializer_list<std::string> segments) { return json(std::vector<std::string>(segments)); }

}  // namespace

bool lab_name_ok(const std::string& name) {
  for (const auto& l : lab::labs())
    if (l.name == name) return true;
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

json parse_lab_json(const std::string& text, const std::string& path) {
  try {
    const json j = parse(text, kMaxLabJsonDepth);
    check_lab_run(j);
    return j;
  } catch (const FieldError& e) {
    GF_FAIL_AS(std::runtime_error, "report: {}: malformed lab output: {}", path, e.what());
  } catch (const json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "report: {}: not JSON: {}", path, e.what());
  }
}

std::string find_lab_json(const std::string& dir) {
  if (!fs::is_directory(dir)) return "";
  const std::string base = folder_name(dir);
  for (const std::string& name : {base, without_control(base)}) {
    const fs::path p = fs::path(dir) / (name + ".json");
    if (fs::exists(p) && is_lab_json(read_json(p.string()))) return p.string();
  }
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))  // regular files only: a FIFO or device named *.json is passed over
    if (e.path().extension() == ".json" && e.is_regular_file() && is_lab_json(read_json(e.path().string()))) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.front();
}

bool holds_lab_output(const std::string& dir) {
  if (!fs::is_directory(dir)) return false;
  if (!find_lab_json(dir).empty()) return true;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && !find_lab_json(e.path().string()).empty()) return true;
  return false;
}

json lab_page_data_of(const json& run, const std::string& dir) {
  json d;
  d["kind"] = "lab";
  d["lab"] = lab_info(string_at(run, "lab"), run);
  const bool is_control = value_or(run, "control", false);
  d["result"] = is_control ? json() : run_part(run, dir);
  d["control"] = is_control ? run_part(run, dir) : json();
  d["index"] = nullptr;
  return d;
}

json lab_page_data(const std::string& dir) {
  const json main = lab_json_in(dir);
  GF_CHECK_AS(std::runtime_error, !main.is_null(), "report: '{}' holds no lab output (NAME.json from gradflow lab NAME)", dir);
  const std::string name = string_at(main, "lab");
  const bool is_control = value_or(main, "control", false);
  const std::string norm = fs::path(dir).lexically_normal().string();
  const std::string trimmed = norm.size() > 1 && norm.back() == '/' ? norm.substr(0, norm.size() - 1) : norm;
  const std::string other_dir = is_control ? without_control(trimmed) : trimmed + kControlSuffix;
  json other = other_dir != trimmed ? lab_json_in(other_dir) : json();
  if (!other.is_null() && (string_at(other, "lab") != name || value_or(other, "control", false) == is_control)) other = nullptr;  // not its counterpart
  json d = lab_page_data_of(main, trimmed);
  if (!other.is_null()) d[is_control ? "result" : "control"] = run_part(other, other_dir);
  return d;
}

std::string write_lab_page(const std::string& dir, const std::string& index) {
  json d = lab_page_data(dir);
  if (!index.empty()) {  // "../index.html" -> its segments
    json segments = json::array();
    for (const auto& part : fs::path(index)) segments.push_back(part.string());
    d["index"] = segments;
  }
  const std::string name = d["lab"]["name"];  // (lab_name_ok: a plain file name)
  const std::string path = (fs::path(dir) / (name + ".html")).string();
  write_file_atomic(path, html_page(fmt::format("gradflow lab {}: {}", name, d["lab"].value("title", "")), d, PageKind::Lab));
  return path;
}

std::string write_lab_index(const std::string& parent) {
  GF_CHECK_AS(std::runtime_error, fs::is_directory(parent), "report: '{}' is not a folder", parent);
  struct Found {
    std::string name, dir;
    json run;
  };
  std::vector<Found> labs, controls;
  for (const auto& e : fs::directory_iterator(parent)) {
    if (!e.is_directory()) continue;
    json j = lab_json_in(e.path().string());
    if (j.is_null()) continue;
    (value_or(j, "control", false) ? controls : labs).push_back({string_at(j, "lab"), e.path().string(), std::move(j)});
  }
  GF_CHECK_AS(std::runtime_error, !labs.empty() || !controls.empty(), "report: no folder in '{}' holds a lab's output (NAME/NAME.json)", parent);
  auto order = [](const Found& a, const Found& b) {
    return std::pair(registry_index(a.name), a.name) < std::pair(registry_index(b.name), b.name);
  };
  std::sort(labs.begin(), labs.end(), order);
  std::sort(controls.begin(), controls.end(), order);
  // One row per lab: its run, and its control when one ran; a control without its lab gets a row too.
  json rows = json::array();
  auto summary = [](const Found* f) -> json {
    if (!f) return nullptr;
    const json* c = find_member(f->run, "check");
    const json none = json::object();
    const json& check = c ? *c : none;
    const json* placebo = find_member(f->run, "placebo");
    json s = {{"agrees", value_or(check, "agrees", false)},
              {"line", value_or(check, "line", std::string())},
              {"placebo", placebo != nullptr},
              {"placebo_ok", placebo && value_or(*placebo, "ok", false)},
              {"seconds", value_or(f->run, "seconds", 0.0)},
              {"folder", fs::path(f->dir).filename().string()}};
    for (const char* k : {"paper_claims", "paper_claims_hold", "exact_checks", "exact_checks_pass", "control_targets", "control_targets_fail",
                          "contradicted", "unsettled"})
      s[k] = value_or(check, k, int64_t{0});
    return s;
  };
  std::vector<std::string> done;
  for (const Found& l : labs) {
    const Found* c = nullptr;
    for (const Found& k : controls)
      if (k.name == l.name && fs::path(k.dir).filename().string() == fs::path(l.dir).filename().string() + kControlSuffix) c = &k;
    const std::string page = write_lab_page(l.dir, "../index.html");
    rows.push_back({{"lab", lab_info(l.name, l.run)}, {"result", summary(&l)}, {"control", summary(c)},
                    {"page", link({fs::path(l.dir).filename().string(), fs::path(page).filename().string()})}});
    if (c) done.push_back(c->dir);
  }
  for (const Found& k : controls) {
    if (std::find(done.begin(), done.end(), k.dir) != done.end()) continue;
    const std::string page = write_lab_page(k.dir, "../index.html");
    rows.push_back({{"lab", lab_info(k.name, k.run)}, {"result", nullptr}, {"control", summary(&k)},
                    {"page", link({fs::path(k.dir).filename().string(), fs::path(page).filename().string()})}});
  }
  const json d = {{"kind", "lab-index"}, {"folder", parent}, {"labs", rows}};
  const std::string path = (fs::path(parent) / "index.html").string();
  write_file_atomic(path, html_page("gradflow lab: every lab and its control", d, PageKind::Lab));
  return path;
}

}  // namespace gf::app

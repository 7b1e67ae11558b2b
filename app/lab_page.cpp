// The lab pages (declared in app/lab_page.h).
#include "app/lab_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "app/report_page.h"
#include "lab/claims.h"
#include "lab/lab.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "train/run/checkpoint.h"

namespace gf::app {
namespace fs = std::filesystem;
namespace {

constexpr const char* kControlSuffix = "-control";
constexpr uintmax_t kMaxFigureBytes = 4u << 20;  // a figure larger than this is linked to, not inlined

bool is_lab_json(const nlohmann::json& j) { return j.is_object() && j.contains("lab") && j["lab"].is_string() && j.contains("claims") && j["claims"].is_array(); }

std::string folder_name(const std::string& dir) {
  const fs::path p = fs::path(dir).lexically_normal();
  return p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
}

bool ends_with_control(const std::string& s) {
  const std::string suffix = kControlSuffix;
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string without_control(std::string s) { return ends_with_control(s) ? s.substr(0, s.size() - std::string(kControlSuffix).size()) : s; }

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(train::read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    GF_FAIL_AS(std::runtime_error, "{}: not JSON: {}", path, e.what());
  }
}

// The lab JSON of a folder, or null when it has none.
nlohmann::json lab_json_in(const std::string& dir) {
  const std::string path = find_lab_json(dir);
  return path.empty() ? nlohmann::json() : read_json(path);
}

// The SVG figures a run wrote (its "files"), found by name in its folder: the run may have been
// made from another working directory. The text from "<svg" on, to be set into the page.
nlohmann::json figures_of(const nlohmann::json& run, const fs::path& dir) {
  nlohmann::json out = nlohmann::json::array();
  if (!run.contains("files")) return out;
  for (const auto& f : run["files"]) {
    const fs::path name = fs::path(f.get<std::string>()).filename();
    if (name.extension() != ".svg") continue;
    const fs::path p = dir / name;
    if (!fs::exists(p)) {
      out.push_back({{"name", name.string()}, {"missing", true}});
      continue;
    }
    if (fs::file_size(p) > kMaxFigureBytes) {
      out.push_back({{"name", name.string()}, {"too_large", fs::file_size(p)}});
      continue;
    }
    const std::string text = train::read_text_file(p.string());
    const size_t at = text.find("<svg");
    if (at != std::string::npos) out.push_back({{"name", name.string()}, {"svg", text.substr(at)}});
  }
  return out;
}

// A run as the page shows it: the JSON without its free-form "data" (the raw numbers stay in
// NAME.json beside the page; the figures and tables show them), with its figures.
nlohmann::json run_part(nlohmann::json run, const std::string& dir) {
  run.erase("data");
  run["figures"] = figures_of(run, dir);
  run["folder"] = dir;
  return run;
}

nlohmann::json lab_info(const std::string& name, const nlohmann::json& run) {
  nlohmann::json info = {{"name", name},
                         {"title", run.value("title", "")},
                         {"reference", run.value("reference", "")},
                         {"control_removes", run.value("control_removes", "")},
                         {"question", ""}};
  for (const auto& l : lab::labs())
    if (l.name == name) info["question"] = l.question;
  nlohmann::json rows = nlohmann::json::array();
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

}  // namespace

std::string find_lab_json(const std::string& dir) {
  if (!fs::is_directory(dir)) return "";
  const std::string base = folder_name(dir);
  for (const std::string& name : {base, without_control(base)}) {
    const fs::path p = fs::path(dir) / (name + ".json");
    if (fs::exists(p) && is_lab_json(read_json(p.string()))) return p.string();
  }
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json" && is_lab_json(read_json(e.path().string()))) found.push_back(e.path().string());
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

nlohmann::json lab_page_data(const std::string& dir) {
  const nlohmann::json main = lab_json_in(dir);
  GF_CHECK_AS(std::runtime_error, !main.is_null(), "report: '{}' holds no lab output (NAME.json from gradflow lab NAME)", dir);
  const std::string name = main["lab"];
  const bool is_control = main.value("control", false);
  const std::string norm = fs::path(dir).lexically_normal().string();
  const std::string trimmed = norm.size() > 1 && norm.back() == '/' ? norm.substr(0, norm.size() - 1) : norm;
  const std::string other_dir = is_control ? without_control(trimmed) : trimmed + kControlSuffix;
  nlohmann::json other = other_dir != trimmed ? lab_json_in(other_dir) : nlohmann::json();
  if (!other.is_null() && (other["lab"] != name || other.value("control", false) == is_control)) other = nullptr;  // not its counterpart
  nlohmann::json d;
  d["kind"] = "lab";
  d["lab"] = lab_info(name, main);
  d["result"] = is_control ? (other.is_null() ? nlohmann::json() : run_part(other, other_dir)) : run_part(main, trimmed);
  d["control"] = is_control ? run_part(main, trimmed) : (other.is_null() ? nlohmann::json() : run_part(other, other_dir));
  d["index"] = nullptr;
  return d;
}

std::string write_lab_page(const std::string& dir, const std::string& index) {
  nlohmann::json d = lab_page_data(dir);
  if (!index.empty()) d["index"] = index;
  const std::string name = d["lab"]["name"];
  const std::string path = (fs::path(dir) / (name + ".html")).string();
  write_file_atomic(path, html_page(fmt::format("gradflow lab {}: {}", name, d["lab"].value("title", "")), d, PageKind::Lab));
  return path;
}

std::string write_lab_index(const std::string& parent) {
  GF_CHECK_AS(std::runtime_error, fs::is_directory(parent), "report: '{}' is not a folder", parent);
  struct Found {
    std::string name, dir;
    nlohmann::json run;
  };
  std::vector<Found> labs, controls;
  for (const auto& e : fs::directory_iterator(parent)) {
    if (!e.is_directory()) continue;
    nlohmann::json j = lab_json_in(e.path().string());
    if (j.is_null()) continue;
    (j.value("control", false) ? controls : labs).push_back({j["lab"], e.path().string(), std::move(j)});
  }
  GF_CHECK_AS(std::runtime_error, !labs.empty() || !controls.empty(), "report: no folder in '{}' holds a lab's output (NAME/NAME.json)", parent);
  auto order = [](const Found& a, const Found& b) {
    return std::pair(registry_index(a.name), a.name) < std::pair(registry_index(b.name), b.name);
  };
  std::sort(labs.begin(), labs.end(), order);
  std::sort(controls.begin(), controls.end(), order);
  // One row per lab: its run, and its control when one ran; a control without its lab gets a row too.
  nlohmann::json rows = nlohmann::json::array();
  auto summary = [](const Found* f) -> nlohmann::json {
    if (!f) return nullptr;
    const nlohmann::json& c = f->run.value("check", nlohmann::json::object());
    return {{"agrees", c.value("agrees", false)},
            {"line", c.value("line", "")},
            {"paper_claims", c.value("paper_claims", 0)},
            {"paper_claims_hold", c.value("paper_claims_hold", 0)},
            {"exact_checks", c.value("exact_checks", 0)},
            {"exact_checks_pass", c.value("exact_checks_pass", 0)},
            {"control_targets", c.value("control_targets", 0)},
            {"control_targets_fail", c.value("control_targets_fail", 0)},
            {"contradicted", c.value("contradicted", 0)},
            {"unsettled", c.value("unsettled", 0)},
            {"placebo", f->run.contains("placebo")},
            {"placebo_ok", f->run.contains("placebo") && f->run["placebo"].value("ok", false)},
            {"seconds", f->run.value("seconds", 0.0)},
            {"folder", fs::path(f->dir).filename().string()}};
  };
  std::vector<std::string> done;
  for (const Found& l : labs) {
    const Found* c = nullptr;
    for (const Found& k : controls)
      if (k.name == l.name && fs::path(k.dir).filename().string() == fs::path(l.dir).filename().string() + kControlSuffix) c = &k;
    const std::string page = write_lab_page(l.dir, "../index.html");
    rows.push_back({{"lab", lab_info(l.name, l.run)}, {"result", summary(&l)}, {"control", summary(c)},
                    {"page", (fs::path(l.dir).filename() / fs::path(page).filename()).string()}});
    if (c) done.push_back(c->dir);
  }
  for (const Found& k : controls) {
    if (std::find(done.begin(), done.end(), k.dir) != done.end()) continue;
    const std::string page = write_lab_page(k.dir, "../index.html");
    rows.push_back({{"lab", lab_info(k.name, k.run)}, {"result", nullptr}, {"control", summary(&k)},
                    {"page", (fs::path(k.dir).filename() / fs::path(page).filename()).string()}});
  }
  const nlohmann::json d = {{"kind", "lab-index"}, {"folder", parent}, {"labs", rows}};
  const std::string path = (fs::path(parent) / "index.html").string();
  write_file_atomic(path, html_page("gradflow lab: every lab and its control", d, PageKind::Lab));
  return path;
}

}  // namespace gf::app

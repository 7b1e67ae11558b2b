// Self-contained HTML pages (declared in app/report_page.h).
#include "app/report_page.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "tensor/check.h"
#include "train/plot/svg_plot.h"

namespace gf::app {
namespace assets {
// Defined in build/generated/report_assets.cpp (cmake/embed_files.cmake).
extern const unsigned char report_css[], common_js[], run_js[], lab_js[];
extern const std::size_t report_css_size, common_js_size, run_js_size, lab_js_size;
}  // namespace assets

namespace {

bool is_scalar(const nlohmann::json& j) { return !j.is_object() && !j.is_array(); }

bool all_scalars(const nlohmann::json& array) {
  for (const auto& e : array)
    if (!is_scalar(e)) return false;
  return true;
}

void write_json(std::string& out, const nlohmann::json& j, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' '), inner(static_cast<size_t>(indent) + 1, ' ');  // one space a level
  if (is_scalar(j) || j.empty() || (j.is_array() && all_scalars(j))) {
    out += j.dump();
    return;
  }
  const bool object = j.is_object();
  out += object ? "{\n" : "[\n";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    out += inner;
    if (object) out += nlohmann::json(it.key()).dump() + ": ";
    write_json(out, *it, indent + 1);
    out += i + 1 < j.size() ? ",\n" : "\n";
  }
  out += pad + (object ? "}" : "]");
}

// A <script> block ends at "</script", and "<!--" followed by "<script" changes how the browser
// looks for that end; "<" outside a JSON string cannot occur, and inside one "\u003c" is the same
// character. So every "<" before "/", "!" or "script" is written "\u003c" (the tokens "<bos>",
// "<eos>" stay as they are).
std::string script_safe(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '<') {
      out += text[i];
      continue;
    }
    std::string next = text.substr(i + 1, 6);
    for (char& c : next) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool risky = next.rfind("/", 0) == 0 || next.rfind("!", 0) == 0 || next == "script";
    out += risky ? "\\u003c" : "<";
  }
  return out;
}

}  // namespace

std::string readable_json(const nlohmann::json& j) {
  std::string out;
  write_json(out, j, 0);
  return script_safe(out);
}

double round_significant(double v, int digits) {
  if (!std::isfinite(v) || v == 0) return v;
  return std::strtod(fmt::format("{:.{}g}", v, digits).c_str(), nullptr);
}

std::string asset(const std::string& name) {
  auto text = [](const unsigned char* bytes, std::size_t size) { return std::string(reinterpret_cast<const char*>(bytes), size); };
  if (name == "report.css") return text(assets::report_css, assets::report_css_size);
  if (name == "common.js") return text(assets::common_js, assets::common_js_size);
  if (name == "run.js") return text(assets::run_js, assets::run_js_size);
  if (name == "lab.js") return text(assets::lab_js, assets::lab_js_size);
  GF_FAIL("asset: no embedded file '{}' (report.css, common.js, run.js, lab.js)", name);
}

std::string html_page(const std::string& title, const nlohmann::json& data, PageKind kind) {
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  page += "<meta name=\"generator\" content=\"gradflow " GRADFLOW_VERSION "\">\n";
  page += fmt::format("<title>{}</title>\n<style>\n{}</style>\n</head>\n<body>\n", xml_escape(title), asset("report.css"));
  page += "<noscript>This page draws its figures with JavaScript; allow scripts for this file to see them.</noscript>\n";
  page += "<main id=\"page\"></main>\n<div id=\"tooltip\" hidden></div>\n";
  page += "<!-- The page's data: every number the figures show. -->\n";
  page += "<script type=\"application/json\" id=\"report-data\">\n" + readable_json(data) + "\n</script>\n";
  page += "<script>\n" + asset("common.js") + "</script>\n";
  page += "<script>\n" + asset(kind == PageKind::Run ? "run.js" : "lab.js") + "</script>\n";
  page += "</body>\n</html>\n";
  return page;
}

}  // namespace gf::app

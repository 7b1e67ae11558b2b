#pragma once
// Self-contained HTML pages: the run report (`gradflow report RUN`, `train --report`) and the lab
// pages (`gradflow lab NAME --html`). A page is the embedded CSS and JavaScript of app/report/
// (compiled into the program by cmake/embed_files.cmake), and the page's data as JSON in a
// <script type="application/json"> block that the JavaScript draws from. Nothing is fetched: the
// file opens offline, from disk, and can be mailed as it is.
#include <string>

#include <nlohmann/json.hpp>

namespace gf::app {

// Which script draws the page: app/report/run.js or app/report/lab.js (both on top of common.js).
enum class PageKind { Run, Lab };

// The whole page: <!DOCTYPE html> ... with title (escaped), the CSS, the data and the scripts.
std::string html_page(const std::string& title, const nlohmann::json& data, PageKind kind);

// JSON text a person can read and that stays small: objects and arrays of objects or arrays are
// indented one level a line, an array of numbers, strings or nulls is written on one line. A "<"
// before "/", "!" or "script" is written "\u003c" (the same string in JSON), so that no text in
// the data can end or confuse the <script> block that holds it.
std::string readable_json(const nlohmann::json& j);

// v to `digits` significant digits (a non-finite v unchanged): the page's numbers carry no more
// precision than a person reads from a colour or a tooltip, which keeps the file small.
double round_significant(double v, int digits = 4);

// An embedded file by name, as compiled in (for tests).
std::string asset(const std::string& name);  // "report.css", "common.js", "run.js", "lab.js"; throws for another name

}  // namespace gf::app

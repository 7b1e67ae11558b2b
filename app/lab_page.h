#pragma once
// The lab pages: one self-contained HTML page per lab (`gradflow lab NAME --html`, or
// `gradflow report DIR` on a lab's output folder) and an index of every lab (`gradflow lab all
// --html`, or `gradflow report DIR` on the parent folder). A page is drawn from what the lab wrote,
// NAME.json (lab/report.h: claims with kind, mean, lo, hi, n, method, side, threshold, source) and
// its SVG files, so it works for every lab, including labs added later: the claims table with each
// interval against its threshold, the control's result beside the lab's, the figures, the printed
// tables and log, and the paper reference.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace gf::app {

// A lab folder is outside input (people share lab output): its JSON is read as a regular file of at
// most kMaxLabJsonBytes, nested at most kMaxLabJsonDepth deep, and every key the page reads is
// checked by type (train/run/json_fields.h); errors name the file and the key.
constexpr uint64_t kMaxLabJsonBytes = uint64_t{256} << 20;
constexpr int kMaxLabJsonDepth = 64;

// A lab's name as a page takes it (it names the page's file, NAME.html): a lab of the registry, or
// letters, digits, '_' and '-' only.
bool lab_name_ok(const std::string& name);

// A lab's JSON text, parsed and checked as the page reads it: every key of lab/report.h's format
// that the page uses must have its type ("lab" a valid name, "claims" an array of claims with an
// "id", ...). Throws std::runtime_error "report: <path>: malformed lab output: 'claims[2].id' must be
// a string, got 3". For a lab's JSON from any folder, and the fuzz target lab_json.
nlohmann::json parse_lab_json(const std::string& text, const std::string& path);

// The lab's JSON in a folder: DIR/NAME.json for a folder named NAME or NAME-control, else the one
// *.json there with "lab" and "claims" (regular files only). Empty when there is none.
std::string find_lab_json(const std::string& dir);

// Whether dir is a lab's output folder, or holds one as a subfolder.
bool holds_lab_output(const std::string& dir);

// The page's data for the lab run in `dir`, with its counterpart (DIR-control for a lab, DIR
// without "-control" for a control) when that folder holds the same lab's JSON. Throws
// std::runtime_error naming the folder when it holds no lab JSON or the file is malformed.
nlohmann::json lab_page_data(const std::string& dir);
// The page's data for one checked run (parse_lab_json) whose folder is `dir`, without a counterpart.
nlohmann::json lab_page_data_of(const nlohmann::json& run, const std::string& dir);

// Writes DIR/NAME.html for the lab run in `dir`; returns the file's path. `index` (may be empty):
// the index page to link back to, relative to the page. The page holds every link as its path
// segments, which its script encodes one by one, and shows the figures as pictures (<img> of a
// data: URL), never as markup: nothing in a folder can run script in the page.
std::string write_lab_page(const std::string& dir, const std::string& index = "");

// Writes PARENT/index.html listing every lab run in PARENT's subfolders (controls beside their
// labs) and each lab's page; returns the index's path. Throws when no subfolder holds a lab JSON.
std::string write_lab_index(const std::string& parent);

}  // namespace gf::app

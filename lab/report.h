#pragma once
// What a lab fills while it runs: settings in, and out the printed tables, the figure (NAME.svg),
// the raw numbers (NAME.json) and the claims, each checked against the lab's own numbers. The
// last line printed is the check line:
//   check: AGREES with Xiong et al. 2020 ...: 3 of 3 claims hold
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

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

struct Claim {
  std::string statement;  // what the paper or course says, as tested here
  bool holds = false;     // computed from this run's numbers
  std::string evidence;   // the numbers behind the verdict
};

class Report {
 public:
  // settings: every option of the lab by name (defaults filled in), plus "out", "seeds", "seed".
  Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out = stdout);

  // ---- settings ----
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  bool on(const std::string& name) const;
  int seeds() const;                    // --seeds (>= 1)
  uint64_t seed(int i) const;           // --seed + i: the i-th run's seed
  const std::string& out_dir() const { return out_dir_; }
  const Lab& lab() const { return lab_; }

  // ---- output ----
  void section(const std::string& title);  // a heading line
  void say(const std::string& line);       // printed, and kept in the JSON's "log"
  void print(const Table& table);          // printed aligned, and kept in the JSON's "tables"
  nlohmann::json& data() { return json_["data"]; }  // raw numbers, free-form
  void add_panel(Panel panel) { panels_.push_back(std::move(panel)); }  // drawn into NAME.svg
  // Another file in the output folder (a .dot, an attention map); listed in the JSON's "files".
  void write_file(const std::string& name, const std::string& content);
  // Records and prints a claim with its verdict.
  void claim(const std::string& statement, bool holds, const std::string& evidence);
  const std::vector<Claim>& claims() const { return claims_; }

  // Writes NAME.json and NAME.svg, prints where, and the check line. Returns 0 when every claim
  // holds, 3 when one does not (and throws std::logic_error when the lab made none).
  int finish();

 private:
  void require_setting(const std::string& name) const;

  const Lab& lab_;
  std::map<std::string, std::string> settings_;
  std::FILE* out_;
  std::string out_dir_;
  nlohmann::json json_;
  std::vector<Panel> panels_;
  std::vector<Claim> claims_;
  std::vector<std::string> files_;
  double start_seconds_;
};

}  // namespace gf::lab

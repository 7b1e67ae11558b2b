// The list of labs: every file lab/labs/NAME.cpp, by its name (CMakeLists.txt generates the list).
#include <fmt/format.h>

#include <stdexcept>

#include "lab/lab.h"
#include "tensor/check.h"

namespace gf::lab {

std::vector<Lab> listed_labs();  // generated from lab/labs/*.cpp (CMakeLists.txt)

const std::vector<Lab>& labs() {
  static const std::vector<Lab> all = listed_labs();
  return all;
}

const Lab& find_lab(const std::string& name) {
  std::vector<std::string> known;
  for (const auto& l : labs()) {
    if (l.name == name) return l;
    known.push_back(l.name);
  }
  GF_FAIL("lab: no lab named '{}' (labs: {})", name, fmt::join(known, ", "));
}

}  // namespace gf::lab

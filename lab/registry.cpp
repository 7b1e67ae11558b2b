// The list of labs: adding one is writing lab/<name>.cpp with its Lab, declaring it in labs.h, and
// one line here.
#include <fmt/format.h>

#include <stdexcept>

#include "lab/labs.h"
#include "tensor/check.h"

namespace gf::lab {

std::vector<Lab> listed_labs();  // generated from lab/labs/*.cpp (CMakeLists.txt)

const std::vector<Lab>& labs() {
  static const std::vector<Lab> all = [] {
    std::vector<Lab> v = listed_labs();
    std::vector<Lab> old = {
    };
    v.insert(v.begin(), old.begin(), old.end());
    return v;
  }();
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

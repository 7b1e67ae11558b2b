#pragma once
// Choosing a layer kind by name: norms (nn/norm.h) and activations (nn/activation.h) each keep a
// list of entries {name, help, ...}; these two functions look one up and list the names, so the
// CLI's help, the run config's validation and the error messages all read the same list.
#include <string>
#include <vector>

#include "tensor/check.h"

namespace gf::nn {

// "a, b, c": the names of the entries, in order.
template <class Entry>
std::string registry_names(const std::vector<Entry>& entries) {
  std::string s;
  for (const auto& e : entries) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

// The entry called `name`; throws std::invalid_argument "<what> 'x' is unknown (known: a, b)".
template <class Entry>
const Entry& registry_find(const std::vector<Entry>& entries, const std::string& name, const char* what) {
  for (const auto& e : entries)
    if (name == e.name) return e;
  GF_FAIL("{} '{}' is unknown (known: {})", what, name, registry_names(entries));
}

}  // namespace gf::nn

#pragma once
// Choosing a layer kind by name: norms (nn/norm.h), activations (nn/activation.h) and feed-forward
// blocks (nn/ffn.h) each keep a list of entries {name, help, ...}; these functions look one up,
// list the names and add one, so the CLI's help, the run config's validation and the error
// messages all read the same list, and a program built on the library can add its own kinds
// (nn::register_norm, register_activation, register_feedforward; examples/custom_layer).
//
// The lists are std::deque: adding an entry keeps the address of every earlier one, which layers
// hold (TransformerEncoderLayer::activation). Adding is not synchronised: register kinds at start-up,
// before any model is built or another thread reads the list.
#include <string>
#include <utility>

#include "tensor/check.h"

namespace gf::nn {

// "a, b, c": the names of the entries, in order.
template <class Entries>
std::string registry_names(const Entries& entries) {
  std::string s;
  for (const auto& e : entries) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

// The entry called `name`; throws std::invalid_argument "<what> 'x' is unknown (known: a, b)".
template <class Entries>
const auto& registry_find(const Entries& entries, const std::string& name, const char* what) {
  for (const auto& e : entries)
    if (name == e.name) return e;
  GF_FAIL("{} '{}' is unknown (known: {})", what, name, registry_names(entries));
}

// Appends a new kind; throws std::invalid_argument when its name is empty, holds whitespace (names
// are command-line values and config.json strings) or is taken.
template <class Entries, class Entry>
void registry_add(Entries& entries, Entry entry, const char* what) {
  const std::string name = entry.name ? entry.name : "";
  GF_CHECK(!name.empty() && name.find_first_of(" \t\n\r") == std::string::npos,
           "register {}: the name must be a non-empty word, got '{}'", what, name);
  for (const auto& e : entries) GF_CHECK(name != e.name, "register {}: '{}' is already registered (known: {})", what, name, registry_names(entries));
  entries.push_back(std::move(entry));
}

}  // namespace gf::nn

#include "nn/module.h"

#include <set>
#include <stdexcept>

#include "tensor/check.h"

namespace gf::nn {

Variable Module::register_parameter(const std::string& name, const Tensor& value, bool requires_grad) {
  for (auto& [n, p] : params_)
    GF_CHECK(n != name, "register_parameter: '{}' registered twice", name);
  Variable v(value, requires_grad);
  v.set_name(name);
  params_.emplace_back(name, v);
  return v;
}

void Module::register_shared_parameter(const std::string& name, const Variable& param) { params_.emplace_back(name, param); }

void Module::set_parameter(const std::string& name, const Variable& param) {
  for (auto& [n, p] : params_)
    if (n == name) {
      GF_CHECK(p.shape() == param.shape(), "set_parameter: '{}' is {}, the replacement {}", name, shape_str(p.shape()),
               shape_str(param.shape()));
      p = param;
      return;
    }
  GF_FAIL("set_parameter: no parameter named '{}'", name);
}

Variable Module::parameter(const std::string& name) const {
  std::string names;
  for (const auto& [n, p] : params_) {
    if (n == name) return p;
    names += (names.empty() ? "" : ", ") + n;
  }
  GF_FAIL("parameter: no parameter named '{}' (this module has: {})", name, names.empty() ? "none" : names);
}

void Module::register_buffer(const std::string& name, const Tensor& value, bool persistent) {
  buffers_.push_back({name, value, persistent});
}

Tensor& Module::buffer(const std::string& name) {
  for (auto& b : buffers_)
    if (b.name == name) return b.value;
  GF_FAIL("buffer: no buffer named '{}'", name);
}
const Tensor& Module::buffer(const std::string& name) const { return const_cast<Module*>(this)->buffer(name); }

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", out);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  collect("", out);
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  std::set<const VariableImpl*> seen;
  for (auto& [n, p] : named_parameters())
    if (seen.insert(p.impl().get()).second) out.push_back(p);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> sd;
  for (auto& [n, p] : named_parameters()) sd[n] = p.data();
  // Buffers: walk the tree again with prefixes.
  std::vector<std::pair<std::string, const Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    for (const auto& b : m->buffers_)
      if (b.persistent) sd[prefix + b.name] = b.value;
    for (const auto& [n, c] : m->children_) stack.emplace_back(prefix + n + ".", c.get());
  }
  return sd;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::set<std::string> used;
  auto load_into = [&](const std::string& key, Tensor& dst, bool required) {
    auto it = state.find(key);
    if (it == state.end()) {
      GF_CHECK(!strict || !required, "load_state_dict: missing key '{}' {}", key, shape_str(dst.shape()));
      return;
    }
    GF_CHECK(it->second.shape() == dst.shape(), "load_state_dict: '{}' has shape {} in the checkpoint but {} in the model",
             key, shape_str(it->second.shape()), shape_str(dst.shape()));
    // float64 <-> float32 converts, as PyTorch's load_state_dict does; integer or bool weights for a
    // floating parameter are a wrong file, not a precision choice.
    GF_CHECK(is_floating(it->second.dtype()) == is_floating(dst.dtype()), "load_state_dict: '{}' is {} in the checkpoint but {} in the model",
             key, dtype_name(it->second.dtype()), dtype_name(dst.dtype()));
    dst.copy_(it->second);
    used.insert(key);
  };
  for (auto& [n, p] : named_parameters()) {
    Tensor d = p.data();
    load_into(n, d, true);
  }
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    for (auto& b : m->buffers_)
      if (b.persistent) load_into(prefix + b.name, b.value, true);
    for (auto& [n, c] : m->children_) stack.emplace_back(prefix + n + ".", c.get());
  }
  if (strict)
    for (auto& [k, v] : state)
      GF_CHECK(used.count(k), "load_state_dict: unexpected key '{}' {} in the checkpoint", k, shape_str(v.shape()));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.zero_grad();
}

void Module::to(DType dtype) {
  for (auto& p : parameters()) {
    if (p.dtype() != dtype) p.impl()->data = p.data().to(dtype);
    // An accumulated gradient follows, or the next backward would add float64 into float32.
    Tensor& g = p.impl()->grad;
    if (g.defined() && g.dtype() != dtype) g = g.to(dtype);
  }
  for (auto& b : buffers_)
    if (is_floating(b.value.dtype())) b.value = b.value.to(dtype);
  for (auto& [n, c] : children_) c->to(dtype);
}

}  // namespace gf::nn

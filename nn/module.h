#pragma once
// Module: the base of every layer. Parameters and submodules are registered by name, so that
// named_parameters() and state_dict() produce the dotted names PyTorch's state_dict does
// ("transformer.decoder.layers.1.multihead_attn.out_proj.bias"), and checkpoints cross over.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace gf::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Unique parameters (a tied weight appears once), in registration order.
  std::vector<Variable> parameters() const;
  // Every name a parameter is reachable under, tied weights included (as in state_dict).
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  // Parameters and persistent buffers by dotted name; tensors share storage with the module.
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in. strict: a missing or unexpected key is an error; a shape mismatch always
  // is. Errors name the key and its shape (both shapes for a mismatch). Values are converted to
  // the parameter's dtype.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Converts every parameter and buffer (e.g. to float64 for gradient checks and parity).
  void to(DType dtype);
  int64_t num_parameters() const;

  // This module's own parameter called `name` ("weight"), e.g. of a norm known only as a Norm;
  // throws std::invalid_argument listing the names it has.
  Variable parameter(const std::string& name) const;
  // Replaces the parameter registered as `name` by another one (weight tying); shapes must match.
  void set_parameter(const std::string& name, const Variable& param);

  // Direct children, for walking the tree.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 protected:
  Variable register_parameter(const std::string& name, const Tensor& value, bool requires_grad = true);
  // Shares an existing parameter under a second name (weight tying).
  void register_shared_parameter(const std::string& name, const Variable& param);
  void register_buffer(const std::string& name, const Tensor& value, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }
  Tensor& buffer(const std::string& name);
  const Tensor& buffer(const std::string& name) const;

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;

  struct Buffer {
    std::string name;
    Tensor value;
    bool persistent;
  };
  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace gf::nn

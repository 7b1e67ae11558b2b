#pragma once
// A numbered list of submodules: children are named "0", "1", ... as in nn.ModuleList.
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace gf::nn {

template <class M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) { items_.push_back(register_module(std::to_string(items_.size()), std::move(m))); }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace gf::nn

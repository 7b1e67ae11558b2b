#pragma once
// Dropout as a module: active in train(), the identity in eval(). Draws from the process-wide
// generator, which the trainer reseeds every step (so a resumed run drops the same units).
#include "nn/module.h"

namespace gf::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.1);
  Variable forward(const Variable& x) const;
  double p;
};

}  // namespace gf::nn

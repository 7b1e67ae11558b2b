#include "app/commands.h"

#include "app/parity.h"

namespace gf::app {

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"train", "train the translator (built-in English->Korean corpus, or --data)", cmd_train},
      {"parity", "compare modules with PyTorch reference cases, outputs and gradients", cmd_parity},
      {"demo", "train a tiny network for a few steps and print its gradients", cmd_demo},
      {"info", "show the version, the OpenBLAS kernel in use and the thread count", cmd_info},
  };
  return list;
}

}  // namespace gf::app

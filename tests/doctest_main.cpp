// The shared main of every test program: the same runtime start-up as the gradflow program.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tensor/parallel.h"
#include "tensor/runtime.h"

int main(int argc, char** argv) {
  gf::init_runtime(argc, argv);
  gf::set_num_threads(0);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

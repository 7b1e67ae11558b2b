// gradflow: the command-line program. Subcommands live in app/cmd_*.cpp.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "tensor/parallel.h"
#include "tensor/runtime.h"

int main(int argc, char** argv) {
  gf::init_runtime(argc, argv);
  gf::set_num_threads(0);
  std::printf("blas core %s, threads %d\n", gf::blas_core_in_use().c_str(), gf::max_threads());
  return 0;
}

// gradflow info: what the numeric runtime is running on.
#include <fmt/core.h>
#include <tbb/version.h>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "app/precision_choice.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/sgemm.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"
#include "train/distributed/comm.h"

namespace gf::app {

Flags info_flags() {
  return Flags("info", "Shows the OpenBLAS kernel in use (and the one this CPU should use), the library each layout of the float32 products "
                       "runs on (measured once per machine), and the thread count.");
}

void check_info_flags(const Flags&) {}

namespace {

// Which path --precision bf16 takes here, and why not the native one when it does not.
std::string bf16_line() {
  const std::string why = kernels::bf16_native_unavailable_reason();
  if (kernels::bf16_path() == kernels::Bf16Path::Native) return fmt::format("native path; oneDNN runs them with {}", kernels::bf16_isa());
  if (why.empty()) return "portable path (GRADFLOW_BF16=portable; the native one could run here)";
  return "portable path (float32 sgemm on the rounded operands, slower), because " + why;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  Flags flags = info_flags();
  if (!flags.parse(argc, argv)) return 0;
  std::string preferred = preferred_blas_core();
  fmt::print("gradflow {}\n", GRADFLOW_VERSION);
  fmt::print("openblas core: {} (this CPU suits: {})\n", blas_core_in_use(), preferred.empty() ? "OpenBLAS's own choice" : preferred);
  fmt::print("openblas config: {}\n", blas_config());
  fmt::print("threads: {} (oneTBB {}.{} and OpenBLAS share this count)\n", max_threads(), TBB_VERSION_MAJOR, TBB_VERSION_MINOR);
  const kernels::SgemmChoice& sg = kernels::sgemm_choice();
  fmt::print("float32 products in training: x W^T {}, g W {}, g^T x {} ({}; GRADFLOW_SGEMM=openblas|onednn forces one)\n",
             kernels::sgemm_library_name(sg.nt), kernels::sgemm_library_name(sg.nn), kernels::sgemm_library_name(sg.tn), sg.source);
  for (const kernels::SgemmTiming& t : sg.timings)
    fmt::print("  {} {} x {} x {}, one thread: openblas {:.1f}, onednn {:.1f} GFLOP/s\n", t.layout, t.m, t.n, t.k, t.openblas_gflops,
               t.onednn_gflops);
  fmt::print("bfloat16 products (--precision bf16): {}\n", bf16_line());
  const PrecisionChoice automatic = choose_auto_precision(this_cpu());
  fmt::print("--precision auto (the default) chooses: {} ({})\n", precision_name(automatic.precision), automatic.reason);
  namespace dist = train::distributed;
  fmt::print("data-parallel training: {}\n", dist::built_with_mpi() ? fmt::format("MPI ({}): mpirun -np N gradflow train ... (docs/distributed.md)",
                                                                                    dist::mpi_library())
                                                                     : std::string("gradflow was built without MPI (install libopenmpi-dev)"));
  return 0;
}

}  // namespace gf::app

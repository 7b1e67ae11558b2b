#pragma once
// Start-up of the numeric runtime: picks OpenBLAS's kernel for this CPU and the thread count.
//
// Debian's OpenBLAS 0.3.21 detects some current CPUs (AVX-512 Xeons among them) as "Prescott" and
// runs sgemm about 6x slower than it could. OpenBLAS reads OPENBLAS_CORETYPE only when it loads,
// before main(), so the fix is to set the variable and re-execute the program once.
#include <string>

namespace gf {

// The kernel OpenBLAS should use on this CPU from its features: "SkylakeX", "Haswell", ... or ""
// when the CPU has no AVX2 (then OpenBLAS's own choice stands).
std::string preferred_blas_core();

// Call first thing in main(). Keeps freed memory for reuse (keep_freed_memory in storage.h). If OpenBLAS chose a weaker kernel than preferred_blas_core(), sets
// OPENBLAS_CORETYPE to it and re-executes /proc/self/exe with the same arguments, at most once
// (GRADFLOW_BLAS_REEXEC marks the second run). The environment can say otherwise:
//   OPENBLAS_CORETYPE set by the user     respected: no re-execution;
//   GRADFLOW_BLAS_CORE=native             OpenBLAS's own detection stands;
//   GRADFLOW_BLAS_CORE=NAME (any other)   forces kernel NAME (case-insensitive), over OPENBLAS_CORETYPE
//                                         too, re-executing unless NAME is already in use.
// There is no other switch: any value but "native" is taken as a kernel name. Empty is unset.
void init_runtime(int argc, char** argv);

// Whether the thread count was chosen (set_num_threads with n > 0), not the hardware's default.
bool num_threads_set();

// The kernel OpenBLAS runs now (openblas_get_corename()).
std::string blas_core_in_use();
std::string blas_config();

}  // namespace gf

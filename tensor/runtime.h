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

// Call first thing in main(). If OpenBLAS chose a weaker kernel than the CPU supports and neither
// OPENBLAS_CORETYPE nor GRADFLOW_BLAS_CORE=auto-off says otherwise, sets OPENBLAS_CORETYPE and
// re-executes /proc/self/exe with the same arguments (at most once). GRADFLOW_BLAS_CORE=NAME
// forces a kernel; GRADFLOW_BLAS_CORE=native keeps OpenBLAS's own detection.
void init_runtime(int argc, char** argv);

// The kernel OpenBLAS runs now (openblas_get_corename()).
std::string blas_core_in_use();
std::string blas_config();

}  // namespace gf

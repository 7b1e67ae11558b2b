#include "tensor/runtime.h"

#include <cblas.h>
#include <tbb/global_control.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tensor/cpu_features.h"
#include "tensor/parallel.h"
#include "tensor/storage.h"

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
void openblas_set_num_threads(int);
}

namespace gf {
namespace {
std::unique_ptr<tbb::global_control> g_tbb_limit;
int g_threads = 0;
int g_gemm_on_tbb = -1;  // -1: not yet read from GRADFLOW_GEMM_THREADS
bool g_threads_chosen = false;

bool core_is_weaker(const std::string& in_use, const std::string& want) {
  // Kernels ordered by the instruction sets they use.
  auto rank = [](std::string c) {
    for (auto& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (c == "cooperlake" || c == "sapphirerapids" || c == "skylakex") return 4;
    if (c == "zen" || c == "haswell") return 3;
    if (c == "sandybridge") return 2;
    return 1;  // prescott, core2, nehalem, unknown
  };
  return rank(in_use) < rank(want);
}
}  // namespace

std::string preferred_blas_core() {
  __builtin_cpu_init();  // before main(), __builtin_cpu_supports needs it
  if (avx512_usable()) return "SkylakeX";  // the CPUID flags and the OS's AVX-512 state (cpu_features.h)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

std::string blas_core_in_use() {
  const char* c = openblas_get_corename();
  return c ? c : "unknown";
}

std::string blas_config() {
  const char* c = openblas_get_config();
  return c ? c : "unknown";
}

void init_runtime(int argc, char** argv) {
  (void)argc;
  keep_freed_memory();
  const char* forced = std::getenv("GRADFLOW_BLAS_CORE");
  if (forced && !*forced) forced = nullptr;  // set but empty: as if unset, not "force the preferred kernel"
  if (forced && std::strcmp(forced, "native") == 0) return;
  if (std::getenv("GRADFLOW_BLAS_REEXEC")) return;  // already re-executed once: never loop
  std::string want = forced ? forced : preferred_blas_core();
  if (want.empty()) return;
  const char* env_core = std::getenv("OPENBLAS_CORETYPE");
  if (env_core && !forced) return;  // the user chose a kernel explicitly
  std::string in_use = blas_core_in_use();
  bool wrong = forced ? strcasecmp(in_use.c_str(), want.c_str()) != 0 : core_is_weaker(in_use, want);
  if (!wrong) return;
  setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  setenv("GRADFLOW_BLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the slower kernel rather than stop.
}

bool num_threads_set() { return g_threads_chosen; }

void set_num_threads(int n) {
  g_threads_chosen = n > 0;
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  g_threads = n;
  g_tbb_limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, n);
  openblas_set_num_threads(gemm_on_tbb() ? 1 : n);
}

bool gemm_on_tbb() {
  if (g_gemm_on_tbb < 0) {
    const char* e = std::getenv("GRADFLOW_GEMM_THREADS");
    const bool openblas = e && std::strcmp(e, "openblas") == 0;
    if (e && *e && !openblas && std::strcmp(e, "tbb") != 0)
      std::fprintf(stderr, "gradflow: GRADFLOW_GEMM_THREADS='%s' is neither 'tbb' nor 'openblas'; using tbb\n", e);
    g_gemm_on_tbb = !openblas;
    if (g_gemm_on_tbb) openblas_set_num_threads(1);
  }
  return g_gemm_on_tbb == 1;
}

void set_gemm_on_tbb(bool on) {
  g_gemm_on_tbb = on;
  openblas_set_num_threads(on ? 1 : max_threads());
}

int max_threads() {
  if (g_threads == 0) return static_cast<int>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  return g_threads;
}

}  // namespace gf

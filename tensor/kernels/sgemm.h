#pragma once
// Which library multiplies the float32 products of training: OpenBLAS's cblas_sgemm or oneDNN's
// dnnl_sgemm (both Debian packages gradflow already links). Neither wins everywhere: on a 2-core
// Intel Xeon without AMX oneDNN was 1.1-1.35x faster on most forward and input-gradient shapes
// and 0.83-1.09x on the weight gradients (k = the batch's token count), while on AMD Zen 4
// OpenBLAS's Cooperlake kernel runs near the machine's peak. So the choice is made per layout of
// the step's products, by measuring both libraries on this machine:
//   nt  x W^T    the forward of a linear layer (and the loss's logits)
//   nn  g W      its input gradient
//   tn  g^T x    its weight gradient, whose k is the batch's token count
// (other layouts take OpenBLAS). Each product a thread runs is one single-threaded call either
// way (matmul.cpp cuts large products into one slab per thread).
//
// The choice is made once per machine, not per process: the first process measures (about half a
// second, single-threaded, on the reference model's shapes) and writes it to a cache file, and
// every later process reads it, so two runs on one machine (a run and its --resume) multiply with
// the same library and give the same bits. GRADFLOW_SGEMM=openblas or onednn forces a library for
// every layout (auto or unset: the cached or measured choice); GRADFLOW_CACHE_DIR sets the cache's
// folder (default $XDG_CACHE_HOME/gradflow, else ~/.cache/gradflow; unwritable: measured per
// process). `gradflow info` prints the choice, where it came from and the measurements.
// Decoding keeps OpenBLAS (its column blocks, matmul.h), as do float64 products.
#include <cstdint>
#include <string>
#include <vector>

namespace gf::kernels {

enum class SgemmLibrary : uint8_t { OpenBlas, OneDnn };
const char* sgemm_library_name(SgemmLibrary lib);  // "openblas", "onednn"

struct SgemmTiming {
  std::string layout;  // "nt", "nn", "tn"
  int64_t m = 0, n = 0, k = 0;
  double openblas_gflops = 0, onednn_gflops = 0;  // the faster of 3 runs each, one thread
};

struct SgemmChoice {
  SgemmLibrary nt = SgemmLibrary::OpenBlas, nn = SgemmLibrary::OpenBlas, tn = SgemmLibrary::OpenBlas;
  std::string source;                // "measured now (cache FILE)", "cache FILE (measured DATE)", "GRADFLOW_SGEMM=onednn", ...
  std::vector<SgemmTiming> timings;  // what the choice was made from (empty when forced)
};

// The process's choice, made at the first call (GRADFLOW_SGEMM, else the cache, else measured).
const SgemmChoice& sgemm_choice();
SgemmLibrary sgemm_library_for(bool ta, bool tb);

// C (m, n) = alpha * op(A) @ op(B) + beta * C, row-major with leading dims, float32, on the
// calling thread, by the given library (oneDNN held to the calling thread: one OpenMP thread).
void sgemm_on(SgemmLibrary lib, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Measures both libraries on the reference shapes now and returns the choice that gives (no cache
// is read or written): what the first process of a machine does.
SgemmChoice measure_sgemm_choice();

}  // namespace gf::kernels

// OpenBLAS's cblas_sgemm against oneDNN's dnnl_sgemm on the shapes of a training step of the reference
// model (d_model 256, ff 1024, about 3,500 tokens a batch; each product as one of gradflow's two
// threads runs it: half the rows, or for the weight gradients half the output rows with k = the
// tokens; the loss's chunks), on one thread, best of N runs each, alternated. What
// tensor/kernels/sgemm.cpp measures at start on fewer shapes, shape by shape. Not part of the build:
//   g++ -O2 scripts/sgemm_shapes.cpp -o /tmp/sgemm_shapes -lopenblas -ldnnl -fopenmp
//   OPENBLAS_CORETYPE=SkylakeX /tmp/sgemm_shapes [N]      (alone on the machine)
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  struct Sh { bool ta, tb; int m, n, k; const char* what; };
  std::vector<Sh> shapes = {
    {false, true, 1750, 768, 256, "qkv fwd"}, {false, true, 1750, 256, 256, "out fwd"}, {false, true, 1750, 1024, 256, "ff1 fwd"},
    {false, true, 1750, 256, 1024, "ff2 fwd"}, {false, false, 1750, 256, 768, "qkv dX"}, {false, false, 1750, 256, 1024, "ff1 dX"},
    {false, false, 1750, 1024, 256, "ff2 dX"}, {true, false, 384, 256, 3500, "qkv dW"}, {true, false, 512, 256, 3500, "ff1 dW"},
    {true, false, 128, 1024, 3500, "ff2 dW"}, {true, false, 128, 256, 3500, "out dW"},
    {false, true, 177, 5921, 256, "lce fwd"}, {false, false, 354, 128, 5921, "lce dH"}, {true, false, 2960, 256, 354, "lce dW"}};
  for (auto s : shapes) {
    int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    std::vector<float> a((size_t)s.m * s.k, 0.5f), b((size_t)s.k * s.n, 0.25f), c((size_t)s.m * s.n, 0.f);
    double best[2] = {1e9, 1e9};
    for (int r = 0; r < reps; ++r)
      for (int lib = 0; lib < 2; ++lib) {
        double t0 = now();
        if (lib == 0) cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc);
        else dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc);
        best[lib] = std::min(best[lib], now() - t0);
      }
    double fl = 2.0 * s.m * s.n * s.k / 1e9;
    std::printf("%-8s %5d x %5d x %5d  openblas %6.1f GF/s  onednn %6.1f GF/s  ratio %.2f\n", s.what, s.m, s.n, s.k, fl / best[0], fl / best[1], best[0] / best[1]);
  }
}

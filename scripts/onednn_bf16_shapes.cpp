// oneDNN's bf16 matmul on the shapes of a training step of the reference model (d_model 256,
// ff 1024, about 4,096 tokens a batch; each product as one of gradflow's two threads runs it), on
// one thread: the primitive gradflow uses (M, N and K given at run time, tensor/kernels/bf16.cpp)
// against one created for the fixed shape. Prints each one's implementation and GFLOP/s.
// Not part of the build:
//   g++ -O2 -std=c++17 scripts/onednn_bf16_shapes.cpp -o /tmp/onednn_bf16_shapes -ldnnl -fopenmp
//   /tmp/onednn_bf16_shapes      (alone on the machine)
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdint>
#include <unordered_map>
using namespace dnnl;
using dt = memory::data_type;
static memory::dims st(bool t, int64_t ld) { return t ? memory::dims{1, ld} : memory::dims{ld, 1}; }
int main() {
  omp_set_num_threads(1);
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  struct Sh { bool ta, tb; int64_t m, n, k; const char* what; };
  std::vector<Sh> shapes = {
    {false, true, 2048, 768, 256, "qkv fwd (half rows)"},
    {false, true, 2048, 1024, 256, "ff1 fwd"},
    {false, true, 2048, 256, 1024, "ff2 fwd"},
    {false, true, 2048, 256, 256, "out fwd"},
    {false, false, 2048, 256, 1024, "ff1 dX"},
    {false, false, 2048, 1024, 256, "ff2 dX"},
    {true, false, 512, 256, 4096, "ff1 dW (half rows of N)"},
    {true, false, 128, 1024, 4096, "ff2 dW"},
    {false, true, 1024, 8000, 256, "logits chunk"},
  };
  for (auto& sh : shapes) {
    const int64_t M = sh.m, N = sh.n, K = sh.k;
    const int64_t lda = sh.ta ? M : K, ldb = sh.tb ? K : N, ldc = N;
    std::vector<uint16_t> A(M * K, 0x3f80), B(K * N, 0x3f80);
    std::vector<float> C(M * N);
    for (int rt = 0; rt < 2; ++rt) {
      const auto R = DNNL_RUNTIME_DIM_VAL;
      memory::desc a({rt ? R : M, rt ? R : K}, dt::bf16, st(sh.ta, lda)), b({rt ? R : K, rt ? R : N}, dt::bf16, st(sh.tb, ldb)),
          c({rt ? R : M, rt ? R : N}, dt::f32, st(false, ldc));
      auto t0 = std::chrono::steady_clock::now();
      matmul::primitive_desc pd(matmul::desc(a, b, c), primitive_attr(), eng);
      matmul p(pd);
      double create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      memory am({{M, K}, dt::bf16, st(sh.ta, lda)}, eng, A.data()), bm({{K, N}, dt::bf16, st(sh.tb, ldb)}, eng, B.data()),
          cm({{M, N}, dt::f32, st(false, ldc)}, eng, C.data());
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
      for (int w = 0; w < 3; ++w) p.execute(s, args);
      int reps = 0; auto t1 = std::chrono::steady_clock::now(); double el = 0;
      while (el < 0.3) { p.execute(s, args); ++reps; el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(); }
      printf("%-24s %s %-28s create %.2f ms  %.1f GFLOP/s\n", sh.what, rt ? "runtime" : "fixed  ", pd.impl_info_str(), create_ms,
             2.0 * M * N * K * reps / el / 1e9);
    }
  }
}

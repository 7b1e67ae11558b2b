// The graph is freed after backward: memory stays flat over 1,000 training steps.
#include <doctest/doctest.h>

#include <algorithm>

#include <cstdint>
#include <cstring>

#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/unary.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "tensor/kernels/random.h"
#include "tensor/storage.h"

using namespace gf;

TEST_CASE("live tensor memory is the same after 100 and after 1,000 training steps of a small model") {
  Generator gen(7);
  nn::Linear l1(16, 64, true, gen), l2(64, 10, true, gen);
  nn::LayerNorm norm(64);
  std::vector<std::pair<std::string, Variable>> named;
  for (auto& p : l1.named_parameters()) named.emplace_back("l1." + p.first, p.second);
  for (auto& p : norm.named_parameters()) named.emplace_back("norm." + p.first, p.second);
  for (auto& p : l2.named_parameters()) named.emplace_back("l2." + p.first, p.second);
  optim::Adam adam(named, {.lr = 1e-2});
  Tensor x = kernels::randn({32, 16}, gen);              // (N, 16)
  Tensor target = Tensor::empty({32}, DType::Int64);     // (N)
  for (int64_t i = 0; i < 32; ++i) target.flat_set(i, static_cast<double>(i % 10));

  int64_t live_at_100 = 0, peak_at_100 = 0, live_at_1000 = 0;
  double first_loss = 0, last_loss = 0;
  for (int step = 1; step <= 1000; ++step) {
    Variable h = relu(norm.forward(l1.forward(Variable(x))));       // (N, 64)
    Variable logits = l2.forward(h + h * 0.5);                      // (N, 10), h used twice
    Variable loss = cross_entropy(logits, target) + mean(logits * logits) * 1e-3;
    adam.zero_grad();
    loss.backward();
    adam.step();
    if (step == 1) first_loss = loss.item();
    last_loss = loss.item();
    if (step == 100) {
      live_at_100 = memory_stats().live_bytes;
      reset_peak_memory();
      peak_at_100 = memory_stats().peak_bytes;
    }
    if (step == 1000) live_at_1000 = memory_stats().live_bytes;  // same point of the loop
  }
  MESSAGE("live bytes at step 100: " << live_at_100 << ", at step 1000: " << live_at_1000
                                     << ", peak over steps 100..1000: " << memory_stats().peak_bytes);
  CHECK(live_at_1000 == live_at_100);
  // The peak of steps 100..1000 is one step's working set above the live baseline, not growth.
  CHECK(memory_stats().peak_bytes < peak_at_100 + 256 * 1024);
  CHECK(last_loss < 0.5 * first_loss);  // it trained
}

TEST_CASE("Storage buffers are 64-byte aligned and whole, for any size") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{1} << 20, (size_t{1} << 22) + 3}) {
    CAPTURE(n);
    Storage s(n);
    CHECK(reinterpret_cast<uintptr_t>(s.data()) % 64 == 0);
    CHECK(s.nbytes() == n);
    std::memset(s.data(), 0xAB, n);  // every byte writable (the sanitizer suite checks the bounds)
    if (n) CHECK(static_cast<unsigned char*>(s.data())[n - 1] == 0xAB);
  }
}

TEST_CASE("Tensor::zeros clears every byte, in one piece or in many (a partial last piece too)") {
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{1} << 18, (int64_t{1} << 20) + 3, int64_t{3} << 20}) {  // bytes
    CAPTURE(n);
    // Dirty memory first: a freed buffer of the same size is likely to come back.
    { Tensor dirty = Tensor::full({n}, 1.0, DType::Bool); }
    Tensor t = Tensor::zeros({n}, DType::Bool);
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    CHECK(std::count(p, p + n, 0) == n);
  }
}

#include "autograd/profile.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "tensor/kernels/matmul.h"

namespace gf::profile {
namespace {

std::atomic<bool> g_on{false};
std::thread::id g_thread;
std::chrono::steady_clock::time_point g_last;
uint64_t g_last_flops = 0;
std::map<std::string, OpStats> g_table;

bool recording() { return g_on.load(std::memory_order_relaxed) && std::this_thread::get_id() == g_thread; }

uint64_t bytes_of(const Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype()) : 0; }

}  // namespace

void start() {
  g_table.clear();
  g_thread = std::this_thread::get_id();
  g_last = std::chrono::steady_clock::now();
  g_last_flops = kernels::gemm_flops();
  g_on = true;
}

void stop() { g_on = false; }

bool enabled() { return recording(); }

void mark() {
  if (!recording()) return;
  g_last = std::chrono::steady_clock::now();
  g_last_flops = kernels::gemm_flops();
}

void forward_done(const char* op, const Tensor& output) {
  if (!recording()) return;
  const auto now = std::chrono::steady_clock::now();
  OpStats& s = g_table[op ? op : "(no-grad ops)"];
  s.forward_calls += 1;
  s.forward_seconds += std::chrono::duration<double>(now - g_last).count();
  s.forward_bytes += bytes_of(output);
  const uint64_t flops = kernels::gemm_flops();
  s.forward_flops += flops - g_last_flops;
  g_last = now;
  g_last_flops = flops;
}

uint64_t flops_now() { return kernels::gemm_flops(); }

void backward_done(const char* op, double seconds, uint64_t flops, const std::vector<Tensor>& grads) {
  if (!recording()) return;
  OpStats& s = g_table[op];
  s.backward_calls += 1;
  s.backward_seconds += seconds;
  s.backward_flops += flops;
  for (const Tensor& g : grads) s.backward_bytes += bytes_of(g);
}

std::map<std::string, OpStats> results() { return g_table; }

}  // namespace gf::profile

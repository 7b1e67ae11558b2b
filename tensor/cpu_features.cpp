#include "tensor/cpu_features.h"

#include <cpuid.h>

#include <fmt/format.h>

#include <cstring>

namespace gf {
namespace {

CpuFeatures read_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {  // the vendor string in EBX, EDX, ECX ("Genu" "ineI" "ntel")
    char text[13] = {};
    std::memcpy(text, &b, 4);
    std::memcpy(text + 4, &d, 4);
    std::memcpy(text + 8, &c, 4);
    f.vendor = text;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) f.osxsave = (c >> 27) & 1u;
  // XGETBV is an invalid instruction unless the OS has set CR4.OSXSAVE, which OSXSAVE reports.
  if (f.osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx512f = (b >> 16) & 1u;
    f.avx512dq = (b >> 17) & 1u;
    f.avx512bw = (b >> 30) & 1u;
    f.avx512vl = (b >> 31) & 1u;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1u;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_cpu_features();
  return f;
}

std::string avx512_bf16_unusable_reason(const CpuFeatures& f) {
  if (!f.avx512_bf16 || !f.avx512f || !f.avx512bw) return "this CPU has no AVX512-BF16 instructions (vdpbf16ps)";
  if (!f.osxsave || !avx512_state_enabled(f.xcr0))
    return fmt::format("the CPU has AVX512-BF16 but the operating system has not enabled the AVX-512 register state (XCR0 = {:#x}, "
                       "needs bits 1, 2, 5, 6 and 7)",
                       f.xcr0);
  return "";
}

bool avx512_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.osxsave && avx512_state_enabled(f.xcr0);
}

}  // namespace gf

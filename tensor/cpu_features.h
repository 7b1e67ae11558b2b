#pragma once
// What the CPU offers and what the operating system lets a program use. An AVX-512 instruction
// needs both: the CPUID flag says the CPU has it, and XCR0 (read with XGETBV, which exists once
// CPUID says the OS uses XSAVE: OSXSAVE) says the OS saves and restores the vector registers the
// instruction touches on every context switch. Without the OS's part the instruction faults
// (#UD) however the CPU is marked; a hypervisor or a kernel booted with AVX-512 off can leave
// the flag set and the state disabled.
#include <cstdint>
#include <string>

namespace gf {

struct CpuFeatures {
  std::string vendor;        // CPUID leaf 0: "GenuineIntel", "AuthenticAMD", ... ("" if unreadable)
  bool osxsave = false;      // CPUID.1:ECX bit 27: XGETBV may be executed
  uint64_t xcr0 = 0;         // XGETBV(0), 0 without OSXSAVE
  bool avx512f = false;      // CPUID.7.0:EBX bit 16
  bool avx512dq = false;     // CPUID.7.0:EBX bit 17
  bool avx512bw = false;     // CPUID.7.0:EBX bit 30
  bool avx512vl = false;     // CPUID.7.0:EBX bit 31
  bool avx512_bf16 = false;  // CPUID.7.1:EAX bit 5 (vcvtneps2bf16, vdpbf16ps)
};

// This machine's, read once.
const CpuFeatures& cpu_features();

// XCR0 bits AVX-512 code needs enabled: 1 (XMM), 2 (YMM upper halves), 5 (opmask k0-k7),
// 6 (ZMM0-15 upper halves), 7 (ZMM16-31).
constexpr uint64_t kXcr0Avx512 = (1u << 1) | (1u << 2) | (1u << 5) | (1u << 6) | (1u << 7);
constexpr bool avx512_state_enabled(uint64_t xcr0) { return (xcr0 & kXcr0Avx512) == kXcr0Avx512; }

// Why AVX512-BF16 (with AVX512F and BW, which its code uses) cannot run with `f`, or "" when it
// can: a missing CPUID flag, or a vector state the OS has not enabled.
std::string avx512_bf16_unusable_reason(const CpuFeatures& f);
// The same for AVX512F, BW, DQ and VL (OpenBLAS's SkylakeX kernels): whether they can run here.
bool avx512_usable();

}  // namespace gf

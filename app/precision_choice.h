#pragma once
// --precision auto|fp32|bf16 (train, bench, translate, eval; auto is the default): what `auto`
// resolves to on this machine and why (docs/precision.md, "--precision auto").
#include <string>

#include "tensor/kernels/bf16.h"

namespace gf::app {

// What the auto rule reads about the machine.
struct CpuFacts {
  std::string isa;           // oneDNN's effective ISA (kernels::bf16_isa()): "avx512_core_amx", "avx512_core_bf16", "avx2", ...
  std::string vendor;        // CPUID leaf 0's vendor string: "GenuineIntel", "AuthenticAMD", ...
  std::string bf16_missing;  // "" where native bf16 products run, else why not (kernels::bf16_native_unavailable_reason())
};
// This machine's facts (ONEDNN_MAX_CPU_ISA lowers the ISA, as it lowers oneDNN's kernels).
CpuFacts this_cpu();

struct PrecisionChoice {
  Precision precision = Precision::Float32;
  std::string reason;  // why, in a few words: the start-up line's parenthesis
};

// The rule of --precision auto, a pure function of the facts: bf16 only where its products were
// measured to beat float32 in training (docs/precision.md has the measurements):
//   bf16 products cannot run here (CPU or build)            -> fp32
//   oneDNN runs avx512_core_amx (AMX tiles)                 -> bf16 (1.79x float32 on an Intel Xeon)
//   oneDNN runs avx512_core_bf16, vendor AuthenticAMD       -> bf16 (2.76x float32 on AMD Zen 4)
//   oneDNN runs avx512_core_bf16, any other vendor          -> fp32 (0.77x on an Intel Xeon without AMX:
//                                                              its vdpbf16ps runs below its float32 FMA rate)
//   any other ISA (avx2, avx512_core, ...)                   -> fp32 (no bf16 dot-product instruction)
// The ISA alone cannot tell AMD's AVX512-BF16 from Intel's, so the vendor decides between them; a
// vendor not measured gets float32.
PrecisionChoice choose_auto_precision(const CpuFacts& cpu);

// A --precision value resolved: "auto" by choose_auto_precision(this_cpu()), "fp32" and "bf16" as
// given. Another value is a UsageError naming `command`.
struct ResolvedPrecision {
  std::string requested;  // "auto", "fp32" or "bf16": what config.json keeps as "precision"
  Precision precision = Precision::Float32;
  std::string reason;
};
ResolvedPrecision resolve_precision(const std::string& requested, const std::string& command);
// The same UsageError, without resolving (the commands' flag checks).
void check_precision_value(const std::string& requested, const std::string& command);
// The start-up line: "precision: auto -> bf16 (oneDNN avx512_core_bf16, AMD: ...)", or
// "precision: fp32 (--precision fp32)".
std::string precision_line(const ResolvedPrecision& r);

}  // namespace gf::app

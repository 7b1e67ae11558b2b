#include "app/precision_choice.h"

#include <fmt/core.h>

#include "app/flags.h"
#include "tensor/check.h"
#include "tensor/cpu_features.h"

namespace gf::app {

CpuFacts this_cpu() {
  // Only the native path can beat float32: the portable one (float32 sgemm on rounded operands) is
  // slower, so auto counts it as no bf16 products at all.
  std::string missing = kernels::bf16_native_unavailable_reason();
  if (missing.empty() && kernels::bf16_path() == kernels::Bf16Path::Portable) missing = "GRADFLOW_BF16=portable forces the portable path";
  return {kernels::bf16_isa(), cpu_features().vendor, missing};
}

PrecisionChoice choose_auto_precision(const CpuFacts& cpu) {
  using enum Precision;
  if (!cpu.bf16_missing.empty()) return {Float32, "no native bf16 products here: " + cpu.bf16_missing};
  if (cpu.isa == "avx512_core_amx") return {BFloat16, "oneDNN avx512_core_amx: AMX bf16 products measured 1.8x float32 in training"};
  if (cpu.isa == "avx512_core_bf16") {
    if (cpu.vendor == "AuthenticAMD")
      return {BFloat16, "oneDNN avx512_core_bf16, AMD: bf16 products measured 2.8x float32 in training"};
    return {Float32, fmt::format("oneDNN avx512_core_bf16 without AMX, {}: only AMD's measured faster than float32 (an Intel Xeon's "
                                 "0.77x)",
                                 cpu.vendor.empty() ? std::string("unknown vendor") : cpu.vendor)};
  }
  return {Float32, fmt::format("oneDNN {}: no bf16 dot-product instructions", cpu.isa)};
}

void check_precision_value(const std::string& requested, const std::string& command) {
  GF_CHECK_AS(UsageError, requested == "auto" || requested == "fp32" || requested == "bf16",
              "{}: --precision must be auto, fp32 or bf16, got '{}'", command, requested);
}

ResolvedPrecision resolve_precision(const std::string& requested, const std::string& command) {
  check_precision_value(requested, command);
  if (requested == "auto") {
    const PrecisionChoice c = choose_auto_precision(this_cpu());
    return {requested, c.precision, c.reason};
  }
  return {requested, parse_precision(requested, "--precision"), "--precision " + requested};
}

std::string precision_line(const ResolvedPrecision& r) {
  const char* name = precision_name(r.precision);
  return r.requested == "auto" ? fmt::format("precision: auto -> {} ({})", name, r.reason) : fmt::format("precision: {} ({})", name, r.reason);
}

}  // namespace gf::app

#pragma once
// PyTorch parity: runs the reference cases written by ../shared/parity/make_parity.py (format in
// its README.md). Each case names a module kind and its config; the module is built, loaded with
// the case's parameters under their PyTorch names, run forward and backward with the stored
// upstream gradients, and every output and gradient is compared.
#include <ostream>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/kernels/bf16.h"

namespace gf::app {

struct ParityCaseResult {
  std::string name, kind;
  bool passed = false;
  double worst_abs = 0, worst_rel = 0;
  std::string worst_where;  // which tensor and element, for the failure line
  std::string error;        // set when the case could not run (unknown kind, unreadable file)
  std::string note;         // what was compared differently, said after the result
  // Under bf16 (parity.cpp, Bf16Comparison): the outputs' and the gradients' distance from the
  // reference, and the largest of one tensor, each over its tolerance (<= 1 passes).
  double bf16_outputs = 0, bf16_gradients = 0, bf16_worst_tensor = 0;
};

// dtype Float32 with Precision::BFloat16 runs the case's products in bfloat16 (float32 otherwise)
// and compares each tensor with the float64 reference against PyTorch's bfloat16 autocast results
// stored in the case (scripts/make_parity_bf16.py).
ParityCaseResult run_parity_case(const std::string& path, DType dtype, Precision precision = Precision::Float32);

// Runs every *.safetensors in dir (sorted), prints one line a case and "N passed, M failed";
// returns the number of failures (cases that failed or could not run).
int run_parity_dir(const std::string& dir, DType dtype, std::ostream& out, Precision precision = Precision::Float32);

int cmd_parity(int argc, char** argv);

}  // namespace gf::app

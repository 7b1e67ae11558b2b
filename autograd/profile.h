#pragma once
// Time and bytes by op, forward and backward: what `gradflow bench train --profile` prints, to
// choose optimisations by measurement. Off unless started; then each op costs two clock reads.
//   Forward: ops run one after another on the thread that started the profile, so the time from
//   the previous op's end (or mark()) to this op's end is charged to this op, glue code of the
//   module between the two included. Bytes: the op's output. Ops recorded without a Node (no
//   input needs grad) are charged as "(no-grad ops)".
//   Backward: each Node's backward is timed alone. Bytes: the gradients it returns.
//   GEMM FLOPs: kernels::gemm_flops() counted over the same spans, so that time over FLOPs shows
//   which op's matrix products run far from the machine's peak.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace gf::profile {

struct OpStats {
  int64_t forward_calls = 0, backward_calls = 0;
  double forward_seconds = 0, backward_seconds = 0;
  uint64_t forward_bytes = 0, backward_bytes = 0;
  uint64_t forward_flops = 0, backward_flops = 0;  // matrix products' FLOPs (kernels::gemm_flops())
};

void start();  // clears the table and starts recording on this thread
void stop();
bool enabled();
void mark();  // the forward clock restarts here (after work that is not an op: the optimizer, data)
void forward_done(const char* op, const Tensor& output);
uint64_t flops_now();  // kernels::gemm_flops(), for backward_done's span
void backward_done(const char* op, double seconds, uint64_t flops, const std::vector<Tensor>& grads);
std::map<std::string, OpStats> results();

}  // namespace gf::profile

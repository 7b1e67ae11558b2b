#pragma once
// The measurements behind lab `precision` (lab/labs/precision.cpp), public so that tests can check
// them; defined in lab/parts/precision_measures.cpp. Everything rounds with the scalar
// bfloat16(float) of tensor/dtype.h: the lab runs on any CPU, AVX512-BF16 or not.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lab/common.h"

namespace gf::lab {

constexpr double kFp16Zero = 0x1p-25;        // below this float16 rounds to 0 (half its smallest subnormal 2^-24)
constexpr double kFp16Normal = 0x1p-14;      // float16's smallest normal: below it, fewer significant bits
constexpr double kBf16HalfSpacing = 0x1p-9;  // an update below this share of a weight is lost to rounding (at worst 2^-8)

// ---------------------------------------------------------------- 1. master weights

// The training runs' shape and schedule (the lab's flags).
struct BF16Training {
  int64_t d_model = 32, layers = 1, steps = 300;
  double lr = 0.003;
  int64_t warmup = 50, max_tokens = 1024, eval_pairs = 200;
};

// One module group's updates over the second half of training.
struct GroupStats {
  double lost = 0, moved = 0;  // updates lost to rounding, and nonzero updates
  double ratio_sum = 0;        // sum over those steps of |update| / |weight|
  int64_t steps = 0;
  double lost_share() const { return moved > 0 ? lost / moved : 0.0; }
  double ratio() const { return steps > 0 ? ratio_sum / static_cast<double>(steps) : 0.0; }
};

struct BF16Arm {
  std::vector<double> losses;            // per step
  std::vector<std::string> group_names;  // train::grad_groups()'s groups
  std::vector<GroupStats> groups;        // per group
  double lost_share = 0;                 // over every weight, second half
  double nll = 0;                        // held-out, teacher-forced
  Tensor logit_grad;                     // with keep_grads: the last step's d loss / d logits (B, T, V)
  std::vector<std::pair<std::string, Tensor>> param_grads;  // and every parameter's gradient then
};

// One arm: Adam on data.train with the trainer's schedule, from a model (2 heads, feed-forward 2x
// d_model) drawn from `seed` and rounded to bfloat16, on the batches `seed` orders. master: a
// float32 copy is what Adam updates; every forward pass uses its bfloat16 rounding. Otherwise the
// weights themselves are bfloat16 values: each step's result is rounded back, and an update that
// does not change the rounded weight is lost.
BF16Arm train_bf16_arm(const IdData& data, const BF16Training& t, uint64_t seed, bool master, bool keep_grads);

// ---------------------------------------------------------------- 2. range

struct Range {
  double fp16_zero = 0, fp16_subnormal = 0, bf16_zero = 0;  // shares of the nonzero entries
  double max_abs = 0;
  int64_t nonzero = 0;
};
Range range_of(const std::vector<Tensor>& parts);
// The smallest power of two by which the loss must be scaled for fewer than 0.1% of the entries to
// round to 0 in float16: scaling moves the whole range up (Micikevicius et al. 2018, section 3.2).
int loss_scale_exponent(const std::vector<Tensor>& parts);

// ---------------------------------------------------------------- 3. softmax against length

struct SoftmaxErrors {
  double products = 0;  // gradflow's bf16: scores from bfloat16 q and k, summed and softmaxed in float32
  double all_bf16 = 0;  // scores, exponentials and the running sum in bfloat16
};
// Mean over `rows` query rows of the total variation distance between the softmax weights and the
// exact ones, for L keys; q, k ~ N(0, 1) of d_k features, scores scaled to standard deviation
// `score_sd` (how peaked trained attention is).
SoftmaxErrors softmax_errors(int64_t L, int64_t dk, int64_t rows, double score_sd, uint64_t seed);

}  // namespace gf::lab

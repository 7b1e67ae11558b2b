#pragma once
// The measurements behind lab `gqa` (lab/labs/gqa.cpp), public so that tests can check them;
// defined in lab/parts/gqa_models.cpp.
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/common.h"
#include "lab/real_data.h"
#include "nn/seq2seq.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

// The multi-head translator that computes what a grouped-query one computes: in every attention
// module, key/value head j's weights copied to each query head of its group (heads j*G .. j*G+G-1,
// G = heads / kv_heads, PyTorch's repeat_interleave order) in in_proj_weight/in_proj_bias, every
// other weight as it is, the same dtype. Its key/value head h serves query head h alone, so its
// gradient is query head h's part of the grouped model's shared-head gradient.
std::unique_ptr<nn::Seq2SeqTransformer> expand_to_multihead(const nn::Seq2SeqTransformer& grouped);

// Ainslie et al.'s conversion of a multi-head checkpoint: a translator with `kv_heads` key/value
// heads whose key and value head j is the mean of the multi-head model's heads j*G .. j*G+G-1
// (G = heads / kv_heads), the queries, outputs and every other weight copied, the same dtype. With
// kv_heads = heads, an exact copy. Throws std::invalid_argument when kv_heads does not divide heads
// or `multihead` is grouped already.
std::unique_ptr<nn::Seq2SeqTransformer> pool_to_grouped(const nn::Seq2SeqTransformer& multihead, int64_t kv_heads);

// The grouped model's key/value gradients against its expansion's, for one batch's teacher-forced
// loss (no smoothing). Per key/value head j of every attention module: g_j, the gradient of head
// j's rows of k_proj.weight and v_proj.weight (one vector), and the G vectors g_j,i of the rows of
// the expansion's in_proj_weight that copy them (query head j*G + i's part). Gradients are cleared
// before and after.
struct SharedHeadGrads {
  double loss_difference = 0;  // |loss(grouped) - loss(expansion)| / |loss(grouped)|
  double sum_difference = 0;   // largest |g_j - sum_i g_j,i| / |g_j| over heads and modules
  double ratio = 0;            // mean over heads and modules of |g_j| / mean_i |g_j,i| (1 when G = 1)
  double cosine = 0;           // mean cosine between two query heads' parts g_j,i and g_j,k (NaN when G = 1)
  int64_t heads = 0;           // key/value heads measured, over every module
};
SharedHeadGrads shared_head_grads(nn::Seq2SeqTransformer& grouped, const train::BatchTensors& batch);

// The group sizes G (query heads per key/value head) of the lab's dose-response (--groups, 1,2,4,8
// by default): 4 or more, strictly increasing, each dividing `heads`, the first 1 (the multi-head
// checkpoint itself), the second 2 (gqa_near_mha's and shared_grad_g2's arm) and the last `heads`
// (multi-query, shared_grad_mqa's arm). Throws std::invalid_argument naming the flag otherwise.
void check_groups(const std::vector<int64_t>& groups, int64_t heads);

// The lab's settings (its flags: lab/labs/gqa.cpp's field table).
struct GqaSettings {
  TaskSettings task;  // reverse, 10 symbols, lengths 4-8, 2000 training and 200 held-out sequences
  int64_t d_model = 32, heads = 8;
  std::vector<int64_t> groups{1, 2, 4, 8};  // the arms' group sizes G: heads / G key/value heads
  int64_t layers = 2, steps = 400, uptrain = 100;
  double uptrain_lr = 0.0005;
  bool scratch = false;
  double lr = 0.002;
  int64_t max_tokens = 1024;
  RealDataSettings real;
};

// The multi-head checkpoint every arm of a seed starts from: s.steps steps from the seed's
// initialisation (Adam at s.lr, 10% warm-up), in eval mode.
std::unique_ptr<nn::Seq2SeqTransformer> gqa_checkpoint(const GqaSettings& s, const IdData& data, uint64_t seed);

// One arm of one seed: `kv` key/value heads, from the multi-head checkpoint `start` (pooled to kv
// heads, then uptrained s.uptrain steps at s.uptrain_lr on batches in another order), or from
// scratch (s.steps + s.uptrain steps) when `start` is null. `quality_only` (a placebo's run) stops
// after the held-out teacher-forced scores.
struct GqaArm {
  int64_t kv = 0, kv_built = 0;  // the arm's key/value heads, and the built model's
  int64_t params = 0;
  std::vector<double> losses;    // uptraining (from scratch: the whole training)
  bool diverged = false;
  TeacherForced converted;       // just after the conversion, before uptraining (from scratch: unused)
  TeacherForced tf;
  Accuracy fr;
  SharedHeadGrads init, trained;  // at a fresh initialisation (seed's, float64); at the end
  int64_t bytes_per_token = 0, formula = 0, cross_bytes = 0;  // decoding's DecodeStats against kv_bytes_per_token
  double bleu = NAN;  // `real` given: greedy BLEU on its first s.task.eval validation pairs
};
GqaArm train_gqa_arm(const GqaSettings& s, const IdData& data, const RealData* real, int64_t kv, bool quality_only, uint64_t seed,
                     const nn::Seq2SeqTransformer* start);
// An arm's numbers as gqa.json keeps them ("runs").
void to_json(nlohmann::json& j, const GqaArm& a);

}  // namespace gf::lab

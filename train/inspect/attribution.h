#pragma once
// Which source tokens a translator's output depends on, for one translation: gradient-times-input,
// blank-out, leave-one-out and integrated gradients over the source tokens, beside every attention
// map of the same teacher-forced pass (train/inspect/maps.h reads them: head means, rollout). Used
// by the `attribution` lab, `gradflow attention --grad` and `gradflow report`'s attention explorer.
//
// Gradient-times-input: for each output token y_t (teacher-forced on the translation itself), the
// gradient of log p(y_t | y_<t, source) with respect to each source token's embedding x_s, as the
// model feeds it (E[src_s] * sqrt(d_model), before the positional encoding is added), dotted with
// that embedding: g_ts = (d log p(y_t) / d x_s) . x_s. This is the gradient with respect to a
// one-hot input at the token's index (Jain and Wallace 2019), and the first-order change of
// log p(y_t) when x_s is scaled by (1 + eps): g_ts * eps. The attribution map is |g_ts|.
#include <cstdint>
#include <vector>

#include "nn/seq2seq.h"
#include "tensor/tensor.h"
#include "train/inspect/maps.h"

namespace gf::train::inspect {

struct AttributionMaps {
  std::vector<std::vector<Map>> cross;  // [decoder layer][head]: (T, S) cross-attention
  std::vector<std::vector<Map>> enc_self;  // [encoder layer][head]: (S, S)
  std::vector<std::vector<Map>> dec_self;  // [decoder layer][head]: (T, T)
  Map grad_dot;   // (T, S): g_ts = (d log p(y_t) / d x_s) . x_s, signed
  Map grad_norm;  // (T, S): |d log p(y_t) / d x_s|
  std::vector<double> log_probs;  // (T): log p(y_t) of each output token
};

// The maps of one translation: src (S) source ids and out (T) output ids ending with <eos>, the
// model teacher-forced on <bos> + out[:-1] (model in eval mode; no padding). Its backward pass, as
// integrated_gradients', also adds into the parameters' gradients: zero_grad() where they matter.
AttributionMaps attribution_maps(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out);

// Blank-out (occlusion) of one source token at a time: (T, S), log p(y_t) with every token in place
// minus log p(y_t) with x_s set to zero (its position encoding stays). No graph.
Map blank_out(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out);

// Integrated gradients (Sundararajan et al. 2017) of log p(y_t) with respect to each source token's
// embedding x_s, on the straight path from the zero embedding (every token at once; positions
// kept, as blank-out's baseline) to x, by the midpoint rule with `steps` points:
//   IG_ts = x_s . (1 / steps) sum_k d log p(y_t) / d x_s at ((k + 0.5) / steps) x.
// Completeness: sum_s IG_ts = log p(y_t | x) - log p(y_t | 0), up to the rule's error.
struct IntegratedGradients {
  Map ig;                         // (T, S), signed
  std::vector<double> endpoints;  // (T): log p(y_t | x) - log p(y_t | 0)
};
IntegratedGradients integrated_gradients(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out,
                                         int steps);

// Next-token distributions of the teacher-forced output (out ends with <eos>) for source
// embeddings xb (B, S, D): [row][t] a distribution over the target vocabulary. No graph.
std::vector<Map> output_distributions(const nn::Seq2SeqTransformer& model, const Tensor& xb, const std::vector<int64_t>& out);

// Leave-one-out (Jain and Wallace 2019): (T, S), the total variation distance between the
// next-token distribution at step t with the whole source and with token s blanked out: masked out
// of every attention that reads the source (the encoder's self-attention and the decoder's
// cross-attention, as padding is), every other token at its own position. Needs at least 2 source
// tokens. No graph.
Map leave_one_out(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src, const std::vector<int64_t>& out);

// The source token embeddings the model feeds its encoder, before positions: (S, D).
Tensor source_embeddings(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src);
// log p(out[t]) for every t, teacher-forced, with the source embeddings x (S, D) given (no graph).
std::vector<double> output_log_probs(const nn::Seq2SeqTransformer& model, const Tensor& x, const std::vector<int64_t>& out);

}  // namespace gf::train::inspect

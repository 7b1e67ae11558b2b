#pragma once
// The measurements behind lab `depth` (lab/labs/depth.cpp), public so that tests can check them;
// defined in lab/parts/depth_measures.cpp.
#include <cstdint>
#include <vector>

#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::lab {

// Dong et al.'s distance from rank 1, res(X) = |X - 1 x^T|_F / |X|_F with x the mean row (the
// best rank-1 approximation of that form in the Frobenius norm), averaged over the batch:
// x (B, n, D) -> a number in [0, 1]; 0 when every token of every sequence is the same.
double rank1_residual(const Tensor& x);

// Admin's output change: each parameter of the encoder and decoder stacks (transformer.*) moved by
// eps * |W|_F in a random direction (drawn from `seed`), the logits of `batch` recomputed, and
// |F(x, W + dW) - F(x, W)|_F / |F(x, W)|_F returned. The weights are restored afterwards.
double relative_output_change(nn::Seq2SeqTransformer& model, const train::Batch& batch, double eps, uint64_t seed);

// A stack of attention-only layers (nn::MultiheadAttention, no FFN, no LayerNorm), float64,
// X_{l+1} = SA(X_l) or X_l + SA(X_l) with `skip`, on X_0 ~ N(0, 1) of (batch, tokens, d_model).
// Loss <X_L, R> with R ~ N(0, 1) fixed; per layer l (first layer first):
struct AttentionStack {
  std::vector<double> res;         // layers + 1: rank1_residual of X_0 .. X_L
  std::vector<double> q_over_v;    // layers: |d loss / d W_Q| / |d loss / d W_V| (in_proj_weight's rows)
  std::vector<double> k_over_v;    // layers: the same for W_K
};
AttentionStack attention_stack(int64_t layers, bool skip, int64_t d_model, int64_t heads, int64_t tokens, int64_t batch, uint64_t seed);

}  // namespace gf::lab

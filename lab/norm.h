#pragma once
// The measurement behind lab `norm` (lab/norm.cpp), public so that tests can check it.
#include <memory>
#include <vector>

#include "lab/common.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"

namespace gf::lab {

// Xiong et al.'s quantity: |d loss / d linear2.weight| (Frobenius) of every encoder and decoder
// layer, for the teacher-forced cross-entropy (mean per target token, PAD ignored, no smoothing)
// of one batch, from one backward pass; and, to see why, the residual stream x_l after each layer
// (B, len, D) and the gradient reaching it. The forward pass is Seq2SeqTransformer::forward's
// with every mask on, written out layer by layer so that each x_l can keep its gradient. The
// model's gradients are cleared before and after.
struct LayerGradNorms {
  std::vector<double> encoder, decoder;        // |d loss / d linear2.weight|, one per layer, first layer first
  std::vector<double> encoder_x, decoder_x;    // |x_l|, Frobenius over the batch
  std::vector<double> encoder_dx, decoder_dx;  // |d loss / d x_l|
  double loss = 0;                             // the batch's loss
};
LayerGradNorms linear2_grad_norms(nn::Seq2SeqTransformer& model, const train::Batch& batch);

// The three ways lab norm builds a layer stack. DeepNorm (Wang et al. 2022) is Post-LN with each
// residual scaled by alpha and the branches' value, output and FFN weights by beta at initialisation.
enum class Arch { PostLN, PreLN, DeepNorm };
const char* arch_name(Arch a);  // "Post-LN", "Pre-LN", "DeepNorm"
// DeepNorm's constants for an encoder-decoder of N encoder and M decoder layers (Wang et al. 2022,
// Table 1): encoder alpha 0.81 (N^4 M)^(1/16), beta 0.87 (N^4 M)^(-1/16); decoder alpha (3M)^(1/4),
// beta (12M)^(-1/4).
struct DeepNormConstants {
  double enc_alpha, enc_beta, dec_alpha, dec_beta;
};
DeepNormConstants deepnorm_constants(int64_t N, int64_t M);
// A model of `base`'s shape in one of the three stacks (base.layer.norm_first is set by `arch`):
// DeepNorm's Xavier weights of the value and output projections and of the FFN are scaled by beta
// (DeepNorm's Xavier gain), queries and keys keep gain 1.
std::unique_ptr<nn::Seq2SeqTransformer> make_norm_model(const nn::Seq2SeqOptions& base, Arch arch, uint64_t seed);

// The mean over the first `batches` of `bs` of linear2_grad_norms, for a fresh model of `shape` in
// stack `arch` drawn from `seed` (training mode, no dropout).
LayerGradNorms mean_linear2_grad_norms(const nn::Seq2SeqOptions& shape, Arch arch, const std::vector<train::Batch>& bs, size_t batches,
                                       uint64_t seed);
// A fresh model trained by fit(o): its losses (NaN after a divergence, so that every run has
// o.steps of them) and its held-out NLL on data.test; a diverged run counts as its first loss, what
// a model that learnt nothing scores.
struct NormTraining {
  std::vector<double> losses;
  double nll = 0;
  bool diverged = false;
};
NormTraining train_norm_model(const nn::Seq2SeqOptions& shape, Arch arch, const IdData& data, const FitOptions& o);

}  // namespace gf::lab

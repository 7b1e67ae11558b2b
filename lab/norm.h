#pragma once
// The measurement behind lab `norm` (lab/norm.cpp), public so that tests can check it.
#include <vector>

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

}  // namespace gf::lab

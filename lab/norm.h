#pragma once
// The measurement behind lab `norm` (lab/norm.cpp), public so that tests can check it.
#include <vector>

#include "nn/seq2seq.h"
#include "train/batching.h"

namespace gf::lab {

// Xiong et al.'s quantity: |d loss / d linear2.weight| (Frobenius) of every encoder and decoder
// layer, for the teacher-forced cross-entropy (mean per target token, PAD ignored, no smoothing)
// of one batch, from one backward pass. The model's gradients are cleared before and after.
struct LayerGradNorms {
  std::vector<double> encoder, decoder;  // one per layer, first layer first
  double loss = 0;                       // the batch's loss
};
LayerGradNorms linear2_grad_norms(nn::Seq2SeqTransformer& model, const train::Batch& batch);

}  // namespace gf::lab

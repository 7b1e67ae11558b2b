// The measurements behind lab `leak` (lab/labs/leak.cpp): the decoder's Jacobian and its statistics.
#include <algorithm>
#include <cmath>

#include "lab/leak.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

JacobianGrid decoder_jacobian(const nn::Seq2SeqTransformer& model, const train::EncodedPair& pair) {
  train::Batch b = train::collate({pair}, std::vector<size_t>{0});
  train::BatchTensors t = train::to_tensors(b);
  const int64_t T = t.tgt_in.size(1);
  Variable emb = model.embed_tgt(t.tgt_in);  // (1, T, D)
  emb.retain_grad();
  Tensor causal = model.masks.causal ? nn::make_causal_mask(T) : Tensor();                                      // (T, T)
  Variable memory = model.encode(t.src, Tensor());                                                              // (1, S, D)
  Variable logits = model.project(model.transformer->decoder->forward(emb, memory, causal, Tensor(), Tensor()).output);  // (1, T, V)
  const int64_t V = logits.size(2), D = emb.size(2);
  JacobianGrid J(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(T), 0.0));
  // One backward per output entry (t, v): row v of the block d logit_t / d input is emb.grad.
  for (int64_t row = 0; row < T; ++row)
    for (int64_t v = 0; v < V; ++v) {
      Tensor up = Tensor::zeros({1, T, V}, logits.dtype());  // (1, T, V): one-hot at (row, v)
      up.flat_set(row * V + v, 1.0);
      emb.zero_grad();
      logits.backward(up, /*retain_graph=*/true);
      const Tensor g = emb.grad().contiguous();  // (1, T, D)
      for (int64_t col = 0; col < T; ++col)
        for (int64_t d = 0; d < D; ++d) J[row][col] += g.flat_get(col * D + d) * g.flat_get(col * D + d);
    }
  for (auto& r : J)
    for (auto& x : r) x = std::sqrt(x);
  return J;
}

JacobianStats jacobian_stats(const std::vector<JacobianGrid>& grids) {
  JacobianStats s;
  double total = 0, above_sum = 0;
  int64_t next = 0, rows = 0;
  for (const JacobianGrid& J : grids) {
    const size_t T = J.size();
    for (size_t r = 0; r < T; ++r) {
      for (size_t c = 0; c < T; ++c) {
        total += J[r][c];
        if (c > r) {
          ++s.above;
          s.above_nonzero += J[r][c] != 0.0;
          s.above_max = std::max(s.above_max, J[r][c]);
          above_sum += J[r][c];
        } else {
          s.lower_zero += J[r][c] == 0.0;
        }
      }
      // Apart from its own input (the residual path makes that one large), which input does logit_r lean on most?
      if (r + 1 < T) {
        double best = 0;
        for (size_t c = 0; c < T; ++c)
          if (c != r) best = std::max(best, J[r][c]);
        next += J[r][r + 1] > 0 && J[r][r + 1] == best;
        ++rows;
      }
    }
  }
  s.above_share = total > 0 ? above_sum / total : 0;
  s.next_argmax = rows ? static_cast<double>(next) / static_cast<double>(rows) : 0;
  return s;
}

JacobianGrid mean_grid(const std::vector<JacobianGrid>& grids) {
  GF_CHECK(!grids.empty(), "mean_grid: no grids to average");
  JacobianGrid m = grids.front();
  for (size_t k = 1; k < grids.size(); ++k)
    for (size_t r = 0; r < m.size(); ++r)
      for (size_t c = 0; c < m.size(); ++c) m[r][c] += grids[k][r][c];
  for (auto& row : m)
    for (auto& x : row) x /= static_cast<double>(grids.size());
  return m;
}

}  // namespace gf::lab

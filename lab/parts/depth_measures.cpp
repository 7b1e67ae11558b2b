// The measurements behind lab `depth` (lab/labs/depth.cpp; declared in lab/depth.h): the distance
// from rank 1, Admin's output change and a stack of attention-only layers.
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/reduce.h"
#include "lab/common.h"
#include "lab/depth.h"
#include "nn/multihead_attention.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

double rank1_residual(const Tensor& x) {
  GF_CHECK(x.ndim() == 3, "rank1_residual: expects (B, n, D), got {}", shape_str(x.shape()));
  const Tensor c = x.to(DType::Float64).contiguous();  // (B, n, D)
  const int64_t B = c.size(0), n = c.size(1), D = c.size(2);
  const double* p = c.data<double>();
  double total = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double* xb = p + b * n * D;
    std::vector<double> mean_row(static_cast<size_t>(D), 0.0);  // (D)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < D; ++j) mean_row[j] += xb[i * D + j] / static_cast<double>(n);
    double dev = 0, all = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < D; ++j) {
        const double v = xb[i * D + j];
        dev += (v - mean_row[j]) * (v - mean_row[j]);
        all += v * v;
      }
    total += all > 0 ? std::sqrt(dev / all) : 0.0;
  }
  return total / static_cast<double>(B);
}

double relative_output_change(nn::Seq2SeqTransformer& model, const train::Batch& batch, double eps, uint64_t seed) {
  NoGradGuard ng;
  const train::BatchTensors t = train::to_tensors(batch);
  const Tensor before = model.forward(t.src, t.tgt_in).data().clone();  // (B, T, V)
  Generator gen(seed);
  std::vector<std::pair<Tensor, Tensor>> saved;  // (parameter, its original values)
  for (auto& [name, p] : model.named_parameters()) {
    if (name.rfind("transformer.", 0) != 0) continue;
    Tensor w = p.data();  // the parameter's shape; shares its storage
    saved.emplace_back(w, w.clone());
    const Tensor u = kernels::randn(w.shape(), gen, DType::Float64);  // w's shape: a random direction
    const double scale = eps * l2_norm(w) / l2_norm(u);
    for (int64_t i = 0; i < w.numel(); ++i) w.flat_set(i, w.flat_get(i) + scale * u.flat_get(i));
  }
  const Tensor after = model.forward(t.src, t.tgt_in).data();  // (B, T, V)
  for (auto& [w, original] : saved) w.copy_(original);
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < before.numel(); ++i) {
    const double a = before.flat_get(i), b = after.flat_get(i);
    diff += (b - a) * (b - a), norm += a * a;
  }
  return std::sqrt(diff / norm);
}

AttentionStack attention_stack(int64_t layers, bool skip, int64_t d_model, int64_t heads, int64_t tokens, int64_t batch, uint64_t seed) {
  GF_CHECK(layers >= 1, "attention_stack: layers must be positive, got {}", layers);
  Generator gen(seed);
  std::vector<std::shared_ptr<nn::MultiheadAttention>> stack;
  for (int64_t l = 0; l < layers; ++l) {
    stack.push_back(std::make_shared<nn::MultiheadAttention>(d_model, heads, 0.0, true, gen));
    stack.back()->to(DType::Float64);  // res falls below float32's resolution within a few layers
  }
  Variable x(kernels::randn({batch, tokens, d_model}, gen, DType::Float64));  // (B, n, D): X_0
  const Tensor r = kernels::randn({batch, tokens, d_model}, gen, DType::Float64);  // (B, n, D): d loss / d X_L
  AttentionStack out;
  out.res.push_back(rank1_residual(x.data()));
  for (const auto& sa : stack) {
    Variable y = sa->forward(x, x, x).output;  // (B, n, D)
    x = skip ? x + y : y;                      // (B, n, D)
    out.res.push_back(rank1_residual(x.data()));
  }
  Variable loss = sum(x * Variable(r));  // ()
  loss.backward();
  for (const auto& sa : stack) {
    const Tensor g = sa->in_proj_weight.grad();  // (3D, D): rows Q, then K, then V
    const double gq = l2_norm(g.narrow(0, 0, d_model)), gk = l2_norm(g.narrow(0, d_model, d_model));
    const double gv = l2_norm(g.narrow(0, 2 * d_model, d_model));
    out.q_over_v.push_back(gq / gv);
    out.k_over_v.push_back(gk / gv);
  }
  return out;
}

}  // namespace gf::lab

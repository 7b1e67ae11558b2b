// The measurements behind lab `scale` (lab/labs/scale.cpp): one attention's softmax and the
// gradient through it, and a translator trained with and without 1/sqrt(d_k).
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "lab/scale.h"
#include "tensor/kernels/random.h"

namespace gf::lab {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

SoftmaxStats softmax_stats(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& upstream, double scale) {
  Variable q(q_in, true), k(k_in), v(v_in);
  const int64_t L = q.size(1), S = k.size(1);
  const int64_t B = q.size(0);

  Variable scores = matmul(q, transpose(k, -2, -1)) * scale;  // (B, L, S)
  scores.retain_grad();
  Variable p = softmax(scores);                               // (B, L, S)
  Variable out = matmul(p, v);                                // (B, L, dk)
  Variable loss = sum(out * Variable(upstream));              // (): <out, upstream>
  loss.backward();

  SoftmaxStats m;
  const Tensor s = scores.data(), w = p.data();
  double ss = 0, mean = 0;
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) mean += s.flat_get(i);
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) ss += (s.flat_get(i) - mean) * (s.flat_get(i) - mean);
  m.score_var = ss / static_cast<double>(n - 1);

  const double* pw = w.contiguous().data<double>();
  const int64_t rows = B * L;
  std::vector<double> jac, ratio;
  // What the softmax passes back: the gradient at its input (the scores) against that at its output.
  const Tensor gs = scores.grad().contiguous();                                        // (B, L, S)
  const Tensor gp = matmul(Variable(upstream), transpose(v, -2, -1)).data().contiguous();  // (B, L, S): d loss / d p
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = pw + r * S;
    double mx = 0, h = 0, s2 = 0, s3 = 0;
    for (int64_t j = 0; j < S; ++j) {
      mx = std::max(mx, row[j]);
      if (row[j] > 0) h -= row[j] * std::log(row[j]);
      s2 += row[j] * row[j];
      s3 += row[j] * row[j] * row[j];
    }
    m.max_prob += mx;
    m.entropy += h;
    m.saturated += mx > 0.99;
    // || diag(p) - p p^T ||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2
    jac.push_back(std::sqrt(std::max(0.0, s2 - 2 * s3 + s2 * s2)));
    double a = 0, b = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double x = gs.data<double>()[r * S + j], y = gp.data<double>()[r * S + j];
      a += x * x, b += y * y;
    }
    ratio.push_back(std::sqrt(a / b));
  }
  m.max_prob /= rows, m.entropy /= rows, m.saturated /= rows;
  m.jacobian = median(jac);
  m.grad = median(ratio);
  m.grad_mean = spread(ratio).mean;
  return m;
}


SoftmaxStats normal_softmax_stats(int64_t dk, bool scaled, int64_t B, int64_t L, int64_t S, uint64_t seed) {
  Generator gen(seed);
  const Tensor q = kernels::randn({B, L, dk}, gen, DType::Float64);         // (B, L, dk)
  const Tensor k = kernels::randn({B, S, dk}, gen, DType::Float64);         // (B, S, dk)
  const Tensor v = kernels::randn({B, S, dk}, gen, DType::Float64);         // (B, S, dk)
  const Tensor upstream = kernels::randn({B, L, dk}, gen, DType::Float64);  // (B, L, dk): d loss / d output
  return softmax_stats(q, k, v, upstream, scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0);
}

QKV real_qkv(const IdData& data, int64_t dk, int64_t count, uint64_t seed) {
  std::map<size_t, int64_t> by_len;
  for (const auto& p : data.train) ++by_len[p.src.size()];
  size_t len = 0;
  for (const auto& [l, n] : by_len)
    if (n > by_len[len]) len = l;
  std::vector<size_t> idx;
  for (size_t i = 0; i < data.train.size(); ++i)
    if (data.train[i].src.size() == len) idx.push_back(i);
  train::seeded_shuffle(idx, seed);
  idx.resize(std::min(idx.size(), static_cast<size_t>(count)));
  std::vector<int64_t> ids;
  for (size_t i : idx) ids.insert(ids.end(), data.train[i].src.begin(), data.train[i].src.end());
  const int64_t n = static_cast<int64_t>(idx.size()), L = static_cast<int64_t>(len);

  nn::Seq2SeqTransformer model(small_model(data, dk, 1, 1, dk, true), seed);
  model.to(DType::Float64);
  NoGradGuard ng;
  const auto& layer = (*model.transformer->encoder->layers)[0];
  const Variable h = layer.norm1->forward(model.embed_src(Tensor::from_vector(ids, {n, L})));  // (n, L, dk): what the attention reads
  const Variable w = layer.self_attn->in_proj_weight;  // (3 dk, dk)
  const Variable bias = layer.self_attn->in_proj_bias;  // (3 dk)
  auto project = [&](int64_t part) {
    return linear(h, narrow(w, 0, part * dk, dk), narrow(bias, 0, part * dk, dk)).data();  // (n, L, dk)
  };
  Generator gen(seed * 7919 + static_cast<uint64_t>(dk));
  return {project(0), project(1), project(2), kernels::randn({n, L, dk}, gen, DType::Float64)};
}

ScaleTraining train_scaled(const nn::Seq2SeqOptions& shape, const IdData& data, const FitOptions& o, bool scaled, uint64_t seed) {
  nn::Seq2SeqTransformer model(shape, seed);
  if (!scaled)
    for (auto* a : attention_modules(model)) a->score_scale = 1.0;
  FitResult f = fit(model, data.train, o);
  model.eval();
  f.losses.resize(static_cast<size_t>(o.steps), NAN);
  return {f.diverged ? f.losses.front() : teacher_forced(model, data.test).nll, f.losses};
}

}  // namespace gf::lab

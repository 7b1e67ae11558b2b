// The training runs behind lab `entropy` (lab/labs/entropy.cpp; declared in lab/entropy.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "lab/entropy.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "train/loop/grad_stats.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

// The probe batch: the first 64 test pairs.
train::BatchTensors probe_batch(const IdData& data) {
  std::vector<size_t> first(std::min<size_t>(64, data.test.size()));
  std::iota(first.begin(), first.end(), 0);
  return train::to_tensors(train::collate(data.test, first));
}

// Each head's entropy on one forward of the probe batch, normalised.
std::vector<double> probe_heads(nn::Seq2SeqTransformer& model, train::EntropyProbe& probe, const train::BatchTensors& batch,
                                std::vector<std::string>* names) {
  NoGradGuard ng;
  probe.arm(batch.src, batch.tgt_in);
  model.forward(batch.src, batch.tgt_in);
  std::vector<double> out;
  for (const auto& [site, h] : probe.take())
    for (size_t k = 0; k < h.heads.size(); ++k) {
      out.push_back(h.uniform > 0 ? h.heads[k] / h.uniform : NAN);
      if (names) names->push_back(fmt::format("{}.h{}", site, k));
    }
  return out;
}

// max over the model's attentions of σ(W_q) σ(W_k), of the weights the forward uses: it bounds
// |q . k| per unit of |x|^2 and so, by the paper's Theorem, how low a head's entropy can go.
double max_qk_norm(const nn::Seq2SeqTransformer& model) {
  NoGradGuard ng;  // no power-iteration step is taken for this
  double m = 0;
  for (auto* a : attention_modules(model))
    m = std::max(m, spectral_norm(a->projection_weight(0).data()) * spectral_norm(a->projection_weight(1).data()));
  return m;
}

// The final loss: the mean of the last 10% of the steps. A run that fit() stopped as diverged has
// no such tail; it counts as at least as bad as the divergence bar (3x its first loss).
double final_loss_of(const FitResult& f) {
  const auto& L = f.losses;
  if (f.diverged) return std::max(3 * L.front(), std::isfinite(L.back()) ? L.back() : 0.0);
  const size_t tail = std::max<size_t>(1, L.size() / 10);
  return std::accumulate(L.end() - static_cast<std::ptrdiff_t>(tail), L.end(), 0.0) / static_cast<double>(tail);
}

}  // namespace

double least_head(const std::vector<double>& heads) {
  double m = INFINITY;
  for (double x : heads) m = std::isnan(x) ? x : std::min(m, x);  // NaN (a broken run) propagates
  return m;
}

void apply_sigma_reparam(nn::Module& m, bool all) {
  for (const auto& [name, child] : m.children()) {
    if (auto* a = dynamic_cast<nn::MultiheadAttention*>(child.get())) {
      a->use_sigma_reparam(all);
      continue;  // its out_proj is done by it
    }
    if (auto* l = dynamic_cast<nn::Linear*>(child.get()); l && all) l->use_sigma_reparam();
    apply_sigma_reparam(*child, all);
  }
}

EntropyRun train_entropy_run(const IdData& data, const EntropySetup& s, double lr, bool reparam, uint64_t seed) {
  const train::BatchTensors probe_at = probe_batch(data);
  EntropyRun r;
  nn::Seq2SeqTransformer model(s.arch, seed);
  if (reparam) apply_sigma_reparam(*model.transformer, s.reparam_all);
  train::EntropyProbe probe(model);
  auto record = [&](int64_t step, std::vector<std::string>* names) {
    r.at.push_back(step);
    r.heads.push_back(probe_heads(model, probe, probe_at, names));
    r.qk_norm.push_back(max_qk_norm(model));
  };
  record(0, &r.head_names);
  FitOptions o = s.base;
  o.lr = lr;
  o.seed = seed;
  r.fit = fit(model, data.train, o, [&](int64_t step, double) {
    if (step % s.every == 0) record(step, nullptr);
  });
  r.final_loss = final_loss_of(r.fit);
  r.least_head_end = least_head(r.heads.back());
  return r;
}

double reparam_init_difference(const IdData& data, const EntropySetup& s, uint64_t seed) {
  NoGradGuard ng;
  nn::Seq2SeqTransformer plain(s.arch, seed), reparam(s.arch, seed);
  apply_sigma_reparam(*reparam.transformer, s.reparam_all);
  plain.eval(), reparam.eval();
  const train::BatchTensors b = probe_batch(data);
  const Tensor a = plain.forward(b.src, b.tgt_in).data(), c = reparam.forward(b.src, b.tgt_in).data();  // (B, T, V) each
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(a.flat_get(i) - c.flat_get(i));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);  // a NaN fails the check
  }
  return worst;
}

}  // namespace gf::lab

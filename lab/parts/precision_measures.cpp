// The measurements behind lab `precision` (lab/labs/precision.cpp; declared in lab/precision.h).
#include <algorithm>
#include <cmath>
#include <random>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/precision.h"
#include "train/loop/step.h"
#include "optim/adam.h"
#include "train/loop/grad_stats.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

float bf16_value(float x) { return static_cast<float>(bfloat16(x)); }

// Rounds a float32 tensor's values to bfloat16 in place (their storage stays float32).
void round_to_bf16_(const Tensor& t) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = bf16_value(p[i]);
}

// After Adam's update: what the stored weights keep of it (bfloat16 rounding unless `master`), counted
// per module group over the second half of training.
void store_update(BF16Arm& arm, const std::vector<train::GradGroup>& groups, const std::vector<Variable>& params, const std::vector<Tensor>& before,
                  bool master, bool counted) {
  for (size_t g = 0; g < groups.size(); ++g) {
    double moved = 0, lost = 0, du = 0, w = 0;
    for (const auto& piece : groups[g].pieces) {
      const float* a = before[piece.param].data<float>();
      float* p = params[piece.param].data().data<float>();
      for (int64_t e = piece.begin; e < piece.end; ++e) {
        const float intended = p[e];                         // Adam's float32 result
        const float stored = master ? intended : bf16_value(intended);
        if (intended != a[e]) moved += 1, lost += stored == a[e];
        du += (static_cast<double>(intended) - a[e]) * (static_cast<double>(intended) - a[e]), w += static_cast<double>(a[e]) * a[e];
        p[e] = stored;
      }
    }
    if (counted) {
      GroupStats& s = arm.groups[g];
      s.moved += moved, s.lost += lost, s.steps += 1;
      s.ratio_sum += w > 0 ? std::sqrt(du / w) : 0.0;
    }
  }
}

}  // namespace

BF16Arm train_bf16_arm(const IdData& data, const BF16Training& o, uint64_t seed, bool master, bool keep_grads) {
  const int64_t D = o.d_model, steps = o.steps;
  nn::Seq2SeqTransformer model(small_model(data, D, 2, o.layers, 2 * D, false), seed);
  const auto named = model.named_parameters();
  std::vector<Variable> params;
  for (const auto& [n, p] : named) params.push_back(p);
  const std::vector<train::GradGroup> groups = train::grad_groups(named);
  std::vector<Tensor> master_copy;
  for (const auto& p : params) {
    if (master) master_copy.push_back(p.data().clone());
    round_to_bf16_(p.data());  // both arms start from the same bfloat16 weights
  }
  optim::Adam adam = train::make_adam(named, o.lr);
  const std::vector<train::Batch> plan = batches(data.train, o.max_tokens, seed);
  BF16Arm arm;
  arm.groups.resize(groups.size());
  for (const auto& g : groups) arm.group_names.push_back(g.name);
  model.train();
  for (int64_t step = 1; step <= steps; ++step) {
    if (master)
      for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]), round_to_bf16_(params[i].data());
    const train::Batch& b = plan[static_cast<size_t>(step - 1) % plan.size()];
    train::BatchTensors t = train::to_tensors(b);
    const bool last = keep_grads && step == steps;
    Variable logits;
    auto forward = [&] {
      if (!last) return train::batch_loss(model, t, 0.0);
      logits = model.forward(t.src, t.tgt_in);  // (B, T, V): the last step through the unfused loss, to read d loss / d logits
      logits.retain_grad();
      return cross_entropy(reshape(logits, {-1, logits.size(2)}), t.labels, train::Vocab::kPad, 0.0);
    };
    train::StepHooks hooks;
    hooks.observe = [&](double, double) {
      if (!last) return;
      arm.logit_grad = logits.grad().clone();
      for (const auto& [n, p] : named) arm.param_grads.push_back({n, p.grad().clone()});
    };
    hooks.accept = [](double, double) { return true; };  // as the arms are compared: every step updates
    hooks.update = [&](double lr, double) {  // Adam on the float32 copy (master) or the stored weights, then the stored rounding
      if (master)
        for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]);
      std::vector<Tensor> before;
      for (const auto& p : params) before.push_back(p.data().clone());
      adam.set_lr(lr);
      adam.step();
      store_update(arm, groups, params, before, master, step > steps / 2);
    };
    arm.losses.push_back(train::train_step(adam, params, forward, 1.0, optim::warmup_inverse_sqrt(o.lr, step - 1, o.warmup), hooks).loss);
    if (master)
      for (size_t i = 0; i < params.size(); ++i) master_copy[i].copy_(params[i].data());
  }
  double lost = 0, moved = 0;
  for (const GroupStats& s : arm.groups) lost += s.lost, moved += s.moved;
  arm.lost_share = moved > 0 ? lost / moved : 0.0;
  if (master)
    for (size_t i = 0; i < params.size(); ++i) Tensor(params[i].data()).copy_(master_copy[i]), round_to_bf16_(params[i].data());
  model.eval();
  arm.nll = teacher_forced(model, data.test, static_cast<size_t>(o.eval_pairs)).nll;
  return arm;
}

Range range_of(const std::vector<Tensor>& parts) {
  Range r;
  double zero16 = 0, sub16 = 0, zero_b = 0;
  for (const Tensor& t : parts) {
    const Tensor c = t.contiguous();
    const float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      const double a = std::abs(static_cast<double>(p[i]));
      if (a == 0) continue;
      ++r.nonzero;
      zero16 += a < kFp16Zero, sub16 += a < kFp16Normal, zero_b += bf16_value(p[i]) == 0.0f;
      r.max_abs = std::max(r.max_abs, a);
    }
  }
  if (r.nonzero > 0) {
    const double n = static_cast<double>(r.nonzero);
    r.fp16_zero = zero16 / n, r.fp16_subnormal = sub16 / n, r.bf16_zero = zero_b / n;
  }
  return r;
}

int loss_scale_exponent(const std::vector<Tensor>& parts) {
  std::vector<double> a;
  for (const Tensor& t : parts) {
    const Tensor c = t.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i)
      if (const double v = std::abs(static_cast<double>(c.data<float>()[i])); v > 0) a.push_back(v);
  }
  if (a.empty()) return 0;
  std::sort(a.begin(), a.end());
  const double q = a[static_cast<size_t>(0.001 * static_cast<double>(a.size()))];  // the 0.1% quantile
  return std::max(0, static_cast<int>(std::ceil(std::log2(kFp16Zero / q))));
}

SoftmaxErrors softmax_errors(int64_t L, int64_t dk, int64_t rows, double score_sd, uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(L));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(L * dk));
  for (float& x : k) x = normal(rng);
  const double scale = score_sd / std::sqrt(static_cast<double>(dk));
  SoftmaxErrors e;
  std::vector<double> exact(static_cast<size_t>(L)), s1(static_cast<size_t>(L)), s2(static_cast<size_t>(L));
  std::vector<float> q(static_cast<size_t>(dk));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : q) x = normal(rng);
    for (int64_t j = 0; j < L; ++j) {
      double d = 0, d_bf16 = 0;
      for (int64_t c = 0; c < dk; ++c) {
        d += static_cast<double>(q[c]) * k[j * dk + c];
        d_bf16 += static_cast<double>(bf16_value(q[c])) * bf16_value(k[j * dk + c]);
      }
      exact[j] = d * scale;
      s1[j] = static_cast<float>(static_cast<float>(d_bf16) * static_cast<float>(scale));  // float32 scores of bf16 products
      s2[j] = bf16_value(static_cast<float>(s1[j]));                                          // rounded to bfloat16 as well
    }
    const std::vector<double> p_exact = softmax_exact(exact.data(), L), p1 = softmax_exact(s1.data(), L);
    // bfloat16 throughout: each exponential rounded, the running sum rounded after every add.
    const float m2 = static_cast<float>(*std::max_element(s2.begin(), s2.end()));
    std::vector<float> ex(static_cast<size_t>(L));
    float sum = 0;
    for (int64_t j = 0; j < L; ++j) {
      ex[j] = bf16_value(std::exp(static_cast<float>(s2[j]) - m2));
      sum = bf16_value(sum + ex[j]);
    }
    double tv1 = 0, tv2 = 0;
    for (int64_t j = 0; j < L; ++j) {
      tv1 += std::abs(static_cast<double>(static_cast<float>(p1[j])) - p_exact[j]);
      tv2 += std::abs(static_cast<double>(bf16_value(ex[j] / sum)) - p_exact[j]);
    }
    e.products += 0.5 * tv1 / static_cast<double>(rows), e.all_bf16 += 0.5 * tv2 / static_cast<double>(rows);
  }
  return e;
}

}  // namespace gf::lab

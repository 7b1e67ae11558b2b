#include "optim/adam.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "tensor/check.h"
#include "tensor/parallel.h"

namespace gf::optim {

Adam::Adam(const std::vector<std::pair<std::string, Variable>>& named, AdamOptions opt) : options_(opt) {
  std::set<const VariableImpl*> seen;
  for (auto& [name, p] : named) {
    if (!p.requires_grad() || !seen.insert(p.impl().get()).second) continue;
    slots_.push_back({name, p, Tensor::zeros(p.shape(), p.dtype()), Tensor::zeros(p.shape(), p.dtype())});
  }
}

namespace {

template <class T>
struct AdamScalars {
  T b1, b2, step_size, inv_sqrt_bc2, eps, decay;
  T grad_scale;  // the clipping coefficient the gradient is read times (1: read as it is)
};

// One span of a parameter. The scalars come by value: captured by reference inside the parallel
// lambda, every store to w, m or v might have changed them (as far as the compiler knows), and the
// loop ran unvectorised. Scaled: the gradient is read times grad_scale, the same float product
// clip_grad_norm would have stored (g *= coef), so the update has the same bits without that pass.
template <bool Scaled, class T>
void adam_update(T* w, T* m, T* v, const T* g, int64_t n, const AdamScalars<T> k) {
  for (int64_t i = 0; i < n; ++i) {
    const T gi = Scaled ? g[i] * k.grad_scale : g[i];
    if (k.decay != 0) w[i] -= k.decay * w[i];
    m[i] = k.b1 * m[i] + (1 - k.b1) * gi;
    v[i] = k.b2 * v[i] + (1 - k.b2) * gi * gi;
    // PyTorch: denom = sqrt(v) / sqrt(bc2) + eps; p -= lr / bc1 * m / denom
    w[i] -= k.step_size * m[i] / (std::sqrt(v[i]) * k.inv_sqrt_bc2 + k.eps);
  }
}

// Adam's pass runs over every parameter at once, cut into buckets of at most this many elements
// (multi-tensor apply): one parallel loop for the model instead of one per tensor, whose small
// tensors (biases, norms) each ran alone on one thread. Each element is updated alone, so the
// cut changes no bits.
constexpr int64_t kAdamBucket = int64_t{1} << 15;

}  // namespace

void Adam::step() { step_scaled(1.0); }

void Adam::step_scaled(double grad_scale) {
  ++step_;
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  struct Bucket {
    size_t slot;
    int64_t begin, end;
  };
  std::vector<Bucket> buckets;
  std::vector<Tensor> grads(slots_.size());  // contiguous gradients (a copy only for a strided one)
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    GF_CHECK_AS(std::logic_error, s.param.data().is_contiguous(), "Adam::step: parameter '{}' {} is not contiguous", s.name,
                shape_str(s.param.shape()));
    GF_CHECK_AS(std::logic_error, g.dtype() == s.param.dtype(), "Adam::step: parameter '{}' is {} but its gradient {}", s.name,
                dtype_name(s.param.dtype()), dtype_name(g.dtype()));
    grads[i] = g.contiguous();
    for (int64_t b = 0; b < g.numel(); b += kAdamBucket) buckets.push_back({i, b, std::min(b + kAdamBucket, g.numel())});
  }
  parallel_for(static_cast<int64_t>(buckets.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Bucket& u = buckets[k];
      Slot& s = slots_[u.slot];
      Tensor w = s.param.data();
      dispatch_float(w.dtype(), "Adam", [&]<class T>() {
        const AdamScalars<T> c{static_cast<T>(options_.beta1),
                               static_cast<T>(options_.beta2),
                               static_cast<T>(options_.lr / bc1),
                               static_cast<T>(1.0 / std::sqrt(bc2)),
                               static_cast<T>(options_.eps),
                               static_cast<T>(options_.lr * options_.weight_decay),
                               static_cast<T>(grad_scale)};
        T *pw = w.data<T>() + u.begin, *pm = s.m.data<T>() + u.begin, *pv = s.v.data<T>() + u.begin;
        const T* pg = grads[u.slot].data<T>() + u.begin;
        if (grad_scale == 1.0)
          adam_update<false>(pw, pm, pv, pg, u.end - u.begin, c);
        else
          adam_update<true>(pw, pm, pv, pg, u.end - u.begin, c);
      });
    }
  });
}

void Adam::zero_grad() {
  for (auto& s : slots_) s.param.zero_grad();
}

std::map<std::string, Tensor> Adam::state_dict() const {
  std::map<std::string, Tensor> st;
  for (const auto& s : slots_) {
    st["exp_avg." + s.name] = s.m;
    st["exp_avg_sq." + s.name] = s.v;
  }
  st["step"] = Tensor::scalar(static_cast<double>(step_), DType::Int64);
  return st;
}

void Adam::load_state_dict(const std::map<std::string, Tensor>& st) {
  auto get = [&](const std::string& key, const Tensor& like) {
    auto it = st.find(key);
    GF_CHECK(it != st.end(), "Adam::load_state_dict: missing '{}' {}", key, shape_str(like.shape()));
    GF_CHECK(it->second.shape() == like.shape(), "Adam::load_state_dict: '{}' is {}, expected {}", key,
             shape_str(it->second.shape()), shape_str(like.shape()));
    return it->second;
  };
  for (auto& s : slots_) {
    s.m.copy_(get("exp_avg." + s.name, s.m));
    s.v.copy_(get("exp_avg_sq." + s.name, s.v));
  }
  auto it = st.find("step");
  GF_CHECK(it != st.end(), "Adam::load_state_dict: missing 'step'");
  step_ = static_cast<int64_t>(it->second.item());
}

namespace {

// Gradients are cut into blocks of this many elements. The cut is fixed, so the partial sums, and
// the order they are added in (block order), do not depend on the thread count.
constexpr int64_t kNormBlock = int64_t{1} << 16;

struct GradBlock {
  size_t tensor;  // index into the gradients
  int64_t begin, end;
};

std::vector<Tensor> defined_grads(const std::vector<Variable>& params) {
  std::vector<Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

std::vector<GradBlock> blocks_of(const std::vector<Tensor>& grads) {
  std::vector<GradBlock> blocks;
  for (size_t t = 0; t < grads.size(); ++t)
    for (int64_t b = 0; b < grads[t].numel(); b += kNormBlock) blocks.push_back({t, b, std::min(b + kNormBlock, grads[t].numel())});
  return blocks;
}

// Eight independent float64 sums: the loop vectorises without reordering any one sum.
template <class T>
double sum_squares(const T* p, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(p[i + j]) * p[i + j];
  for (; i < n; ++i) lane[0] += static_cast<double>(p[i]) * p[i];
  double s = 0;
  for (double l : lane) s += l;
  return s;
}

}  // namespace

double grad_norm(const std::vector<Variable>& params) {
  std::vector<Tensor> grads = defined_grads(params);
  for (Tensor& g : grads) g = g.contiguous();
  const std::vector<GradBlock> blocks = blocks_of(grads);
  std::vector<double> partial(blocks.size());
  parallel_for(static_cast<int64_t>(blocks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const GradBlock& k = blocks[b];
      dispatch_float(grads[k.tensor].dtype(), "grad_norm", [&]<class T>() {
        partial[b] = sum_squares(grads[k.tensor].data<T>() + k.begin, k.end - k.begin);
      });
    }
  });
  double total = 0;
  for (double s : partial) total += s;  // block order: the same sum on any thread count
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, std::optional<double> known_norm) {
  const double norm = known_norm ? *known_norm : grad_norm(params);
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  const std::vector<Tensor> grads = defined_grads(params);
  for (const Tensor& g : grads)
    GF_CHECK_AS(std::logic_error, g.is_contiguous(), "clip_grad_norm: a gradient {} is not contiguous", shape_str(g.shape()));
  const std::vector<GradBlock> blocks = blocks_of(grads);
  parallel_for(static_cast<int64_t>(blocks.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const GradBlock& k = blocks[b];
      Tensor g = grads[k.tensor];
      dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
        T* pg = g.data<T>();
        const T cf = static_cast<T>(coef);
        for (int64_t i = k.begin; i < k.end; ++i) pg[i] *= cf;
      });
    }
  });
  return norm;
}

double warmup_inverse_sqrt(double base_lr, int64_t step, int64_t warmup) {
  double s = static_cast<double>(step + 1), w = static_cast<double>(std::max<int64_t>(warmup, 1));
  return base_lr * std::min(s / w, std::sqrt(w / s));
}

UpdateInfo clipped_update(Adam& adam, const std::vector<Variable>& params, double clip, double lr, std::optional<double> known_norm) {
  adam.set_lr(lr);
  if (clip <= 0) {
    adam.step();
    return {known_norm.value_or(NAN), adam.lr()};
  }
  // clip_grad_norm's coefficient, applied as Adam reads each gradient instead of in a pass of its
  // own: the same bits (clipped_update_matches_clip_then_step in tests/test_optim.cpp).
  const double norm = known_norm ? *known_norm : grad_norm(params);
  const double coef = clip / (norm + 1e-6);
  if (coef >= 1.0)
    adam.step();
  else
    adam.step_scaled(coef);
  return {norm, adam.lr()};
}

UpdateInfo scheduled_update(Adam& adam, const std::vector<Variable>& params, double clip, double base_lr, int64_t step, int64_t warmup,
                            std::optional<double> known_norm) {
  return clipped_update(adam, params, clip, warmup_inverse_sqrt(base_lr, step, warmup), known_norm);
}

}  // namespace gf::optim

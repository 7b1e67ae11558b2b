#include "optim/adam.h"

#include <cmath>
#include <set>
#include <stdexcept>

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

void Adam::step() {
  ++step_;
  const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  for (auto& s : slots_) {
    const Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    Tensor w = s.param.data();
    GF_CHECK_AS(std::logic_error, w.is_contiguous(), "Adam::step: parameter '{}' {} is not contiguous", s.name,
                shape_str(w.shape()));
    Tensor gc = g.contiguous();
    dispatch_float(w.dtype(), "Adam", [&]<class T>() {
      T* pw = w.data<T>();
      T* pm = s.m.data<T>();
      T* pv = s.v.data<T>();
      const T* pg = gc.data<T>();
      const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
      const T step_size = static_cast<T>(options_.lr / bc1);
      const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
      const T eps = static_cast<T>(options_.eps), decay = static_cast<T>(options_.lr * options_.weight_decay);
      parallel_for(w.numel(), kSerialGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          if (decay != 0) pw[i] -= decay * pw[i];
          pm[i] = b1 * pm[i] + (1 - b1) * pg[i];
          pv[i] = b2 * pv[i] + (1 - b2) * pg[i] * pg[i];
          // PyTorch: denom = sqrt(v) / sqrt(bc2) + eps; p -= lr / bc1 * m / denom
          pw[i] -= step_size * pm[i] / (std::sqrt(pv[i]) * inv_sqrt_bc2 + eps);
        }
      });
    });
  }
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

double grad_norm(const std::vector<Variable>& params) {
  double total = 0;
  for (const auto& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor c = g.contiguous();
    dispatch_float(c.dtype(), "grad_norm", [&]<class T>() {
      const T* pg = c.data<T>();
      double s = 0;
      for (int64_t i = 0; i < c.numel(); ++i) s += static_cast<double>(pg[i]) * pg[i];
      total += s;
    });
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Variable>& params, double max_norm, std::optional<double> known_norm) {
  const double norm = known_norm ? *known_norm : grad_norm(params);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (const auto& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      dispatch_float(g.dtype(), "clip_grad_norm", [&]<class T>() {
        T* pg = g.data<T>();
        const T cf = static_cast<T>(coef);
        for (int64_t i = 0; i < g.numel(); ++i) pg[i] *= cf;
      });
    }
  return norm;
}

double warmup_inverse_sqrt(double base_lr, int64_t step, int64_t warmup) {
  double s = static_cast<double>(step + 1), w = static_cast<double>(std::max<int64_t>(warmup, 1));
  return base_lr * std::min(s / w, std::sqrt(w / s));
}

UpdateInfo scheduled_update(Adam& adam, const std::vector<Variable>& params, double clip, double base_lr, int64_t step, int64_t warmup,
                            std::optional<double> known_norm) {
  const double norm = clip > 0 ? clip_grad_norm(params, clip, known_norm) : known_norm.value_or(NAN);
  adam.set_lr(warmup_inverse_sqrt(base_lr, step, warmup));
  adam.step();
  return {norm, adam.lr()};
}

}  // namespace gf::optim

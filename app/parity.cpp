#include "app/parity.h"
#include "train/loop/step.h"

#include "app/command_flags.h"

#include <fmt/core.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "app/commands.h"
#include "app/flags.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "nn/embedding.h"
#include "nn/ffn.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "nn/norm.h"
#include "nn/registry.h"
#include "nn/seq2seq.h"
#include "nn/transformer_decoder.h"
#include "nn/transformer_encoder.h"
#include "optim/adam.h"
#include "tensor/check.h"
#include "tensor/io/safetensors.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"

namespace gf::app {
namespace {

using json = nlohmann::json;
using Outputs = std::map<std::string, Variable>;

// One loaded case: its inputs as Variables (float ones require grad) and the module, if any.
struct Case {
  json config;
  std::map<std::string, Variable> inputs;
  std::map<std::string, Tensor> tensors;  // everything in the file
  DType dtype;

  const Variable& in(const std::string& name) const {
    auto it = inputs.find(name);
    GF_CHECK_AS(std::runtime_error, it != inputs.end(), "the case has no input '{}'", name);
    return it->second;
  }
  Tensor mask(const std::string& name) const {  // optional bool inputs
    auto it = inputs.find(name);
    return it == inputs.end() ? Tensor() : it->second.data();
  }
  template <class T>
  T cfg(const char* key, T def) const {
    return config.contains(key) ? config.at(key).get<T>() : def;
  }
};

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.flat_get(i) != b.flat_get(i)) return false;
  return true;
}

nn::TransformerLayerOptions layer_options(const Case& c) {
  nn::TransformerLayerOptions o;
  o.d_model = c.cfg<int64_t>("d_model", 0);
  o.nhead = c.cfg<int64_t>("nhead", 1);
  o.kv_heads = c.cfg<int64_t>("kv_heads", 0);
  o.dim_feedforward = c.cfg<int64_t>("dim_feedforward", 0);
  o.dropout = 0.0;
  o.activation = c.cfg<std::string>("activation", "relu");
  o.norm = c.cfg<std::string>("norm", "layernorm");
  o.norm_first = c.cfg<bool>("norm_first", false);
  o.layer_norm_eps = c.cfg<double>("layer_norm_eps", 1e-5);
  return o;
}

// Builds the module of a case kind and the function that runs it.
struct Runner {
  std::shared_ptr<nn::Module> module;
  std::function<Outputs(const Case&)> run;
  // The run makes its own optimizer steps: no backward after it, no grad.* to compare; the
  // parameters it ends with are compared with the case's final.param.*.
  bool trains = false;
};

// A module whose forward takes the case's "input" alone.
template <class M>
Runner unary_module(std::shared_ptr<M> m) {
  return {m, [m](const Case& c) { return Outputs{{"output", m->forward(c.in("input"))}}; }};
}

Runner make_linear(const Case& c) {
  return unary_module(std::make_shared<nn::Linear>(c.cfg<int64_t>("in_features", 0), c.cfg<int64_t>("out_features", 0), c.cfg<bool>("bias", true)));
}

Runner make_embedding(const Case& c) {
  const bool has_pad = c.config.contains("padding_idx") && !c.config.at("padding_idx").is_null();
  auto m = std::make_shared<nn::Embedding>(c.cfg<int64_t>("num_embeddings", 0), c.cfg<int64_t>("embedding_dim", 0),
                                           has_pad ? c.config.at("padding_idx").get<int64_t>() : -1);
  return {m, [m](const Case& c) { return Outputs{{"output", m->forward(c.in("input").data())}}; }};
}

// layer_norm (the shared cases), and norm: any norm of nn/norm.h's list, named by config "norm".
Runner make_norm_case(const std::string& norm, const Case& c) {
  return unary_module(nn::make_norm(norm, c.cfg<int64_t>("normalized_shape", 0), c.cfg<double>("eps", 1e-5)));
}

Runner make_softmax(const Case& c, bool log) {
  const int64_t dim = c.cfg<int64_t>("dim", -1);
  GF_CHECK_AS(std::runtime_error, dim == -1, "softmax: only dim -1 is supported, got {}", dim);
  return {nullptr, [log](const Case& c) { return Outputs{{"output", log ? log_softmax(c.in("input")) : softmax(c.in("input"))}}; }};
}

Runner make_ffn(const Case& c) {
  return unary_module(std::make_shared<nn::FFN>(c.cfg<int64_t>("d_model", 0), c.cfg<int64_t>("dim_feedforward", 0),
                                                c.cfg<std::string>("activation", "relu"), 0.0));
}

Runner make_attention(const Case& c) {
  const double scale = c.cfg<double>("scale", 1.0);
  return {nullptr, [scale](const Case& c) {
            Variable scores = matmul(c.in("q"), transpose(c.in("k"), -2, -1)) * scale;  // (B, L, S)
            Tensor m = c.mask("mask");
            if (m.defined()) scores = masked_fill(scores, m, -INFINITY);
            Variable w = softmax(scores);  // (B, L, S)
            return Outputs{{"output", matmul(w, c.in("v"))}, {"weights", w}};
          }};
}

// multihead_attention (PyTorch's module) and grouped_query_attention (a hand-written PyTorch
// reference that repeats K and V per group with repeat_interleave): one module, two layouts.
Runner make_multihead_attention(const Case& c) {
  auto m = std::make_shared<nn::MultiheadAttention>(c.cfg<int64_t>("embed_dim", 0), c.cfg<int64_t>("num_heads", 1), 0.0,
                                                    c.cfg<bool>("bias", true), default_generator(), c.cfg<int64_t>("kv_heads", 0));
  const bool self = c.cfg<bool>("self_attention", false);
  return {m, [m, self](const Case& c) {
            const Variable& q = c.in("query");
            auto run = [&](bool weights) {
              return self ? m->forward(q, q, q, c.mask("key_padding_mask"), c.mask("attn_mask"), weights)
                          : m->forward(q, c.in("key"), c.in("value"), c.mask("key_padding_mask"), c.mask("attn_mask"), weights);
            };
            // The output from a run without weights, so that it goes through the fused attention op
            // where the masks allow it (docs/attention.md); the weights from a second run, which keeps
            // them. Both are functions of the same inputs, so the gradients compare as before.
            return Outputs{{"output", run(false).output}, {"weights", run(true).weights}};
          }};
}

Runner make_encoder_layer(const Case& c) {
  auto m = std::make_shared<nn::TransformerEncoderLayer>(layer_options(c));
  return {m, [m](const Case& c) { return Outputs{{"output", m->forward(c.in("src"), c.mask("src_key_padding_mask"), c.mask("src_mask"))}}; }};
}

Runner make_decoder_layer(const Case& c) {
  auto m = std::make_shared<nn::TransformerDecoderLayer>(layer_options(c));
  return {m, [m](const Case& c) {
            return Outputs{{"output", m->forward(c.in("tgt"), c.in("memory"), c.mask("tgt_mask"), c.mask("tgt_key_padding_mask"),
                                                 c.mask("memory_key_padding_mask"))
                                          .output}};
          }};
}

Runner make_cross_entropy(const Case& c) {
  const int64_t ignore = c.cfg<int64_t>("ignore_index", -100);
  const double ls = c.cfg<double>("label_smoothing", 0.0);
  const std::string reduction = c.cfg<std::string>("reduction", "mean");
  GF_CHECK_AS(std::runtime_error, reduction == "mean", "cross_entropy: only reduction mean is supported, got '{}'", reduction);
  return {nullptr, [ignore, ls](const Case& c) { return Outputs{{"loss", cross_entropy(c.in("input"), c.in("target").data(), ignore, ls)}}; }};
}

nn::Seq2SeqOptions seq2seq_options(const Case& c) {
  nn::Seq2SeqOptions o;
  o.src_vocab = c.cfg<int64_t>("src_vocab", 0);
  o.tgt_vocab = c.cfg<int64_t>("tgt_vocab", 0);
  o.layer = layer_options(c);
  o.num_layers = c.cfg<int64_t>("num_layers", 1);
  o.pad = c.cfg<int64_t>("pad", 0);
  return o;
}

Runner make_seq2seq(const Case& c) {
  const double ls = c.cfg<double>("label_smoothing", 0.0);
  auto m = std::make_shared<nn::Seq2SeqTransformer>(seq2seq_options(c));
  return {m, [m, ls](const Case& c) {
            const train::BatchTensors b = train::teacher_forced(c.in("src").data(), c.in("tgt").data());  // tgt: (B, T+1)
            Variable logits = m->forward(b.src, b.tgt_in);                                                 // (B, T, V)
            Variable loss = cross_entropy(reshape(logits, {-1, logits.size(2)}), b.labels, m->options().pad, ls);
            return Outputs{{"loss", loss}, {"logits", logits}};
          }};
}

// Whole training steps through the trainer's own step (train/loop/step.h: train::batch_loss, then
// clipping, the warm-up schedule, Adam); per step the loss, the gradient
// norm before clipping and the rate used, as PyTorch's make_training_parity.py records them.
Runner make_seq2seq_train(const Case& c) {
  auto m = std::make_shared<nn::Seq2SeqTransformer>(seq2seq_options(c));
  return {m,
          [m](const Case& c) {
            const auto betas = c.config.at("betas").get<std::vector<double>>();
            GF_CHECK_AS(std::runtime_error, betas.size() == 2, "seq2seq_train: betas must hold 2 numbers, got {}", betas.size());
            const double lr = c.cfg<double>("lr", 0), clip = c.cfg<double>("clip", 0.0), ls = c.cfg<double>("label_smoothing", 0.0);
            const int64_t steps = c.cfg<int64_t>("steps", 0), warmup = c.cfg<int64_t>("warmup", 1);
            train::RunConfig recipe;  // the case's Adam
            recipe.beta1 = betas[0], recipe.beta2 = betas[1], recipe.adam_eps = c.cfg<double>("eps", 1e-8);
            optim::Adam adam = train::make_adam(m->named_parameters(), lr, recipe);
            std::vector<Variable> params;
            for (auto& [n, p] : m->named_parameters()) params.push_back(p);
            std::vector<double> losses, norms, lrs;
            for (int64_t k = 0; k < steps; ++k) {
              const train::BatchTensors b =
                  train::teacher_forced(c.in(fmt::format("src.{}", k)).data(), c.in(fmt::format("tgt.{}", k)).data());  // tgt: (B, T+1)
              const train::StepResult s = train::train_step(adam, params, [&] { return train::batch_loss(*m, b, ls); }, clip,
                                                            optim::warmup_inverse_sqrt(lr, k, warmup));
              losses.push_back(s.loss), norms.push_back(s.grad_norm), lrs.push_back(adam.lr());
            }
            const Shape n{steps};
            return Outputs{{"loss", Variable(Tensor::from_vector(losses, n))},
                           {"grad_norm", Variable(Tensor::from_vector(norms, n))},
                           {"lr", Variable(Tensor::from_vector(lrs, n))}};
          },
          true};
}

// The case kinds this runner knows: a new kind is a maker above and a line here.
struct ParityKind {
  const char* name;
  Runner (*make)(const Case&);
};

const std::vector<ParityKind>& parity_kinds() {
  static const std::vector<ParityKind> kinds = {
      {"linear", make_linear},
      {"embedding", make_embedding},
      {"layer_norm", [](const Case& c) { return make_norm_case("layernorm", c); }},
      {"norm", [](const Case& c) { return make_norm_case(c.cfg<std::string>("norm", ""), c); }},
      {"softmax", [](const Case& c) { return make_softmax(c, false); }},
      {"log_softmax", [](const Case& c) { return make_softmax(c, true); }},
      {"ffn", make_ffn},
      {"attention", make_attention},
      {"multihead_attention", make_multihead_attention},
      {"grouped_query_attention", make_multihead_attention},
      {"transformer_encoder_layer", make_encoder_layer},
      {"transformer_decoder_layer", make_decoder_layer},
      {"cross_entropy", make_cross_entropy},
      {"seq2seq", make_seq2seq},
      {"seq2seq_train", make_seq2seq_train},
  };
  return kinds;
}

Runner make_runner(const std::string& kind, const Case& c) { return nn::registry_find(parity_kinds(), kind, "case kind").make(c); }

// Compares ours with the expected tensor; updates the worst error and the verdict.
struct Comparison {
  double atol, rtol;
  double worst_abs = 0, worst_rel = 0, worst_excess = -INFINITY;
  std::string worst_where;
  bool ok = true;

  void check(const std::string& what, const Tensor& ours, const Tensor& expected) {
    if (!ours.defined()) {
      ok = false;
      worst_where = what + ": no value computed";
      worst_excess = INFINITY;
      return;
    }
    if (ours.shape() != expected.shape()) {
      ok = false;
      worst_where = what + ": shape " + shape_str(ours.shape()) + " vs expected " + shape_str(expected.shape());
      worst_excess = INFINITY;
      return;
    }
    Tensor a = ours.to(DType::Float64).contiguous(), b = expected.to(DType::Float64).contiguous();
    const double* pa = a.data<double>();
    const double* pb = b.data<double>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      double err = std::abs(pa[i] - pb[i]);
      if (std::isnan(pa[i]) != std::isnan(pb[i])) err = INFINITY;
      if (std::isnan(pa[i]) && std::isnan(pb[i])) err = 0;
      double excess = err - (atol + rtol * std::abs(pb[i]));
      worst_abs = std::max(worst_abs, err);
      // Relative to |expected|, floored so that expected zeros do not dominate the report.
      if (err > 0) worst_rel = std::max(worst_rel, err / std::max(std::abs(pb[i]), 1e-3));
      if (excess > worst_excess) {
        worst_excess = excess;
        worst_where = fmt::format("{}[{}]: ours {:.10g}, expected {:.10g}", what, i, pa[i], pb[i]);
      }
      if (!(excess <= 0)) ok = false;
    }
  }
};

// Backward of the differentiated scalar: every 0-dim output plus sum(out * gradout) for the others.
void backward_of_outputs(const Outputs& outs, const SafetensorsFile& file, DType dtype) {
  Variable total;
  for (auto& [name, o] : outs) {
    Variable term;
    if (o.ndim() == 0) {
      term = o;
    } else {
      auto g = file.tensors.find("gradout." + name);
      GF_CHECK_AS(std::runtime_error, g != file.tensors.end(), "no gradout.{} for output {}", name, name);
      term = sum(o * Variable(g->second.to(dtype)));
    }
    total = total.defined() ? total + term : term;
  }
  total.backward();
}

// In float32 an element whose exact gradient is 0 (the attention key bias: q . b_k shifts a whole
// row of scores, which softmax ignores) gets rounding noise, and Adam, which divides by the
// gradient's own scale, turns that noise into steps of about lr. The float64 reference keeps such
// an element in place (its noise is far below Adam's eps), so it is no reference for float32: an
// element the reference moved by less than 1e-7 is checked by `unmoved` (its atol: how far Adam
// can reach) to stay near its start; every other element by `moved` against the reference. Each
// comparison sees the whole tensor, the other kind's elements matched to ours, so a failure names
// the element's own index. Returns how many elements the reference left in place.
int64_t compare_final_f32(Comparison& moved, Comparison& unmoved, const std::string& name, const Tensor& ours, const Tensor& expected,
                          const Tensor& start) {
  if (!ours.defined() || ours.shape() != expected.shape()) return moved.check(name, ours, expected), 0;
  const Tensor a = ours.to(DType::Float64).contiguous(), b = expected.to(DType::Float64).contiguous(),
               s0 = start.to(DType::Float64).contiguous();
  Tensor want_moved = b.clone(), want_still = a.clone();
  int64_t still = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(b.data<double>()[i] - s0.data<double>()[i]) < 1e-7) {
      want_moved.data<double>()[i] = a.data<double>()[i];
      want_still.data<double>()[i] = s0.data<double>()[i];
      ++still;
    }
  moved.check(name, a, want_moved);
  unmoved.check(name + " (left in place by PyTorch)", a, want_still);
  return still;
}

// How far Adam can move one element over the run: |m_hat / (sqrt(v_hat) + eps)| stays below
// about 1 for steady gradients and (1 - beta1) / sqrt(1 - beta2) times more for a lone spike, so
// 2 x the sum of the rates used bounds it.
double adam_reach(const Outputs& outs) {
  const Tensor lr = outs.at("lr").data().to(DType::Float64).contiguous();
  double total = 0;
  for (int64_t i = 0; i < lr.numel(); ++i) total += lr.data<double>()[i];
  return 2 * total;
}


// Under bf16 the case's tensors are held to PyTorch's own bfloat16 autocast on the same case (its
// results are stored beside the float64 reference as autocast.NAME by scripts/make_parity_bf16.py),
// over all outputs together and over all gradients together (2-norms of the concatenated tensors):
//   ||ours - expected|| <= 2 ||autocast - expected|| + 2^-8 ||expected||,
// twice autocast's distance from the float64 reference plus bfloat16's unit roundoff of the size.
// Each tensor alone has a quarter of its norm more: ||ours - expected|| <= 2 ||autocast - expected||
// + ||expected|| / 4. Single tensors jump by several percent when a ReLU input within rounding of 0
// changes sign, and which ones flip is chance (on the tiny models of these cases some do:
// standard_seq2seq_postnorm's decoder layer 0 has FFN inputs at 0.06% of their rms, two of which
// flip under bf16 and move that layer's gradients by 7-9%, where a float64 emulation of the same
// roundings that keeps their signs is off by 1%), while a wrong or missing term moves a tensor by
// its whole size. The rounding-free schedule (out.lr) is compared as in float32.
struct Bf16Comparison {
  static constexpr double kUnitRoundoff = 1.0 / 256, kTimesAutocast = 2.0, kEachTensor = 0.25;
  struct Sums {
    double err = 0, ac = 0, ref = 0;  // squared norms, summed over the group's tensors
    double ratio() const { return std::sqrt(err) / (kTimesAutocast * std::sqrt(ac) + kUnitRoundoff * std::sqrt(ref)); }
  };
  Sums outputs, gradients;
  double worst_tensor = 0;  // the largest ||ours - expected|| of one tensor over its own tolerance
  std::string worst_where, problem;

  void check(const std::string& what, const Tensor& ours, const Tensor& expected, const Tensor& autocast) {
    if (!ours.defined() || ours.shape() != expected.shape() || autocast.shape() != expected.shape()) {
      problem = what + (ours.defined() ? ": shape " + shape_str(ours.shape()) + " vs expected " + shape_str(expected.shape()) : ": no value computed");
      return;
    }
    const Tensor a = ours.to(DType::Float64).contiguous(), b = expected.to(DType::Float64).contiguous(),
                 c = autocast.to(DType::Float64).contiguous();
    double err = 0, ac = 0, ref = 0;
    for (int64_t i = 0; i < b.numel(); ++i) {
      const double x = a.data<double>()[i], y = b.data<double>()[i], z = c.data<double>()[i];
      err += (x - y) * (x - y), ac += (z - y) * (z - y), ref += y * y;
    }
    Sums& group = what.rfind("grad.", 0) == 0 ? gradients : outputs;
    group.err += err, group.ac += ac, group.ref += ref;
    const double tol = kTimesAutocast * std::sqrt(ac) + kEachTensor * std::sqrt(ref);
    const double rel = tol > 0 ? std::sqrt(err) / tol : (err > 0 ? INFINITY : 0.0);
    if (!(rel <= worst_tensor)) {  // NaN counts as the worst
      worst_tensor = std::isnan(rel) ? INFINITY : rel;
      worst_where = fmt::format("{}: ||ours - expected|| {:.3g}, ||autocast - expected|| {:.3g}, ||expected|| {:.3g}", what,
                                std::sqrt(err), std::sqrt(ac), std::sqrt(ref));
    }
  }
  bool ok() const {
    auto group_ok = [](const Sums& s) { return s.err == 0 || s.ratio() <= 1.0; };
    return problem.empty() && group_ok(outputs) && group_ok(gradients) && worst_tensor <= 1.0;
  }
};

}  // namespace

ParityCaseResult run_parity_case(const std::string& path, DType dtype, Precision precision) {
  GF_CHECK(precision == Precision::Float32 || dtype == DType::Float32, "parity: bf16 products run on float32 cases, got {}",
           dtype_name(dtype));
  const kernels::PrecisionScope products(precision);
  const bool bf16 = precision == Precision::BFloat16;
  ParityCaseResult res;
  res.name = std::filesystem::path(path).stem().string();
  try {
    SafetensorsFile file = load_safetensors(path);
    auto meta = file.metadata.find("case");
    GF_CHECK_AS(std::runtime_error, meta != file.metadata.end(), "no __metadata__.case entry");
    json spec = json::parse(meta->second);
    res.kind = spec.at("kind").get<std::string>();
    Case c;
    c.config = spec.value("config", json::object());
    c.tensors = file.tensors;
    c.dtype = dtype;
    for (auto& [name, t] : file.tensors) {
      if (name.rfind("in.", 0) != 0) continue;
      bool is_float = is_floating(t.dtype());
      c.inputs[name.substr(3)] = Variable(is_float ? t.to(dtype) : t, is_float);
    }
    // A file cannot say that two inputs were one tensor; the generator passes `memory` as both
    // key and value, and its stored gradient is the sum over both uses. Identical key and value
    // are therefore one Variable, as they were in PyTorch.
    auto key = c.inputs.find("key"), value = c.inputs.find("value");
    if (key != c.inputs.end() && value != c.inputs.end() && same_values(key->second.data(), value->second.data()))
      value->second = key->second;
    Runner runner = make_runner(res.kind, c);
    if (runner.module) {
      runner.module->to(dtype);
      runner.module->train();  // parity cases run with dropout 0 in training mode
      std::map<std::string, Tensor> params;
      for (auto& [name, t] : file.tensors)
        if (name.rfind("param.", 0) == 0) params[name.substr(6)] = t;
      // Every parameter of ours must come from the case, and every case parameter must be ours.
      std::map<std::string, Tensor> ours;
      for (auto& [n, p] : runner.module->named_parameters()) ours[n] = p.data();
      for (auto& [n, t] : ours)
        GF_CHECK_AS(std::runtime_error, params.count(n), "the case has no parameter '{}' {}", n, shape_str(t.shape()));
      for (auto& [n, t] : params)
        GF_CHECK_AS(std::runtime_error, ours.count(n), "unexpected parameter '{}' {} in the case", n, shape_str(t.shape()));
      runner.module->load_state_dict(params, false);
    }
    Outputs outs = runner.run(c);
    if (!runner.trains) backward_of_outputs(outs, file, dtype);
    const bool f64 = dtype == DType::Float64;
    Comparison out_cmp{f64 ? 1e-9 : 1e-5, f64 ? 1e-9 : (runner.trains ? 1e-3 : 1e-4), 0, 0, -INFINITY, {}, true};
    Comparison grad_cmp{f64 ? 1e-9 : 1e-5, f64 ? 1e-9 : (res.kind == "seq2seq" ? 1e-3 : 1e-4), 0, 0, -INFINITY, {}, true};
    Comparison unmoved_cmp{runner.trains ? adam_reach(outs) : 0, 0, 0, 0, -INFINITY, {}, true};  // see compare_final_f32
    Bf16Comparison bf16_cmp;
    if (bf16)
      GF_CHECK_AS(std::runtime_error,
                  std::any_of(file.tensors.begin(), file.tensors.end(), [](const auto& e) { return e.first.rfind("autocast.", 0) == 0; }),
                  "bf16 parity needs the case's autocast.* tensors (PyTorch's bfloat16 autocast results): write such cases with "
                  "scripts/make_parity_bf16.py");
    // Under bf16, a tensor with an autocast.* counterpart goes to bf16_cmp; the others (the rate
    // schedule) are compared as in float32.
    auto compare = [&](Comparison& cmp, const std::string& name, const Tensor& value, const Tensor& expected) {
      auto ac = file.tensors.find("autocast." + name);
      if (bf16 && ac != file.tensors.end())
        bf16_cmp.check(name, value, expected, ac->second);
      else
        cmp.check(name, value, expected);
    };
    int64_t unmoved = 0;
    std::map<std::string, Variable> named;  // our parameters as they ended, by their PyTorch names
    if (runner.module)
      for (auto& [n, p] : runner.module->named_parameters()) named[n] = p;
    auto ours = [&](const std::string& n) { return named.count(n) ? named.at(n) : Variable(); };
    for (auto& [name, t] : file.tensors) {
      if (name.rfind("out.", 0) == 0) {
        auto o = outs.find(name.substr(4));
        compare(out_cmp, name, o == outs.end() ? Tensor() : o->second.data(), t);
      } else if (name.rfind("final.param.", 0) == 0) {
        GF_CHECK_AS(std::runtime_error, runner.trains, "{}: final parameters in a case of kind {}, which does not train", name, res.kind);
        const Variable p = ours(name.substr(12));
        const Tensor value = p.defined() ? p.data() : Tensor();  // undefined: "no value computed"
        if (f64 || bf16)
          compare(out_cmp, name, value, t);
        else
          unmoved += compare_final_f32(out_cmp, unmoved_cmp, name, value, t, file.tensors.at("param." + name.substr(12)));
      } else if (name.rfind("grad.in.", 0) == 0) {
        auto v = c.inputs.find(name.substr(8));
        compare(grad_cmp, name, v == c.inputs.end() ? Tensor() : v->second.grad(), t);
      } else if (name.rfind("grad.param.", 0) == 0) {
        const Variable p = ours(name.substr(11));
        compare(grad_cmp, name, !p.defined() ? Tensor() : p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype()), t);
      }
    }
    res.passed = out_cmp.ok && grad_cmp.ok && unmoved_cmp.ok && (!bf16 || bf16_cmp.ok());
    if (unmoved > 0)
      res.note = fmt::format("{} parameter elements PyTorch left in place (gradient below float32 rounding) compared with their start: "
                             "moved at most {:.2e}, Adam's reach {:.2e}", unmoved, unmoved_cmp.worst_abs, unmoved_cmp.atol);
    res.worst_abs = std::max(out_cmp.worst_abs, grad_cmp.worst_abs);
    res.worst_rel = std::max(out_cmp.worst_rel, grad_cmp.worst_rel);
    res.worst_where = out_cmp.worst_excess >= grad_cmp.worst_excess ? out_cmp.worst_where : grad_cmp.worst_where;
    if (bf16) {
      res.bf16_outputs = bf16_cmp.outputs.err > 0 ? bf16_cmp.outputs.ratio() : 0.0;
      res.bf16_gradients = bf16_cmp.gradients.err > 0 ? bf16_cmp.gradients.ratio() : 0.0;
      res.bf16_worst_tensor = bf16_cmp.worst_tensor;
      if (!bf16_cmp.problem.empty()) res.worst_where = bf16_cmp.problem;
      else if (out_cmp.ok && grad_cmp.ok) res.worst_where = "worst tensor " + bf16_cmp.worst_where;
    }
  } catch (const std::exception& e) {
    res.passed = false;
    res.error = e.what();
  }
  return res;
}

int run_parity_dir(const std::string& dir, DType dtype, std::ostream& out, Precision precision) {
  namespace fs = std::filesystem;
  GF_CHECK_AS(std::runtime_error, fs::is_directory(dir), "parity: '{}' is not a directory", dir);
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  GF_CHECK_AS(std::runtime_error, !files.empty(), "parity: no *.safetensors cases in '{}'", dir);
  int passed = 0, failed = 0;
  for (const auto& f : files) {
    ParityCaseResult r = run_parity_case(f, dtype, precision);
    if (!r.error.empty()) {
      fmt::print(out, "{:<28} {:<26} ERROR  {}\n", r.name, r.kind, r.error);
    } else {
      fmt::print(out, "{:<28} {:<26} abs {:9.2e}  rel {:9.2e}  ", r.name, r.kind, r.worst_abs, r.worst_rel);
      if (precision == Precision::BFloat16)
        fmt::print(out, "bf16 of tolerance: outputs {:4.2f} gradients {:4.2f} worst tensor {:4.2f}  ", r.bf16_outputs, r.bf16_gradients,
                   r.bf16_worst_tensor);
      fmt::print(out, "{}", r.passed ? "pass" : "FAIL");
      if (!r.passed) fmt::print(out, "  worst: {}", r.worst_where);
      fmt::print(out, "\n");
      if (!r.note.empty()) fmt::print(out, "{:<28} ({})\n", "", r.note);
    }
    (r.passed ? passed : failed) += 1;
  }
  fmt::print(out, "{} passed, {} failed\n", passed, failed);
  return failed;
}

Flags parity_flags() {
  Flags flags("parity", "Runs PyTorch reference cases (*.safetensors, see ../shared/parity/README.md) and compares every output\n"
                        "and gradient. Exits non-zero on any failure, unknown kind or unreadable file.");
  flags.add_positional("DIR", "folder of cases");
  flags.add_string("dtype", "f64",
                   "f32, f64, or bf16: float32 with the products in bfloat16 (--precision bf16), within tolerances from bfloat16's "
                   "unit roundoff 2^-8 (each case prints 'bf16 of tolerance': its worst error as a share of the tolerance, for outputs, "
                   "gradients and the worst single tensor)");
  return flags;
}

void check_parity_flags(const Flags& flags) {
  const std::string dt = flags.str("dtype");
  GF_CHECK_AS(UsageError, dt == "f32" || dt == "f64" || dt == "bf16", "parity: --dtype must be f32, f64 or bf16, got '{}'", dt);
}

int cmd_parity(int argc, char** argv) {
  Flags flags = parity_flags();
  if (!flags.parse(argc, argv)) return 0;
  check_parity_flags(flags);
  const std::string dt = flags.str("dtype");
  int failed = run_parity_dir(flags.positional(0), dt == "f64" ? DType::Float64 : DType::Float32, std::cout,
                              dt == "bf16" ? Precision::BFloat16 : Precision::Float32);
  return failed == 0 ? 0 : 1;
}

}  // namespace gf::app

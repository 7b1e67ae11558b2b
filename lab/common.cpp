#include "lab/common.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "optim/adam.h"
#include "optim/schedule.h"
#include "train/loop/step.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"
#include "korean/corpus_ko.h"
#include "train/data/utf8.h"

namespace gf::lab {

// ---------------------------------------------------------------- numbers

double l2_norm(const Tensor& t) {
  if (!t.defined()) return 0;
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.flat_get(i) * t.flat_get(i);
  return std::sqrt(s);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; t.defined() && i < t.numel(); ++i) {
    const double v = std::abs(t.flat_get(i));
    if (std::isnan(v)) return NAN;
    m = std::max(m, v);
  }
  return m;
}

int64_t count_nonfinite(const Tensor& t) {
  int64_t n = 0;
  for (int64_t i = 0; t.defined() && i < t.numel(); ++i) n += !std::isfinite(t.flat_get(i));
  return n;
}

ChartSeries band_series(const std::string& name, const std::vector<double>& x, const std::vector<Spread>& s, const std::string& color,
                        bool dashed) {
  ChartSeries c{name, x, {}, {}, {}, dashed, color};
  for (const auto& v : s) c.y.push_back(v.mean), c.lo.push_back(v.min), c.hi.push_back(v.max);
  return c;
}

std::vector<int64_t> parse_increasing_ints(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GF_CHECK(used != 0 && used == part.size() && v >= 1, "{} expects positive integers separated by commas, got '{}'", what, text);
    GF_CHECK(out.empty() || v > out.back(), "{} must increase, got '{}'", what, text);
    out.push_back(v);
  }
  GF_CHECK(out.size() >= 2, "{} needs at least two values, got '{}'", what, text);
  return out;
}

std::vector<double> parse_increasing_reals(const std::string& text, const std::string& what) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GF_CHECK(used != 0 && used == part.size() && std::isfinite(v), "{} expects numbers separated by commas, got '{}'", what, text);
    GF_CHECK(out.empty() || v > out.back(), "{} must increase, got '{}'", what, text);
    out.push_back(v);
  }
  GF_CHECK(out.size() >= 2, "{} needs at least two values, got '{}'", what, text);
  return out;
}

// ---------------------------------------------------------------- data

std::vector<Option> task_options(const std::string& note) {
  return {{"task", Option::Text, "reverse", note + "synthetic task: copy, reverse or sort"},
          {"symbols", Option::Int, "10", note + "symbols in the task's alphabet"},
          {"min-len", Option::Int, "4", note + "shortest sequence"},
          {"max-len", Option::Int, "8", note + "longest sequence"},
          {"train", Option::Int, "2000", note + "training sequences"},
          {"eval", Option::Int, "200", note + "held-out sequences"}};
}

Fields<TaskSettings> task_fields(const std::string& note) {
  using S = TaskSettings;
  return {{"task", &S::task, note + "synthetic task: copy, reverse or sort"},
          {"symbols", &S::symbols, note + "symbols in the task's alphabet"},
          {"min-len", &S::min_len, note + "shortest sequence"},
          {"max-len", &S::max_len, note + "longest sequence"},
          {"train", &S::train, note + "training sequences"},
          {"eval", &S::eval, note + "held-out sequences"}};
}

IdData synthetic_task(const std::string& kind, int64_t symbols, int64_t min_len, int64_t max_len, int64_t n_train, int64_t n_test,
                      uint64_t seed) {
  GF_CHECK(kind == "copy" || kind == "reverse" || kind == "sort", "synthetic_task: kind must be copy, reverse or sort, got '{}'", kind);
  GF_CHECK(symbols >= 2 && min_len >= 1 && max_len >= min_len && n_train >= 1 && n_test >= 0,
           "synthetic_task: need symbols >= 2, 1 <= min_len <= max_len, n_train >= 1 and n_test >= 0; got symbols {}, min_len {}, "
           "max_len {}, n_train {}, n_test {}",
           symbols, min_len, max_len, n_train, n_test);
  IdData d;
  d.src_vocab = d.tgt_vocab = 4 + symbols;
  Generator gen(seed);
  std::set<std::vector<int64_t>> seen;
  auto draw = [&] {
    const int64_t n = min_len + static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(max_len - min_len + 1)));
    std::vector<int64_t> s(static_cast<size_t>(n));
    for (auto& x : s) x = 4 + static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(symbols)));
    return s;
  };
  auto target = [&](std::vector<int64_t> s) {
    if (kind == "reverse") std::reverse(s.begin(), s.end());
    if (kind == "sort") std::sort(s.begin(), s.end());
    return s;
  };
  for (int64_t i = 0; i < n_train; ++i) {
    auto s = draw();
    seen.insert(s);
    d.train.push_back({s, target(s)});
  }
  // Test sequences are new ones (bounded tries, in case the space is nearly exhausted).
  for (int64_t tries = 0; static_cast<int64_t>(d.test.size()) < n_test && tries < 100 * (n_test + 1); ++tries) {
    auto s = draw();
    if (seen.insert(s).second) d.test.push_back({s, target(s)});
  }
  std::vector<std::string> names{"<pad>", "<unk>", "<bos>", "<eos>"};
  for (int64_t i = 0; i < symbols; ++i) names.push_back("s" + std::to_string(4 + i));
  d.src_words = d.tgt_words = train::Vocab(names);
  return d;
}

IdData builtin_corpus(int64_t total, uint64_t seed) {
  train::CorpusSplits c = train::make_korean_corpus(seed, static_cast<size_t>(total));
  auto to_pairs = [](const std::vector<train::SentencePair>& v) {
    std::vector<train::TokenPair> out;
    for (const auto& p : v) out.push_back({train::utf8::split_whitespace(p.src), train::utf8::split_whitespace(p.tgt)});
    return out;
  };
  std::vector<train::TokenPair> tr = to_pairs(c.train), va = to_pairs(c.valid), te = to_pairs(c.test);
  IdData d;
  d.src_words = train::Vocab::build_source(tr, 1);
  d.tgt_words = train::Vocab::build_target(tr, 1);
  d.src_vocab = d.src_words.size();
  d.tgt_vocab = d.tgt_words.size();
  d.train = train::encode_pairs(tr, d.src_words, d.tgt_words);
  d.valid = train::encode_pairs(va, d.src_words, d.tgt_words);
  d.test = train::encode_pairs(te, d.src_words, d.tgt_words);
  return d;
}

// ---------------------------------------------------------------- models

nn::Seq2SeqOptions small_model(const IdData& data, int64_t d_model, int64_t heads, int64_t layers, int64_t ff, bool pre_ln, double dropout) {
  nn::Seq2SeqOptions o;
  o.src_vocab = data.src_vocab;
  o.tgt_vocab = data.tgt_vocab;
  o.layer.d_model = d_model;
  o.layer.nhead = heads;
  o.num_layers = layers;
  o.layer.dim_feedforward = ff;
  o.layer.dropout = dropout;
  o.layer.norm_first = pre_ln;
  o.pad = train::Vocab::kPad;
  o.max_len = 256;
  return o;
}

std::vector<nn::MultiheadAttention*> attention_modules(const nn::Module& model) {
  std::vector<nn::MultiheadAttention*> out;
  for (const auto& [name, child] : model.children()) {
    if (auto* a = dynamic_cast<nn::MultiheadAttention*>(child.get())) out.push_back(a);
    for (auto* a : attention_modules(*child)) out.push_back(a);
  }
  return out;
}

// ---------------------------------------------------------------- training

std::vector<train::Batch> batches(const std::vector<train::EncodedPair>& data, int64_t max_tokens, uint64_t seed) {
  train::BatchPlan plan(data, max_tokens);
  std::vector<train::Batch> out;
  for (size_t b : plan.epoch_order(seed, 1)) out.push_back(plan.batch(b));
  return out;
}

double ScheduledSampling::gold_probability(int64_t step) const {
  if (k <= 0) return 1.0;
  return k / (k + std::exp(static_cast<double>(step) / k));
}

namespace {

// Scheduled sampling's inputs for one step: t.tgt_in with each labelled position after <bos>
// replaced, with probability 1 - gold, by a token drawn from the model's teacher-forced
// distribution for the position before it. Returns the share of labelled inputs replaced.
double mix_in_samples(const nn::Seq2SeqTransformer& model, train::BatchTensors& t, double gold, Generator& gen) {
  Tensor logits;
  {
    NoGradGuard ng;
    logits = model.forward(t.src, t.tgt_in).data().to(DType::Float64).contiguous();  // (B, T, V)
  }
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  std::vector<int64_t> in = t.tgt_in.to_vector<int64_t>();   // (B*T)
  const std::vector<int64_t> labels = t.labels.to_vector<int64_t>();  // (B*T): label of position j is input j + 1
  int64_t labelled = 0, replaced = 0;
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 1; j < T; ++j) {
      if (labels[b * T + j] == train::Vocab::kPad) continue;
      ++labelled;
      if (gen.next_double() < gold) continue;
      const double* row = logits.data<double>() + (b * T + j - 1) * V;  // the prediction of input j
      double top = -INFINITY, z = 0;
      for (int64_t v = 0; v < V; ++v)
        if (v != train::Vocab::kPad && v != train::Vocab::kBos) top = std::max(top, row[v]);
      for (int64_t v = 0; v < V; ++v) z += p[v] = v == train::Vocab::kPad || v == train::Vocab::kBos ? 0.0 : std::exp(row[v] - top);
      double r = gen.next_double() * z;
      int64_t pick = V - 1;
      for (int64_t v = 0; v < V; ++v)
        if ((r -= p[v]) < 0) {
          pick = v;
          break;
        }
      while (p[pick] == 0) --pick;  // rounding left r >= 0: the last token that can be drawn
      replaced += in[b * T + j] != pick;
      in[b * T + j] = pick;
    }
  t.tgt_in = Tensor::from_vector(in, {B, T});  // (B, T)
  return labelled ? static_cast<double>(replaced) / static_cast<double>(labelled) : 0.0;
}

std::map<std::string, Tensor> snapshot(const nn::Module& model) {
  std::map<std::string, Tensor> s;
  for (const auto& [name, t] : model.state_dict()) s[name] = t.clone();
  return s;
}

}  // namespace

FitResult fit(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& data, const FitOptions& o,
              const std::function<void(int64_t, double)>& on_step) {
  GF_CHECK(o.steps >= 1, "fit: steps must be positive, got {}", o.steps);
  GF_CHECK(!o.until.valid || (o.until.every >= 1 && o.until.patience >= 1 && !o.until.valid->empty()),
           "fit: convergence needs every >= 1, patience >= 1 and held-out pairs; got every {}, patience {}, {} pairs", o.until.every,
           o.until.patience, o.until.valid ? o.until.valid->size() : 0);
  train::BatchPlan plan(data, o.max_tokens);
  GF_CHECK(plan.size() != 0, "fit: no batch could be made from the {} pairs (max_tokens {})", data.size(), o.max_tokens);
  optim::Adam adam = train::make_adam(model.named_parameters(), o.lr);
  const optim::LrSchedule schedule{o.schedule, o.warmup, o.decay_fraction};
  const std::vector<Variable> params = model.parameters();
  model.train();
  FitResult r;
  std::vector<size_t> order;
  Generator sampler(o.seed * 0x9E3779B97F4A7C15ULL + 11);  // scheduled sampling's coins and draws
  std::map<std::string, Tensor> best;
  double bar = INFINITY, lowest = INFINITY;  // the last real improvement's NLL; the lowest NLL
  double highest = -INFINITY;               // the highest free-running accuracy (select_free_running)
  int64_t since_bar = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const size_t k = static_cast<size_t>(step - 1) % plan.size();
    if (k == 0) order = plan.epoch_order(o.seed, static_cast<uint64_t>(step - 1) / plan.size() + 1);
    train::BatchTensors t = train::to_tensors(plan.batch(order[k]));
    default_generator().seed(o.seed * 1000003ULL + static_cast<uint64_t>(step));  // dropout masks
    if (o.sampling.k > 0) r.sampled_share.push_back(mix_in_samples(model, t, o.sampling.gold_probability(step), sampler));
    const double lr = schedule.lr(o.lr, step - 1, static_cast<double>(step - 1) / static_cast<double>(o.steps));
    bool blew_up = false;  // a non-finite loss, or one above divergence_factor x the first after 20 steps: no update, the run ends
    train::StepHooks hooks;
    if (o.grad_stats) o.grad_stats->begin_step(step, plan.batch(order[k]));
    hooks.observe = [&](double, double) {
      if (o.grad_stats) o.grad_stats->after_backward();
    };
    hooks.accept = [&](double l, double) {
      r.losses.push_back(l);
      blew_up = !std::isfinite(l) || (o.divergence_factor > 0 && step > 20 && l > o.divergence_factor * r.losses.front());
      return !blew_up;
    };
    const train::StepResult s = train::train_step(adam, params, [&] { return train::batch_loss(model, t, o.label_smoothing); }, o.clip, lr, hooks);
    if (o.grad_stats) o.grad_stats->after_update(s.loss, adam.lr());
    if (on_step) on_step(step, s.loss);
    if (blew_up) {
      r.diverged = true;
      r.diverged_at = step;
      break;
    }
    if (o.until.valid && step % o.until.every == 0) {
      model.eval();
      const double nll = teacher_forced(model, *o.until.valid).nll;
      const double fr = o.until.select_free_running ? free_running_accuracy(model, *o.until.valid, o.until.select_limit).tokens : NAN;
      model.train();
      r.valid_steps.push_back(step);
      r.valid_nll.push_back(nll);
      if (o.until.select_free_running) r.valid_free_running.push_back(fr);
      if (nll < bar * (1 - o.until.min_improvement)) bar = nll, since_bar = 0;  // a real improvement
      else ++since_bar;
      // The kept measurement: the best so far by the chosen score, even when the gain is small.
      const bool better = o.until.select_free_running ? fr > highest : nll < lowest;
      lowest = std::min(lowest, nll);
      if (o.until.select_free_running) highest = std::max(highest, fr);
      if (better) best = snapshot(model), r.best_step = step;
      if (since_bar >= o.until.patience) {
        r.converged = true;
        break;
      }
    }
  }
  if (!best.empty() && r.best_step != static_cast<int64_t>(r.losses.size())) model.load_state_dict(best);
  if (o.until.valid && r.best_step < 0) r.best_step = static_cast<int64_t>(r.losses.size());
  return r;
}

double spectral_norm(const Tensor& w_in, int iterations) {
  const Tensor w = w_in.to(DType::Float64).contiguous();
  const int64_t R = w.size(0), C = w.size(1);
  const double* p = w.data<double>();
  std::vector<double> u(static_cast<size_t>(C), 1.0), v(static_cast<size_t>(R));
  double s = 0;
  for (int it = 0; it < iterations; ++it) {
    double nv = 0, nu = 0;
    for (int64_t i = 0; i < R; ++i) {
      v[i] = 0;
      for (int64_t j = 0; j < C; ++j) v[i] += p[i * C + j] * u[j];
      nv += v[i] * v[i];
    }
    if (nv == 0) return 0;
    for (double& x : v) x /= std::sqrt(nv);
    for (int64_t j = 0; j < C; ++j) {
      u[j] = 0;
      for (int64_t i = 0; i < R; ++i) u[j] += p[i * C + j] * v[i];
      nu += u[j] * u[j];
    }
    s = std::sqrt(nu);  // |W^T v| with |v| = 1: converges to the largest singular value
    for (double& x : u) x /= s;
  }
  return s;
}

}  // namespace gf::lab

// Lab `gqa`: grouped-query attention (Ainslie et al. 2023) against multi-head attention.
//
// With kv_heads < heads, keys and values are projected to kv_heads heads only and each group of
// G = heads / kv_heads query heads shares one: the KV cache shrinks by G, and so do the K/V
// projections. Ainslie et al. convert a multi-head checkpoint (each group's key and value heads
// mean-pooled into one) and uptrain it for a small share of the original steps; the grouped model
// then comes close to the multi-head model's quality at near multi-query speed (their Table 1);
// multi-query attention (kv_heads 1, Shazeer 2019) loses more.
//
// Here, per seed (the seed draws the synthetic task's data, the weights and the batch order): a
// multi-head translator trained --steps steps, converted to each group size G of --groups (1, 2, 4,
// 8 with 8 query heads: heads / G key/value heads), and every arm uptrained --uptrain steps on the
// same batches (the multi-head arm, G = 1, simply continues); their held-out quality (the
// dose-response: accuracy against log2 G, per seed), their KV cache's bytes per token, and the
// gradient a shared key/value head receives. That gradient is a sum: the expansion of a grouped
// model into a multi-head one with each key/value head copied to its group's query heads computes
// the same function, and each copy's gradient is one query head's part, so the shared head's
// gradient is their sum (an exact check), and its size against one part's measures how the group's
// query heads pull it (sqrt(G) when their parts are uncorrelated, G when they all agree). --scratch
// trains every arm from scratch instead.
// With --data DIR (lab/real_data.h) the task is that real translation task (the same data for every
// seed; the seed draws the weights and the batch order), and each arm's greedy BLEU on the validation
// split is reported beside its accuracy, as Ainslie et al. report BLEU on WMT (reported, not claimed).
// --control: the placebo. Runs of ONE group size (the middle level), each on its own seed with its
// own checkpoint, put in the levels' places: the quality trend's true value is then 0.
#include "lab/gqa.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "lab/common.h"
#include "lab/kvcache.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "train/decode/decode.h"

namespace gf::lab {

namespace {

// Copies values into a parameter in place (it keeps its storage, so every reference to it sees them).
void copy_into(const Variable& param, const Tensor& values) {
  Tensor t = param.data();
  t.copy_(values);
}

}  // namespace

std::unique_ptr<nn::Seq2SeqTransformer> expand_to_multihead(const nn::Seq2SeqTransformer& grouped) {
  nn::Seq2SeqOptions o = grouped.options();
  o.layer.kv_heads = 0;
  auto e = std::make_unique<nn::Seq2SeqTransformer>(o, 1);
  const DType dtype = grouped.out->weight.dtype();
  e->to(dtype);
  e->masks = grouped.masks;
  e->encoder_gradient = grouped.encoder_gradient;
  std::map<std::string, Tensor> state;  // everything but the q/k/v projections, which differ in layout
  for (const auto& [name, t] : grouped.state_dict())
    if (name.find(".q_proj.") == std::string::npos && name.find(".k_proj.") == std::string::npos && name.find(".v_proj.") == std::string::npos)
      state[name] = t;
  e->load_state_dict(state, /*strict=*/false);
  const auto from = attention_modules(grouped), to = attention_modules(*e);
  GF_CHECK(from.size() == to.size(), "expand_to_multihead: {} attention modules against {}", from.size(), to.size());
  for (size_t m = 0; m < from.size(); ++m) {
    const nn::MultiheadAttention& g = *from[m];
    nn::MultiheadAttention& h = *to[m];
    const int64_t D = g.embed_dim, dk = g.head_dim, G = g.num_heads / g.kv_heads;
    Tensor w = h.in_proj_weight.data(), b = h.in_proj_bias.defined() ? h.in_proj_bias.data() : Tensor();  // (3D, D), (3D)
    if (!g.grouped()) {  // multi-head already: the same packed layout
      w.copy_(g.in_proj_weight.data());
      if (b.defined()) b.copy_(g.in_proj_bias.data());
      continue;
    }
    w.narrow(0, 0, D).copy_(g.q_proj->weight.data());  // (D, D)
    if (b.defined()) b.narrow(0, 0, D).copy_(g.q_proj->bias.data());
    for (int64_t head = 0; head < g.num_heads; ++head) {
      const int64_t j = head / G;  // its key/value head
      for (int part = 0; part < 2; ++part) {
        const nn::Linear& p = part == 0 ? *g.k_proj : *g.v_proj;
        const int64_t row = (1 + part) * D + head * dk;
        w.narrow(0, row, dk).copy_(p.weight.data().narrow(0, j * dk, dk));  // (d_k, D)
        if (b.defined()) b.narrow(0, row, dk).copy_(p.bias.data().narrow(0, j * dk, dk));
      }
    }
  }
  return e;
}

std::unique_ptr<nn::Seq2SeqTransformer> pool_to_grouped(const nn::Seq2SeqTransformer& multihead, int64_t kv_heads) {
  nn::Seq2SeqOptions o = multihead.options();
  GF_CHECK(o.layer.key_value_heads() == o.layer.nhead, "pool_to_grouped: the model is grouped already ({} key/value heads for {} heads)",
           o.layer.key_value_heads(), o.layer.nhead);
  GF_CHECK(kv_heads >= 1 && o.layer.nhead % kv_heads == 0, "pool_to_grouped: {} key/value heads do not divide {} heads", kv_heads, o.layer.nhead);
  o.layer.kv_heads = kv_heads;
  auto g = std::make_unique<nn::Seq2SeqTransformer>(o, 1);
  g->to(multihead.out->weight.dtype());
  g->masks = multihead.masks;
  g->encoder_gradient = multihead.encoder_gradient;
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : multihead.state_dict())
    if (name.find("in_proj_") == std::string::npos) state[name] = t;
  g->load_state_dict(state, /*strict=*/false);
  const auto from = attention_modules(multihead), to = attention_modules(*g);
  for (size_t m = 0; m < from.size(); ++m) {
    const nn::MultiheadAttention& h = *from[m];
    nn::MultiheadAttention& a = *to[m];
    if (!a.grouped()) {  // kv_heads = heads: the packed layout, copied
      copy_into(a.in_proj_weight, h.in_proj_weight.data());
      if (a.in_proj_bias.defined()) copy_into(a.in_proj_bias, h.in_proj_bias.data());
      continue;
    }
    const int64_t D = h.embed_dim, dk = h.head_dim, G = h.num_heads / kv_heads;
    const Tensor w = h.in_proj_weight.data().to(DType::Float64).contiguous();                                         // (3D, D)
    const Tensor b = h.in_proj_bias.defined() ? h.in_proj_bias.data().to(DType::Float64).contiguous() : Tensor();  // (3D)
    copy_into(a.q_proj->weight, h.in_proj_weight.data().narrow(0, 0, D));
    if (b.defined()) copy_into(a.q_proj->bias, h.in_proj_bias.data().narrow(0, 0, D));
    for (int part = 0; part < 2; ++part) {
      nn::Linear& p = part == 0 ? *a.k_proj : *a.v_proj;
      Tensor pw = Tensor::zeros({kv_heads * dk, D}, DType::Float64), pb = Tensor::zeros({kv_heads * dk}, DType::Float64);
      for (int64_t j = 0; j < kv_heads; ++j)
        for (int64_t i = 0; i < G; ++i)
          for (int64_t r = 0; r < dk; ++r) {
            const int64_t from_row = (1 + part) * D + (j * G + i) * dk + r, to_row = j * dk + r;
            for (int64_t c = 0; c < D; ++c) pw.data<double>()[to_row * D + c] += w.data<double>()[from_row * D + c] / static_cast<double>(G);
            if (b.defined()) pb.data<double>()[to_row] += b.data<double>()[from_row] / static_cast<double>(G);
          }
      copy_into(p.weight, pw.to(p.weight.dtype()));
      if (b.defined()) copy_into(p.bias, pb.to(p.bias.dtype()));
    }
  }
  return g;
}

namespace {

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

// Rows [row, row + n) of a (rows, D) gradient, appended to v.
void append_rows(std::vector<double>& v, const Tensor& grad, int64_t row, int64_t n) {
  const Tensor g = grad.narrow(0, row, n).to(DType::Float64).contiguous();
  v.insert(v.end(), g.data<double>(), g.data<double>() + g.numel());
}

}  // namespace

SharedHeadGrads shared_head_grads(nn::Seq2SeqTransformer& grouped, const train::BatchTensors& batch) {
  auto expanded = expand_to_multihead(grouped);
  grouped.zero_grad(), expanded->zero_grad();
  Variable lg = train::batch_loss(grouped, batch, 0.0), le = train::batch_loss(*expanded, batch, 0.0);
  lg.backward(), le.backward();
  SharedHeadGrads r;
  r.loss_difference = std::abs(lg.item() - le.item()) / std::abs(lg.item());
  const auto from = attention_modules(grouped), to = attention_modules(*expanded);
  double ratio_sum = 0, cos_sum = 0;
  int64_t pairs = 0;
  for (size_t m = 0; m < from.size(); ++m) {
    const nn::MultiheadAttention& g = *from[m];
    const nn::MultiheadAttention& h = *to[m];
    const int64_t D = g.embed_dim, dk = g.head_dim, G = g.num_heads / g.kv_heads;
    const Tensor eg = h.in_proj_weight.grad();  // (3D, D)
    for (int64_t j = 0; j < g.kv_heads; ++j) {
      std::vector<double> shared;  // head j's K rows then V rows
      if (g.grouped()) {
        append_rows(shared, g.k_proj->weight.grad(), j * dk, dk);
        append_rows(shared, g.v_proj->weight.grad(), j * dk, dk);
      } else {
        append_rows(shared, g.in_proj_weight.grad(), D + j * dk, dk);
        append_rows(shared, g.in_proj_weight.grad(), 2 * D + j * dk, dk);
      }
      std::vector<std::vector<double>> parts(static_cast<size_t>(G));
      std::vector<double> sum(shared.size(), 0.0);
      double part_norms = 0;
      for (int64_t i = 0; i < G; ++i) {
        append_rows(parts[i], eg, D + (j * G + i) * dk, dk);
        append_rows(parts[i], eg, 2 * D + (j * G + i) * dk, dk);
        for (size_t k = 0; k < sum.size(); ++k) sum[k] += parts[i][k];
        part_norms += norm(parts[i]) / static_cast<double>(G);
      }
      std::vector<double> diff(shared.size());
      for (size_t k = 0; k < diff.size(); ++k) diff[k] = shared[k] - sum[k];
      r.sum_difference = std::max(r.sum_difference, norm(diff) / norm(shared));
      ratio_sum += norm(shared) / part_norms;
      for (int64_t a = 0; a < G; ++a)
        for (int64_t c = a + 1; c < G; ++c, ++pairs) cos_sum += dot(parts[a], parts[c]) / (norm(parts[a]) * norm(parts[c]));
      ++r.heads;
    }
  }
  r.ratio = ratio_sum / static_cast<double>(r.heads);
  r.cosine = pairs ? cos_sum / static_cast<double>(pairs) : NAN;
  grouped.zero_grad(), expanded->zero_grad();
  return r;
}

namespace {

struct Settings {
  std::string task;
  int64_t symbols, min_len, max_len, n_train, n_eval, d_model, heads, layers, steps, uptrain, max_tokens;
  double lr, uptrain_lr;
  bool scratch;
  std::vector<int64_t> groups, kv;  // the arms: group sizes G (--groups), and heads / G key/value heads
  const RealData* real = nullptr;   // --data: the real task in place of the synthetic one (lab/real_data.h)
};

// Seed `seed`'s task: the synthetic one it draws, or the real one (the same for every seed).
IdData task_data(const Settings& s, uint64_t seed) {
  if (s.real) return s.real->ids;
  return synthetic_task(s.task, s.symbols, s.min_len, s.max_len, s.n_train, s.n_eval, seed);
}

struct Arm {
  int64_t kv = 0, kv_built = 0;  // the arm's key/value heads, and what was built (the same)
  int64_t params = 0;
  FitResult fit;                 // uptraining (from scratch: the whole training)
  TeacherForced converted;       // just after the conversion, before uptraining (from scratch: unused)
  TeacherForced tf;
  Accuracy fr;
  SharedHeadGrads init, trained;  // at a fresh initialisation; at the end
  int64_t bytes_per_token = 0, formula = 0, cross_bytes = 0;
  double bleu = NAN;  // --data: greedy BLEU on the first --eval validation pairs
};

const char* kArmColors[] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"};
constexpr size_t kColors = sizeof(kArmColors) / sizeof(kArmColors[0]);

std::string arm_name(const Settings& s, int64_t kv) {
  if (kv == s.heads) return fmt::format("multi-head ({} kv)", kv);
  if (kv == 1) return "multi-query (1 kv)";
  return fmt::format("grouped ({} kv)", kv);
}

// A float64 copy of a model's weights, with its options.
std::unique_ptr<nn::Seq2SeqTransformer> float64_copy(const nn::Seq2SeqTransformer& m) {
  auto c = std::make_unique<nn::Seq2SeqTransformer>(m.options(), 1);
  c->to(DType::Float64);
  c->load_state_dict(m.state_dict());
  return c;
}

nn::Seq2SeqOptions options_for(const Settings& s, const IdData& data, int64_t kv) {
  nn::Seq2SeqOptions o = small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false);
  o.layer.kv_heads = kv;
  return o;
}

// One arm of one seed: from the multi-head checkpoint `start` (pooled to the arm's key/value heads,
// then uptrained), or from scratch when `start` is null. `quality_only` (the placebo's runs) stops
// after the held-out teacher-forced scores: the gradients and the cache are measured on the lab's arms.
Arm train_arm(const Settings& s, const IdData& data, int64_t kv, bool quality_only, uint64_t seed, const nn::Seq2SeqTransformer* start) {
  Arm a;
  a.kv = a.kv_built = kv;
  const train::BatchTensors first = train::to_tensors(batches(data.train, s.max_tokens, seed).front());
  if (!quality_only) {
    nn::Seq2SeqTransformer fresh(options_for(s, data, a.kv_built), seed);
    a.init = shared_head_grads(*float64_copy(fresh), first);
  }
  std::unique_ptr<nn::Seq2SeqTransformer> model;
  FitOptions fo;
  fo.lr = s.lr, fo.max_tokens = s.max_tokens;
  if (start) {
    model = pool_to_grouped(*start, a.kv_built);
    model->eval();
    a.converted = teacher_forced(*model, data.test);
    fo.steps = s.uptrain, fo.warmup = s.uptrain / 10, fo.lr = s.uptrain_lr, fo.divergence_factor = 0;
    fo.seed = seed + 1000003;  // batches in another order than the checkpoint's first ones
  } else {
    model = std::make_unique<nn::Seq2SeqTransformer>(options_for(s, data, a.kv_built), seed);
    fo.steps = s.steps + s.uptrain, fo.warmup = (s.steps + s.uptrain) / 10, fo.seed = seed;
  }
  a.params = model->num_parameters();
  a.fit = fit(*model, data.train, fo);
  model->eval();
  a.tf = teacher_forced(*model, data.test);
  if (quality_only) return a;
  a.fr = free_running_accuracy(*model, data.test);
  if (s.real) a.bleu = greedy_bleu(*model, *s.real, s.real->ids.valid, s.real->valid_refs, static_cast<size_t>(s.n_eval)).score;
  a.trained = shared_head_grads(*float64_copy(*model), first);
  // The cache as decoding allocates it (DecodeStats) against the formula.
  std::vector<size_t> some;
  for (size_t i = 0; i < std::min<size_t>(8, data.test.size()); ++i) some.push_back(i);
  const train::Batch b = train::collate(data.test, some);
  train::DecodeStats st;
  train::DecodeOptions dopt;
  dopt.max_extra = 2;
  train::translate_batch(*model, Tensor::from_vector(b.src, {b.rows, b.src_len}), dopt, &st);
  a.bytes_per_token = st.self_bytes_per_token;
  a.cross_bytes = st.cross_bytes_per_src_token;
  a.formula = kv_bytes_per_token(s.layers, a.kv_built, s.d_model / s.heads, DType::Float32);
  return a;
}

// The multi-head checkpoint every arm of a seed starts from: `steps` steps from the seed's initialisation.
std::unique_ptr<nn::Seq2SeqTransformer> checkpoint(const Settings& s, const IdData& data, uint64_t seed, FitResult* result) {
  auto m = std::make_unique<nn::Seq2SeqTransformer>(options_for(s, data, s.heads), seed);
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = s.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = seed;
  *result = fit(*m, data.train, fo);
  m->eval();
  return m;
}

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3f}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

// arms[seed][arm]
using Runs = std::vector<std::vector<Arm>>;

std::vector<double> per_seed(const Runs& runs, size_t arm, double (*f)(const Arm&)) {
  std::vector<double> v;
  for (const auto& seed : runs) v.push_back(f(seed[arm]));
  return v;
}

void report(Report& r, const Settings& s, const Runs& runs) {
  r.section("held-out quality after the same steps on the same batches (mean [t 95% interval] over seeds)");
  Table q("quality", {"arm", "kv heads built", "parameters", s.scratch ? "-" : "accuracy just converted", "teacher-forced token accuracy",
                      "teacher-forced NLL", "free-running token accuracy", "free-running exact", "accuracy - multi-head's"});
  for (size_t k = 0; k < s.kv.size(); ++k) {
    std::vector<double> gap;
    for (const auto& seed : runs) gap.push_back(seed[k].tf.accuracy - seed[0].tf.accuracy);
    q.row({arm_name(s, s.kv[k]), runs[0][k].kv_built, runs[0][k].params,
           s.scratch ? std::string("-") : with_interval(per_seed(runs, k, [](const Arm& a) { return a.converted.accuracy; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.tf.accuracy; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.tf.nll; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.fr.tokens; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.fr.exact; })), k ? with_interval(gap, "{:+.3f}") : std::string("-")});
  }
  r.print(q);
  if (s.real) {
    Table b("bleu", {"arm", fmt::format("greedy BLEU, first {} validation pairs", std::min<size_t>(static_cast<size_t>(s.n_eval), s.real->ids.valid.size())),
                     "BLEU - multi-head's"});
    for (size_t k = 0; k < s.kv.size(); ++k) {
      std::vector<double> gap;
      for (const auto& seed : runs) gap.push_back(seed[k].bleu - seed[0].bleu);
      b.row({arm_name(s, s.kv[k]), with_interval(per_seed(runs, k, [](const Arm& a) { return a.bleu; }), "{:.2f}"),
             k ? with_interval(gap, "{:+.2f}") : std::string("-")});
    }
    r.print(b);
    r.say("Token accuracy is position by position against the reference, a strict measure for real sentences; BLEU (sacreBLEU 13a) is reported, "
          "not claimed.");
  }
  int64_t stopped = 0;
  for (const auto& seed : runs)
    for (const auto& a : seed) stopped += a.fit.diverged;
  if (stopped) r.say(fmt::format("{} of the {} runs diverged (a non-finite loss) and stopped early.", stopped, runs.size() * s.kv.size()));
  if (!s.scratch)
    r.say(fmt::format("Each seed's multi-head checkpoint ({} steps) pooled to each arm's key/value heads (the mean of a group's heads), then "
                      "{} more steps for every arm (the multi-head arm continues as it is).", s.steps, s.uptrain));

  r.section("the KV cache per target token (decoding's DecodeStats) against 2 x layers x kv_heads x d_k x 4 bytes");
  Table c("cache", {"arm", "kv heads built", "formula (bytes/token)", "measured self-attention", "measured cross-attention (per source token)",
                    "share of multi-head's"});
  for (size_t k = 0; k < s.kv.size(); ++k) {
    const Arm& a = runs[0][k];
    c.row({arm_name(s, s.kv[k]), a.kv_built, a.formula, a.bytes_per_token, a.cross_bytes,
           static_cast<double>(a.bytes_per_token) / static_cast<double>(runs[0][0].bytes_per_token)});
  }
  r.print(c);

  r.section("a shared key/value head's gradient against one query head's part of it (one batch, float64; mean [t 95%] over seeds)");
  Table g("shared head", {"arm", "G (query heads per kv head)", "init: |g_shared| / mean |g_part|", "init: cosine between parts",
                          "trained: |g_shared| / mean |g_part|", "trained: cosine", "largest |g_shared - sum of parts| / |g_shared|"});
  for (size_t k = 0; k < s.kv.size(); ++k) {
    double worst = 0;
    for (const auto& seed : runs) worst = std::max({worst, seed[k].init.sum_difference, seed[k].trained.sum_difference});
    g.row({arm_name(s, s.kv[k]), s.heads / runs[0][k].kv_built, with_interval(per_seed(runs, k, [](const Arm& a) { return a.init.ratio; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.init.cosine; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.trained.ratio; })),
           with_interval(per_seed(runs, k, [](const Arm& a) { return a.trained.cosine; })), worst});
  }
  r.print(g);
  r.say("g_part: the gradient of one query head's copy of the key/value head in the multi-head expansion (the same function);");
  r.say("G parts that are uncorrelated add to sqrt(G) times one part; parts that agree, to G times.");
}

void add_figure(Report& r, const Settings& s, const Runs& runs) {
  // Training loss, mean over seeds, as a moving average.
  std::vector<ChartSeries> curves;
  const int64_t length = s.scratch ? s.steps + s.uptrain : s.uptrain;
  const size_t window = static_cast<size_t>(std::max<int64_t>(1, length / 20));
  for (size_t k = 0; k < s.kv.size(); ++k) {
    std::vector<std::vector<double>> l;
    for (const auto& seed : runs) {
      auto v = seed[k].fit.losses;
      v.resize(static_cast<size_t>(length), NAN);
      l.push_back(v);
    }
    const auto m = means(spread_per_column(l));
    ChartSeries c{arm_name(s, s.kv[k]), {}, {}, {}, {}, false, kArmColors[k % kColors]};
    for (size_t i = window - 1; i < m.size(); ++i) {
      double a = 0;
      for (size_t j = 0; j < window; ++j) a += m[i - j] / static_cast<double>(window);
      c.x.push_back(static_cast<double>(i + 1)), c.y.push_back(a);
    }
    curves.push_back(c);
  }
  r.add_panel(Chart{fmt::format("{} loss ({}-step average, mean of seeds)", s.scratch ? "training" : "uptraining", window),
                    s.scratch ? "step" : "step after the conversion", "cross-entropy", false, true, curves, {},
                    Chart::Corner::TopRight});
  std::vector<double> x;
  for (const auto& a : runs[0]) x.push_back(static_cast<double>(a.kv));
  auto column = [&](double (*f)(const Arm&)) {
    std::vector<std::vector<double>> rows;
    for (const auto& seed : runs) {
      rows.push_back({});
      for (const auto& a : seed) rows.back().push_back(f(a));
    }
    return spread_per_column(rows);
  };
  r.add_panel(Chart{"held-out accuracy after the same steps (band: seeds)", "key/value heads", "accuracy", true, false,
                    {band_series("teacher-forced tokens", x, column([](const Arm& a) { return a.tf.accuracy; }), "#1f77b4"),
                     band_series("free-running tokens", x, column([](const Arm& a) { return a.fr.tokens; }), "#ff7f0e"),
                     band_series("free-running exact", x, column([](const Arm& a) { return a.fr.exact; }), "#2ca02c", true)},
                    x, Chart::Corner::BottomLeft});
  std::vector<double> gx;
  for (const auto& a : runs[0]) gx.push_back(static_cast<double>(s.heads / a.kv_built));
  ChartSeries sq{"sqrt(G): uncorrelated parts", gx, {}, {}, {}, true, "#7f7f7f"}, lin{"G: parts that agree", gx, gx, {}, {}, true, "#bbbbbb"};
  for (double g : gx) sq.y.push_back(std::sqrt(g));
  r.add_panel(Chart{"shared kv head's gradient / one query head's part (band: seeds)", "G = heads / kv heads", "ratio", true, true,
                    {band_series("at initialisation", gx, column([](const Arm& a) { return a.init.ratio; }), "#9467bd"),
                     band_series("trained", gx, column([](const Arm& a) { return a.trained.ratio; }), "#8c564b"), sq, lin},
                    gx, Chart::Corner::TopLeft});
  ChartSeries measured{"measured (DecodeStats)", x, {}, {}, {}, false, "#1f77b4"}, formula{"2 x layers x kv x d_k x 4", x, {}, {}, {}, true, "#7f7f7f"};
  for (const auto& a : runs[0]) measured.y.push_back(static_cast<double>(a.bytes_per_token)), formula.y.push_back(static_cast<double>(a.formula));
  r.add_panel(Chart{"self-attention KV cache per target token", "key/value heads", "bytes", true, true, {measured, formula}, x, Chart::Corner::TopLeft});
}

// The quality dose-response: per seed, held-out teacher-forced accuracy at each G; its trend is the
// slope per doubling of G, since G multiplies (the levels are doublings).
std::vector<double> quality_trend(Report& r, const Settings& s, const Runs& runs) {
  std::vector<double> levels;
  for (int64_t g : s.groups) levels.push_back(static_cast<double>(g));
  std::vector<std::vector<double>> acc;  // [seed][level]
  for (const auto& seed : runs) {
    acc.emplace_back();
    for (const auto& a : seed) acc.back().push_back(a.tf.accuracy);
  }
  return r.dose_response({"G", "G = query heads per key/value head (log)", "held-out teacher-forced token accuracy", levels, acc,
                          TrendKind::LogSlope, true, "#d62728"});
}

void check_claims(Report& r, const Settings& s, const Runs& runs, const std::vector<double>& trend_per_seed) {
  const size_t half = 1, one = s.groups.size() - 1;  // arms: G = 1, 2, ..., heads (parse_groups)
  r.paper("gqa_quality_trend", trend_per_seed,
          fmt::format("slope of teacher-forced token accuracy per doubling of G over G = {}, per seed: {:+.4f}", fmt::join(s.groups, ", "),
                      fmt::join(trend_per_seed, ", ")));
  std::vector<double> gap, g2, gmax;
  double sum_worst = 0;
  int64_t bytes_worst = 0;
  for (const auto& seed : runs) {
    gap.push_back(seed[half].tf.accuracy - seed[0].tf.accuracy);
    g2.push_back(seed[half].init.ratio);
    gmax.push_back(seed[one].init.ratio);
    for (const auto& a : seed) {
      sum_worst = std::max({sum_worst, a.init.sum_difference, a.trained.sum_difference, a.init.loss_difference, a.trained.loss_difference});
      bytes_worst = std::max({bytes_worst, std::abs(a.bytes_per_token - a.formula), std::abs(a.cross_bytes - a.formula)});
    }
  }
  r.paper("gqa_near_mha", gap,
          fmt::format("teacher-forced token accuracy, {} kv heads minus {}, per seed: {:+.3f}", s.kv[half], s.heads, fmt::join(gap, ", ")));
  r.check("shared_grad_g2", g2, fmt::format("{} kv heads (G {}): |g_shared| / mean |g_part| per seed at initialisation: {:.2f}", s.kv[half],
                                            s.heads / runs[0][half].kv_built, fmt::join(g2, ", ")));
  r.check("shared_grad_mqa", gmax, fmt::format("1 kv head (G {}): |g_shared| / mean |g_part| per seed at initialisation: {:.2f}",
                                               s.heads / runs[0][one].kv_built, fmt::join(gmax, ", ")));
  r.check("group_sum", sum_worst, fmt::format("largest relative difference (losses, and shared gradient against the sum of its parts) {:.3g}", sum_worst));
  r.check("cache_bytes", static_cast<double>(bytes_worst), fmt::format("largest |measured - formula| {} bytes", bytes_worst));
}

// One run of the placebo: seed i's own checkpoint, converted to G and uptrained (or trained from
// scratch), scored by held-out teacher-forced accuracy, as the lab scores each arm.
double placebo_accuracy(const Settings& s, int64_t G, uint64_t seed) {
  const IdData data = task_data(s, seed);
  FitResult pre;
  const auto start = s.scratch ? nullptr : checkpoint(s, data, seed, &pre);
  return train_arm(s, data, s.heads / G, /*quality_only=*/true, seed, start.get()).tf.accuracy;
}

// --control: the trend's placebo. Runs at ONE group size (the middle level), each on its own seed
// (its own data, checkpoint and batches), put in the levels' places: the true trend is 0.
void placebo(Report& r, const Settings& s) {
  const int k = static_cast<int>(s.groups.size()), m = r.trend_placebo_pool(k);
  const int64_t mid = s.groups[s.groups.size() / 2];
  std::vector<double> acc;
  for (int j = 0; j < m; ++j) acc.push_back(placebo_accuracy(s, mid, r.seed(j)));
  Table t(fmt::format("the pool: G = {}", mid), {"seed", "teacher-forced token accuracy"});
  for (int j = 0; j < m; ++j) t.row({static_cast<int64_t>(r.seed(j)), acc[static_cast<size_t>(j)]});
  r.print(t);
  const Spread sp = spread(acc);
  r.say(fmt::format("PLACEBO: {} runs at G = {} only (seeds {}-{}), accuracy mean {:.3f}, from {:.3f} to {:.3f}; the trend claim reads {} of "
                    "them per seed as G = {}.", m, mid, r.seed(0), r.seed(m - 1), sp.mean, sp.min, sp.max, k, fmt::join(s.groups, ", ")));
  std::vector<double> levels;
  for (int64_t g : s.groups) levels.push_back(static_cast<double>(g));
  r.placebo_trend("gqa_quality_trend", k, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(acc[static_cast<size_t>(j)]);
    return trend(levels, y, TrendKind::LogSlope);
  }, fmt::format("runs at G = {} with different seeds as the levels", mid));
  r.no_placebo("gqa_near_mha", "a claim of no large loss (above a negative threshold): a placebo's zero difference is what it claims");
}

}  // namespace

std::vector<int64_t> parse_groups(const std::string& text, int64_t heads) {
  const std::vector<int64_t> g = parse_increasing_ints(text, "lab gqa: --groups");
  GF_CHECK(g.size() >= 4, "lab gqa: --groups needs 4 or more group sizes for the dose-response, got {} ('{}')", g.size(), text);
  GF_CHECK(g[0] == 1 && g[1] == 2, "lab gqa: --groups must start 1,2 (the multi-head checkpoint, and the heads/2 arm gqa_near_mha reads), got '{}'",
           text);
  GF_CHECK(g.back() == heads, "lab gqa: --groups must end at --heads {} (multi-query, the arm shared_grad_mqa reads), got '{}'", heads, text);
  for (int64_t G : g) GF_CHECK(heads % G == 0, "lab gqa: group size {} of --groups does not divide --heads {}", G, heads);
  return g;
}

namespace {

void run(Report& r) {
  Settings s{r.text("task"),    r.integer("symbols"), r.integer("min-len"), r.integer("max-len"),    r.integer("train"),
             r.integer("eval"), r.integer("d-model"), r.integer("heads"),   r.integer("layers"),     r.integer("steps"),
             r.integer("uptrain"), r.integer("max-tokens"), r.real("lr"), r.real("uptrain-lr"), r.on("scratch"), {}, {}};
  GF_CHECK(s.steps >= 1 && s.uptrain >= 1, "lab gqa: --steps and --uptrain must be positive, got {} and {}", s.steps, s.uptrain);
  GF_CHECK(s.heads >= 1 && s.d_model % s.heads == 0, "lab gqa: --heads must divide --d-model, got {} for {}", s.heads, s.d_model);
  s.groups = parse_groups(r.text("groups"), s.heads);
  for (int64_t G : s.groups) s.kv.push_back(s.heads / G);
  std::optional<RealData> real;
  if (uses_real_data(r)) {
    real = real_data(r), s.real = &*real;
    if (real->ids.test.size() > static_cast<size_t>(s.n_eval)) real->ids.test.resize(static_cast<size_t>(s.n_eval));
    r.say(fmt::format("the real task above: {} held-out test pairs; Post-LN, d_model {}, {} query heads, {}+{} layers;", real->ids.test.size(),
                      s.d_model, s.heads, s.layers, s.layers));
  } else {
    r.say(fmt::format("task {} over {} symbols, lengths {}-{}, {} training and {} held-out sequences; Post-LN, d_model {}, {} query heads, {}+{} layers;",
                      s.task, s.symbols, s.min_len, s.max_len, s.n_train, s.n_eval, s.d_model, s.heads, s.layers, s.layers));
  }
  if (s.scratch)
    r.say(fmt::format("Every arm trained from scratch for {} steps of Adam at lr {} (10% warm-up), {} tokens a batch, the same batches.",
                      s.steps + s.uptrain, s.lr, s.max_tokens));
  else
    r.say(fmt::format("Ainslie et al.'s recipe: a multi-head model trained {} steps (Adam, lr {}, 10% warm-up, {} tokens a batch), converted by "
                      "mean-pooling each group's key/value heads, then every arm uptrained {} steps on the same batches (a fresh Adam at lr {}, "
                      "10% warm-up).", s.steps, s.lr, s.max_tokens, s.uptrain, s.uptrain_lr));
  if (r.placebo_mode()) return placebo(r, s);
  Runs runs;
  for (int i = 0; i < r.seeds(); ++i) {
    const IdData data = task_data(s, r.seed(i));
    runs.push_back({});
    FitResult pre;
    const auto start = s.scratch ? nullptr : checkpoint(s, data, r.seed(i), &pre);
    for (int64_t kv : s.kv) {
      runs.back().push_back(train_arm(s, data, kv, /*quality_only=*/false, r.seed(i), start.get()));
    }
  }
  report(r, s, runs);
  const std::vector<double> trend_per_seed = quality_trend(r, s, runs);
  add_figure(r, s, runs);
  auto& d = r.data();
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& a : runs[i])
      d["runs"].push_back({{"seed", r.seed(static_cast<int>(i))},
                           {"kv_heads", a.kv},
                           {"kv_heads_built", a.kv_built},
                           {"parameters", a.params},
                           {"losses", a.fit.losses},
                           {"converted_tf_accuracy", a.converted.accuracy},
                           {"tf_accuracy", a.tf.accuracy},
                           {"tf_nll", a.tf.nll},
                           {"free_running_tokens", a.fr.tokens},
                           {"free_running_exact", a.fr.exact},
                           {"init_ratio", a.init.ratio},
                           {"init_cosine", a.init.cosine},
                           {"trained_ratio", a.trained.ratio},
                           {"trained_cosine", a.trained.cosine},
                           {"bytes_per_token", a.bytes_per_token}});
  if (real)
    for (size_t i = 0; i < runs.size(); ++i)
      for (size_t k = 0; k < runs[i].size(); ++k) d["runs"][i * runs[i].size() + k]["bleu_valid"] = runs[i][k].bleu;
  check_claims(r, s, runs, trend_per_seed);
}

}  // namespace

Lab gqa_lab() {
  Lab l;
  l.name = "gqa";
  l.title = "grouped-query attention: quality, cache bytes, and the shared head's gradient";
  l.reference = "Ainslie et al. 2023, arXiv:2305.13245 (Sections 2.1-2.2, Table 1); Shazeer 2019, arXiv:1911.02150 (multi-query)";
  l.question = "A multi-head checkpoint converted to G = 1, 2, 4, 8 query heads per key/value head and uptrained as long as the multi-head "
               "model trains on: how does quality fall with G, does grouped-query attention (G = 2) stay near multi-head quality while its cache "
               "shrinks by G, and how does a shared key/value head's gradient compare with one query head's part of it?";
  l.control = "placebo: runs of one group size, each on its own seed and checkpoint, in every group size's place";
  l.placebo = true;
  l.default_seeds = 5;
  l.options = task_options();
  l.options.insert(l.options.end(), {{"d-model", Option::Int, "32", "model width (FFN 4x)"},
                                     {"heads", Option::Int, "8", "query heads"},
                                     {"groups", Option::Text, "1,2,4,8", "the arms: query heads per key/value head G (4 or more, increasing, from 1,2 to --heads)"},
                                     {"layers", Option::Int, "2", "encoder and decoder layers each"},
                                     {"steps", Option::Int, "400", "training steps of the multi-head checkpoint"},
                                     {"uptrain", Option::Int, "100", "steps of every arm after the conversion"},
                                     {"uptrain-lr", Option::Real, "0.0005", "Adam learning rate after the conversion (a fresh optimizer, whose first steps are large)"},
                                     {"scratch", Option::Switch, "", "train every arm from scratch for steps + uptrain steps instead"},
                                     {"lr", Option::Real, "0.002", "Adam learning rate (10% linear warm-up)"},
                                     {"max-tokens", Option::Int, "1024", "padded tokens per batch"}});
  add_real_data_options(l.options);  // --data: a real translation task in place of the synthetic one (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

// Lab `smoothing`: what label smoothing does to calibration and to the last layers (Müller,
// Kornblith and Hinton 2019, "When does label smoothing help?").
//
// Label smoothing trains against (1 - eps) on the label plus eps spread over every class. Müller et
// al. find that it makes a network's confidence match its accuracy better (lower expected
// calibration error, their Section 3, Figure 2 and the translation experiment there), and that it
// pulls the penultimate layer's representations of one class into a tight cluster, each class at
// the same distance from the others' templates (Section 2, Figure 1): the logit of the right class
// exceeds the others' by about a fixed amount instead of growing without bound.
//
// Calibration is only a question where a model can be overconfident: where the right answer is
// uncertain and the network can memorise its training set. So the task here is a copy task whose
// targets carry noise the source does not predict (each target token replaced by a random symbol
// with probability --noise, in training and held-out data alike), trained long enough on a small
// set to memorise it. Per seed (the seed draws the data, the noise, the weights and the batch
// order): the same model trained on the same batches with eps 0 and with eps --eps; held-out
// calibration, the logit gap and the penultimate clusters on training tokens. The logit gap is also
// measured at every level of --eps-levels (a dose-response, lab/report.h), and its claim is the
// trend: the slope of ln(gap) on eps, per seed.
// --control is a placebo: two groups of seeds of the eps-0 model in the two arms' places, and
// eps-0 models of different seeds in every eps level's place for the trend.
#include "lab/smoothing.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "autograd/grad_mode.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "tensor/kernels/indexing.h"
#include "tensor/kernels/random.h"
#include "train/run/batch_loss.h"

namespace gf::lab {

Calibration calibration(const std::vector<double>& confidence, const std::vector<bool>& correct, int bins) {
  GF_CHECK(confidence.size() == correct.size() && !confidence.empty() && bins >= 1,
           "calibration: {} confidences, {} outcomes, {} bins (need equal sizes, at least one, bins >= 1)", confidence.size(), correct.size(), bins);
  Calibration c;
  c.count.assign(static_cast<size_t>(bins), 0);
  std::vector<double> conf_sum(static_cast<size_t>(bins), 0.0), right(static_cast<size_t>(bins), 0.0);
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double p = confidence[i];
    GF_CHECK(p >= 0 && p <= 1, "calibration: confidence {} at {} is outside [0, 1]", p, i);
    const int b = std::min(bins - 1, static_cast<int>(p * bins));  // bin b holds (b/bins, (b+1)/bins]; 1 goes in the last
    ++c.count[b];
    conf_sum[b] += p;
    right[b] += correct[i];
    c.confidence += p;
    c.accuracy += correct[i];
  }
  const double n = static_cast<double>(confidence.size());
  c.confidence /= n, c.accuracy /= n;
  for (int b = 0; b < bins; ++b) {
    const double k = static_cast<double>(c.count[b]);
    c.bin_confidence.push_back(k ? conf_sum[b] / k : NAN);
    c.bin_accuracy.push_back(k ? right[b] / k : NAN);
    if (k) c.ece += k / n * std::abs(right[b] / k - conf_sum[b] / k);
  }
  return c;
}

double cluster_ratio(const Tensor& features, const std::vector<int64_t>& labels, int64_t min_count) {
  GF_CHECK(features.ndim() == 2 && features.size(0) == static_cast<int64_t>(labels.size()), "cluster_ratio: features {} for {} labels",
           shape_str(features.shape()), labels.size());
  const Tensor f = features.to(DType::Float64).contiguous();  // (N, D)
  const int64_t N = f.size(0), D = f.size(1);
  std::map<int64_t, std::vector<int64_t>> rows;
  for (int64_t i = 0; i < N; ++i) rows[labels[i]].push_back(i);
  std::vector<std::vector<double>> centre;
  std::vector<const std::vector<int64_t>*> members;
  for (const auto& [label, r] : rows) {
    if (static_cast<int64_t>(r.size()) < min_count) continue;
    std::vector<double> m(static_cast<size_t>(D), 0.0);
    for (int64_t i : r)
      for (int64_t d = 0; d < D; ++d) m[d] += f.data<double>()[i * D + d] / static_cast<double>(r.size());
    centre.push_back(m);
    members.push_back(&r);
  }
  GF_CHECK(centre.size() >= 2, "cluster_ratio: {} classes have at least {} features; two are needed", centre.size(), min_count);
  auto dist2 = [&](const double* a, const std::vector<double>& b) {
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += (a[d] - b[d]) * (a[d] - b[d]);
    return s;
  };
  double within = 0;
  int64_t n = 0;
  for (size_t c = 0; c < centre.size(); ++c)
    for (int64_t i : *members[c]) within += dist2(f.data<double>() + i * D, centre[c]), ++n;
  within /= static_cast<double>(n);
  double between = 0;
  int64_t pairs = 0;
  for (size_t a = 0; a < centre.size(); ++a)
    for (size_t b = a + 1; b < centre.size(); ++b) between += dist2(centre[a].data(), centre[b]), ++pairs;
  between /= static_cast<double>(pairs);
  return within / between;
}

Tensor template_coordinates(const Tensor& features, const Tensor& templates) {
  GF_CHECK(features.ndim() == 2 && templates.ndim() == 2 && features.size(1) == templates.size(1),
           "template_coordinates: features {} and templates {} must be (N, D) and (K, D)", shape_str(features.shape()), shape_str(templates.shape()));
  const Tensor f = features.to(DType::Float64).contiguous(), w = templates.to(DType::Float64).contiguous();
  const int64_t N = f.size(0), D = f.size(1), K = w.size(0);
  std::vector<std::vector<double>> basis;
  for (int64_t k = 0; k < K; ++k) {
    std::vector<double> v(w.data<double>() + k * D, w.data<double>() + (k + 1) * D);
    const double size = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    for (int pass = 0; pass < 2; ++pass)  // twice: classical Gram-Schmidt loses orthogonality once
      for (const auto& b : basis) {
        const double c = std::inner_product(v.begin(), v.end(), b.begin(), 0.0);
        for (int64_t d = 0; d < D; ++d) v[d] -= c * b[d];
      }
    const double left = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    if (left <= 1e-9 * size || left == 0) continue;
    for (double& x : v) x /= left;
    basis.push_back(v);
  }
  const int64_t r = static_cast<int64_t>(basis.size());
  Tensor out = Tensor::zeros({N, r}, DType::Float64);  // (N, r)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < r; ++j)
      out.data<double>()[i * r + j] = std::inner_product(basis[j].begin(), basis[j].end(), f.data<double>() + i * D, 0.0);
  return out;
}

double smoothed_cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels, double eps, int64_t ignore) {
  GF_CHECK(logits.ndim() == 2 && logits.size(0) == static_cast<int64_t>(labels.size()), "smoothed_cross_entropy: logits {} for {} labels",
           shape_str(logits.shape()), labels.size());
  const Tensor z = logits.to(DType::Float64).contiguous();  // (N, V)
  const int64_t N = z.size(0), V = z.size(1);
  double total = 0;
  int64_t rows = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (labels[i] == ignore) continue;
    const double* row = z.data<double>() + i * V;
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
    const double log_z = top + std::log(sum);
    double mean_nll = 0;
    for (int64_t v = 0; v < V; ++v) mean_nll += (log_z - row[v]) / static_cast<double>(V);
    total += (1 - eps) * (log_z - row[labels[i]]) + eps * mean_nll;
    ++rows;
  }
  return rows ? total / static_cast<double>(rows) : 0;
}

void add_target_noise(std::vector<train::EncodedPair>& pairs, int64_t symbols, double rate, uint64_t seed) {
  GF_CHECK(rate >= 0 && rate <= 1 && symbols >= 1, "add_target_noise: rate {} must be in [0, 1] and symbols {} positive", rate, symbols);
  Generator gen(seed);
  for (auto& p : pairs)
    for (auto& t : p.tgt)
      if (gen.next_double() < rate) t = 4 + static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(symbols)));
}

namespace {

constexpr const char* kPlainColor = "#d62728";
constexpr const char* kSmoothColor = "#1f77b4";

struct Settings {
  int64_t symbols, min_len, max_len, n_train, n_eval, d_model, heads, layers, steps, max_tokens, eval_every, feature_seqs;
  double lr, noise, eps;
  const RealData* real = nullptr;  // --data: the real task in place of the noisy copy task (lab/real_data.h)
  int64_t vocab = 0;               // V, the target vocabulary
};

// What a trained model does on held-out tokens (calibration) and on training tokens (the logit
// gap and the penultimate layer), teacher-forced, eval mode.
struct Measured {
  Calibration held_out;
  double nll = 0;           // held-out NLL (no smoothing)
  double gap_train = 0;     // mean over training tokens of z_label - mean of the other logits
  double gap_held_out = 0;  // the same on held-out tokens
  double cluster = 0;       // cluster_ratio of the decoder's last states in the templates' span, training tokens whose label is clean
  double cluster_raw = 0;   // ... of the states themselves (every direction)
  double cluster_all = 0;   // ... in the templates' span, every training token by its label (a replaced one too)
};

// Per token, every position whose label is not PAD, teacher-forced: the top-1 confidence, whether it
// is right, -log p(label), and the logit gap (z_label - the mean of the other logits), each from the
// token's float64 logits; for training tokens also their final decoder states and the labels before
// the noise. (Kept per token, not as (N, V) logits: with a real task's vocabulary of thousands those
// would not fit.)
struct Tokens {
  std::vector<double> confidence, nll, gap;
  std::vector<bool> right;
  Tensor states;  // (N, D)
  std::vector<int64_t> labels, clean_labels;
};

// One token's row of V float64 logits into t.
void add_token(Tokens& t, const double* row, int64_t V, int64_t label) {
  const double total = std::accumulate(row, row + V, 0.0), y = row[label];
  t.gap.push_back(y - (total - y) / static_cast<double>(V - 1));
  const int64_t arg = std::max_element(row, row + V) - row;
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - row[arg]);
  t.confidence.push_back(1 / sum);  // the softmax at the argmax
  t.right.push_back(arg == label);
  t.nll.push_back(row[arg] + std::log(sum) - y);
}

// `clean`, if given, holds the same pairs before add_target_noise (the same lengths).
Tokens tokens_of(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t limit, bool with_states,
                 const std::vector<train::EncodedPair>* clean = nullptr) {
  NoGradGuard ng;
  Tokens out;
  std::vector<Tensor> states;
  const size_t n = std::min(limit, pairs.size());
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    const train::BatchTensors t = train::to_tensors(train::collate(pairs, part));
    const Tensor h = model.decoder_states(t.src, t.tgt_in).data();                          // (B, T, D)
    const Tensor flat = h.reshape({-1, h.size(2)}).contiguous();                            // (B*T, D)
    const Tensor z = model.project(Variable(flat)).data().to(DType::Float64).contiguous();  // (B*T, V)
    const int64_t V = z.size(1);
    const std::vector<int64_t> labels = t.labels.to_vector<int64_t>();                      // (B*T)
    const std::vector<int64_t> clean_labels =
        clean ? train::to_tensors(train::collate(*clean, part)).labels.to_vector<int64_t>() : labels;  // (B*T)
    std::vector<int64_t> keep;
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] != train::Vocab::kPad) {
        keep.push_back(static_cast<int64_t>(i));
        out.labels.push_back(labels[i]);
        out.clean_labels.push_back(clean_labels[i]);
        add_token(out, z.data<double>() + static_cast<int64_t>(i) * V, V, labels[i]);
      }
    if (with_states) states.push_back(kernels::index_select(flat.to(DType::Float64), Tensor::from_vector(keep, {static_cast<int64_t>(keep.size())})));
  }
  if (with_states) out.states = kernels::concat(states, 0);
  return out;
}

double mean_of(const std::vector<double>& v) { return v.empty() ? NAN : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

Calibration held_out_calibration(const Tokens& t, double* nll) {
  const double N = static_cast<double>(t.nll.size());
  *nll = 0;
  for (double v : t.nll) *nll += v / N;
  return calibration(t.confidence, t.right);
}

// Features and labels of the tokens whose label is its clean one (not replaced, or replaced by itself).
std::pair<Tensor, std::vector<int64_t>> clean_tokens(const Tokens& t) {
  std::vector<int64_t> rows, labels;
  for (size_t i = 0; i < t.labels.size(); ++i)
    if (t.labels[i] == t.clean_labels[i]) rows.push_back(static_cast<int64_t>(i)), labels.push_back(t.labels[i]);
  return {kernels::index_select(t.states, Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())})), labels};  // (N', D)
}

Measured measure(const nn::Seq2SeqTransformer& model, const IdData& data, const std::vector<train::EncodedPair>& clean_train, const Settings& s) {
  Measured m;
  const Tokens held = tokens_of(model, data.test, data.test.size(), false);
  m.held_out = held_out_calibration(held, &m.nll);
  m.gap_held_out = mean_of(held.gap);
  const Tokens train = tokens_of(model, data.train, static_cast<size_t>(s.feature_seqs), true, &clean_train);
  m.gap_train = mean_of(train.gap);
  const auto [features, labels] = clean_tokens(train);
  const Tensor templates = model.out->weight.data();  // (V, D): every class's template
  m.cluster = cluster_ratio(template_coordinates(features, templates), labels, 10);
  m.cluster_raw = cluster_ratio(features, labels, 10);
  m.cluster_all = cluster_ratio(template_coordinates(train.states, templates), train.labels, 10);
  return m;
}

struct Arm {
  double eps = 0;
  FitResult fit;
  Measured end;
  std::vector<double> probe_steps, probe_ece, probe_over;  // during training: held-out ECE and confidence - accuracy
  double loss_check = 0;  // |batch_loss - the definition| / the definition, float64, one held-out batch
  double bleu = NAN;      // --data: BLEU of greedy translations of the first --eval validation sentences
};

Arm train_arm(const Settings& s, const IdData& data, const std::vector<train::EncodedPair>& clean_train, double eps, uint64_t seed) {
  Arm a;
  a.eps = eps;
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false), seed);
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = s.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = seed, fo.label_smoothing = eps;
  a.fit = fit(model, data.train, fo, [&](int64_t step, double) {
    if (step % s.eval_every != 0) return;
    double nll = 0;
    const Calibration c = held_out_calibration(tokens_of(model, data.test, data.test.size(), false), &nll);  // no dropout: train mode = eval mode
    a.probe_steps.push_back(static_cast<double>(step)), a.probe_ece.push_back(c.ece), a.probe_over.push_back(c.confidence - c.accuracy);
  });
  model.eval();
  a.end = measure(model, data, clean_train, s);
  // The loss the model trained on, against label smoothing's definition, in float64.
  nn::Seq2SeqTransformer copy(model.options(), 1);
  copy.to(DType::Float64);
  copy.load_state_dict(model.state_dict());
  copy.eval();
  std::vector<size_t> part;
  for (size_t i = 0; i < std::min<size_t>(64, data.test.size()); ++i) part.push_back(i);
  const train::BatchTensors t = train::to_tensors(train::collate(data.test, part));
  NoGradGuard ng;
  const double library = train::batch_loss(copy, t, eps).item();
  const Tensor z = copy.forward(t.src, t.tgt_in).data();  // (B, T, V)
  const double definition = smoothed_cross_entropy(z.reshape({-1, z.size(2)}), t.labels.to_vector<int64_t>(), eps, train::Vocab::kPad);
  a.loss_check = std::abs(library - definition) / definition;
  if (s.real) a.bleu = greedy_bleu(model, *s.real, s.real->ids.valid, s.real->valid_refs, static_cast<size_t>(s.n_eval)).score;
  return a;
}

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3f}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

// arms[seed][0 = eps 0, 1 = eps]
using Runs = std::vector<std::array<Arm, 2>>;

std::vector<double> column(const Runs& runs, int arm, double (*f)(const Arm&)) {
  std::vector<double> v;
  for (const auto& x : runs) v.push_back(f(x[arm]));
  return v;
}

std::vector<double> ratio_column(const Runs& runs, double (*f)(const Arm&)) {
  std::vector<double> v;
  for (const auto& x : runs) v.push_back(f(x[1]) / f(x[0]));
  return v;
}

void report(Report& r, const Settings& s, const Runs& runs) {
  r.section("held-out calibration, and the last layers on training tokens (mean [t 95% interval] over seeds)");
  Table t("smoothing", {"eps", "held-out accuracy", "mean confidence", "confidence - accuracy", "ECE (15 bins)", "held-out NLL",
                        "logit gap, training tokens", "logit gap, held-out", "clusters: templates' span, clean labels", "every direction",
                        "templates' span, every label"});
  for (int k = 0; k < 2; ++k)
    t.row({runs[0][k].eps, with_interval(column(runs, k, [](const Arm& a) { return a.end.held_out.accuracy; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.held_out.confidence; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.held_out.confidence - a.end.held_out.accuracy; }), "{:+.3f}"),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.held_out.ece; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.nll; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.gap_train; }), "{:.2f}"),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.gap_held_out; }), "{:.2f}"),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.cluster; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.cluster_raw; })),
           with_interval(column(runs, k, [](const Arm& a) { return a.end.cluster_all; }))});
  r.print(t);
  Table p("per seed", {"seed", "ECE eps 0", "ECE eps", "difference", "gap ratio (eps / 0)", "cluster ratio (eps / 0)", "every direction",
                       "every label"});
  for (size_t i = 0; i < runs.size(); ++i) {
    const Arm &a = runs[i][0], &b = runs[i][1];
    p.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), a.end.held_out.ece, b.end.held_out.ece, b.end.held_out.ece - a.end.held_out.ece,
           b.end.gap_train / a.end.gap_train, b.end.cluster / a.end.cluster, b.end.cluster_raw / a.end.cluster_raw,
           b.end.cluster_all / a.end.cluster_all});
  }
  r.print(p);
  const int64_t V = s.vocab;
  const double optimum = std::log((1 - s.eps + s.eps / static_cast<double>(V)) / (s.eps / static_cast<double>(V)));
  r.say(fmt::format("logit gap: z_label - mean of the other {} logits. With eps > 0 the loss is least when every gap is log((1 - eps + eps/V) / (eps/V))",
                    V - 1));
  r.say(fmt::format("= {:.2f} here (V = {}); without smoothing no finite gap is best. Cluster ratio: mean squared distance of a final decoder state",
                    s.eps > 0 ? optimum : INFINITY, V));
  r.say("to its label's mean state over the mean squared distance between two labels' means (labels with at least 10 training tokens), in the");
  r.say("span of the output layer's rows (the class templates: the directions a logit reads; Müller et al. project onto three templates' plane),");
  if (s.real) {  // no noise: every label is clean, and with V > d_model the templates span every direction
    r.say("on every training token: no noise is added to a real task, so every label is clean (the first and third ratios are one number), and");
    r.say("when V is above d_model the templates span every direction (so are the first two).");
    return;
  }
  r.say("on the training tokens whose label the noise left alone; also in every direction of the state, and on every training token by its");
  r.say("label as trained on (a replaced label puts a token in a class its input does not belong to; only memorising pulls it in).");
}

void add_figure(Report& r, const Settings& s, const Runs& runs) {
  // Reliability diagram: bins pooled over seeds.
  std::vector<ChartSeries> rel;
  for (int k = 0; k < 2; ++k) {
    const int bins = static_cast<int>(runs[0][k].end.held_out.count.size());
    ChartSeries c{fmt::format("eps {}", runs[0][k].eps), {}, {}, {}, {}, false, k ? kSmoothColor : kPlainColor};
    for (int b = 0; b < bins; ++b) {
      double n = 0, conf = 0, acc = 0;
      for (const auto& x : runs) {
        const Calibration& cal = x[k].end.held_out;
        if (!cal.count[b]) continue;
        n += static_cast<double>(cal.count[b]);
        conf += cal.bin_confidence[b] * static_cast<double>(cal.count[b]);
        acc += cal.bin_accuracy[b] * static_cast<double>(cal.count[b]);
      }
      if (n >= 20) c.x.push_back(conf / n), c.y.push_back(acc / n);  // bins with at least 20 tokens over the seeds
    }
    rel.push_back(c);
  }
  rel.push_back(ChartSeries{"calibrated", {0, 1}, {0, 1}, {}, {}, true, "#7f7f7f"});
  r.add_panel(Chart{"reliability: held-out accuracy against confidence (seeds pooled)", "confidence (15 bins)", "accuracy", false, false, rel,
                    {0, 0.2, 0.4, 0.6, 0.8, 1.0}, Chart::Corner::TopLeft});
  auto during = [&](bool over) {
    std::vector<ChartSeries> out;
    for (int k = 0; k < 2; ++k) {
      std::vector<std::vector<double>> rows;
      for (const auto& x : runs) rows.push_back(over ? x[k].probe_over : x[k].probe_ece);
      out.push_back(band_series(fmt::format("eps {}", runs[0][k].eps), runs[0][k].probe_steps, spread_per_column(rows), k ? kSmoothColor : kPlainColor));
    }
    return out;
  };
  r.add_panel(Chart{"held-out ECE during training (band: seeds)", "step", "ECE", false, false, during(false), {}, Chart::Corner::TopLeft});
  auto over = during(true);
  over.push_back(ChartSeries{"calibrated", {runs[0][0].probe_steps.front(), runs[0][0].probe_steps.back()}, {0, 0}, {}, {}, true, "#7f7f7f"});
  r.add_panel(Chart{"held-out confidence - accuracy during training (band: seeds)", "step", "overconfidence", false, false, over, {},
                    Chart::Corner::TopLeft});
  std::vector<double> x;
  for (size_t i = 0; i < runs.size(); ++i) x.push_back(static_cast<double>(r.seed(static_cast<int>(i))));
  r.add_panel(Chart{"eps / eps-0 ratios per seed (1: no change)", "seed", "ratio", false, false,
                    {ChartSeries{"logit gap on training tokens", x, ratio_column(runs, [](const Arm& a) { return a.end.gap_train; }), {}, {}, false, "#9467bd"},
                     ChartSeries{"cluster ratio", x, ratio_column(runs, [](const Arm& a) { return a.end.cluster; }), {}, {}, false, "#8c564b"},
                     ChartSeries{"no change", {x.front(), x.back()}, {1, 1}, {}, {}, true, "#7f7f7f"}},
                    x, Chart::Corner::TopRight});
  (void)s;
}

void check_claims(Report& r, const Runs& runs, const std::vector<double>& gap_trend) {
  std::vector<double> over, ece_diff;
  double loss_worst = 0;
  for (const auto& x : runs) {
    over.push_back(x[0].end.held_out.confidence - x[0].end.held_out.accuracy);
    ece_diff.push_back(x[1].end.held_out.ece - x[0].end.held_out.ece);
    loss_worst = std::max({loss_worst, x[0].loss_check, x[1].loss_check});
  }
  const auto cluster = ratio_column(runs, [](const Arm& a) { return a.end.cluster; });
  r.paper("baseline_overconfident", over, fmt::format("eps 0: held-out confidence - accuracy per seed: {:+.3f}", fmt::join(over, ", ")));
  r.paper("ece_lower", ece_diff, fmt::format("ECE(eps) - ECE(0) per seed: {:+.3f}", fmt::join(ece_diff, ", ")));
  r.paper("logit_gap_trend", gap_trend,
          fmt::format("slope of ln(logit gap on training tokens) on eps, per seed: {:.3f}", fmt::join(gap_trend, ", ")));
  r.paper("tighter_clusters", cluster, fmt::format("cluster ratio, eps / eps 0, per seed: {:.3f}", fmt::join(cluster, ", ")));
  r.check("smoothed_loss", loss_worst, fmt::format("largest |batch_loss - definition| / definition {:.3g} (float64)", loss_worst));
}

// The data of seed i: the copy task with noisy targets, and its clean training targets. With --data:
// the real task (the same for every seed), its first --eval test pairs held out, no noise added.
std::pair<IdData, std::vector<train::EncodedPair>> noisy_task(const Settings& s, uint64_t seed) {
  if (s.real) {
    IdData data = s.real->ids;
    if (data.test.size() > static_cast<size_t>(s.n_eval)) data.test.resize(static_cast<size_t>(s.n_eval));
    std::vector<train::EncodedPair> clean_train = data.train;
    return {std::move(data), std::move(clean_train)};
  }
  IdData data = synthetic_task("copy", s.symbols, s.min_len, s.max_len, s.n_train, s.n_eval, seed);
  std::vector<train::EncodedPair> clean_train = data.train;
  add_target_noise(data.train, s.symbols, s.noise, seed * 7919 + 1);
  add_target_noise(data.test, s.symbols, s.noise, seed * 7919 + 2);
  return {std::move(data), std::move(clean_train)};
}

// The eps levels of the dose-response (lab/report.h): 4 or more, increasing, from 0, below 1, --eps
// among them (its arm is the other claims' smoothed arm).
std::vector<double> eps_levels(Report& r, const Settings& s) {
  const std::vector<double> levels = parse_increasing_reals(r.text("eps-levels"), "lab smoothing: --eps-levels");
  GF_CHECK(levels.size() >= 4, "lab smoothing: --eps-levels needs 4 or more levels for the dose-response, got '{}'", r.text("eps-levels"));
  GF_CHECK(levels.front() == 0 && levels.back() < 1, "lab smoothing: --eps-levels must start at 0 and stay below 1, got '{}'", r.text("eps-levels"));
  GF_CHECK(std::find(levels.begin(), levels.end(), s.eps) != levels.end(), "lab smoothing: --eps {} must be one of --eps-levels '{}'", s.eps,
           r.text("eps-levels"));
  return levels;
}

// --data: BLEU on the validation split per eps level, beside Vaswani et al.'s (reported, not claimed).
void report_bleu(Report& r, const std::vector<double>& levels, const std::vector<std::vector<double>>& bleu, const Settings& s) {
  r.section(fmt::format("BLEU on the first {} validation sentences (greedy, sacreBLEU 13a), per eps level (mean [t 95% interval] over seeds)",
                        std::min<size_t>(static_cast<size_t>(s.n_eval), s.real->ids.valid.size())));
  // Vaswani et al. 2017, Table 3, rows (D) and base: the big EN-DE task's development set (newstest2013).
  const std::map<double, std::string> paper = {{0.0, "25.3 (PPL 4.67)"}, {0.1, "25.8 (PPL 4.92, the base model)"}, {0.2, "25.7 (PPL 5.47)"}};
  Table t("bleu", {"eps", "BLEU here", "per seed", "Vaswani et al. 2017, Table 3 (EN-DE newstest2013)"});
  for (size_t k = 0; k < levels.size(); ++k) {
    std::vector<double> v;
    for (const auto& row : bleu) v.push_back(row[k]);
    const auto it = paper.find(levels[k]);
    t.row({levels[k], with_interval(v, "{:.2f}"), fmt::format("{:.2f}", fmt::join(v, ", ")), it == paper.end() ? "-" : it->second});
  }
  r.print(t);
  r.say("Reported, not claimed. The paper's numbers are a 65M-parameter model's on WMT English-German: compare the direction, not the size.");
}

// --control: the placebo. A pool of eps-0 models, each on its own seed; every contrast between two
// groups of them (one group in eps 0's place, the other in the smoothed arm's), and the gap's trend
// with eps-0 models of different seeds in every level's place (the true trend is zero).
void placebo(Report& r, const Settings& s) {
  const std::vector<double> levels = eps_levels(r, s);
  const int k = static_cast<int>(levels.size());
  const int n = std::max(r.placebo_pool(), r.trend_placebo_pool(k));
  r.say(fmt::format("PLACEBO: {} models trained with eps 0 on seeds {}-{}; each contrast compares two groups of them, unpaired.", n, r.seed(0),
                    r.seed(n - 1)));
  std::vector<Arm> pool;
  for (int i = 0; i < n; ++i) {
    const auto [data, clean_train] = noisy_task(s, r.seed(i));
    pool.push_back(train_arm(s, data, clean_train, 0.0, r.seed(i)));
  }
  Table t("the pool: eps 0", {"seed", "confidence - accuracy", "ECE", "logit gap", "cluster ratio"});
  for (int i = 0; i < n; ++i) {
    const Measured& m = pool[i].end;
    t.row({static_cast<int64_t>(r.seed(i)), m.held_out.confidence - m.held_out.accuracy, m.held_out.ece, m.gap_train, m.cluster});
  }
  r.print(t);
  r.no_placebo("baseline_overconfident", "one arm's statistic (eps 0) against 0, no contrast between arms");
  const std::string how = "eps-0 model a in eps 0's place, b in the smoothed arm's";
  r.placebo("ece_lower", [&](int a, int b) { return pool[b].end.held_out.ece - pool[a].end.held_out.ece; }, how);
  r.placebo_trend("logit_gap_trend", k, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(std::log(pool[static_cast<size_t>(j)].end.gap_train));
    return trend(levels, y, TrendKind::Slope);
  }, fmt::format("eps-0 models of different seeds as eps {}", fmt::join(levels, ", ")));
  r.placebo("tighter_clusters", [&](int a, int b) { return pool[b].end.cluster / pool[a].end.cluster; }, how);
}

void run(Report& r) {
  Settings s{r.integer("symbols"), r.integer("min-len"), r.integer("max-len"),   r.integer("train"),      r.integer("eval"),
             r.integer("d-model"), r.integer("heads"),   r.integer("layers"),    r.integer("steps"),      r.integer("max-tokens"),
             r.integer("eval-every"), r.integer("feature-seqs"), r.real("lr"), r.real("noise"), r.real("eps")};
  GF_CHECK(s.eps > 0 && s.eps < 1, "lab smoothing: --eps must be in (0, 1), got {}", s.eps);
  GF_CHECK(s.noise >= 0 && s.noise < 1, "lab smoothing: --noise must be in [0, 1), got {}", s.noise);
  GF_CHECK(s.eval_every >= 1, "lab smoothing: --eval-every must be positive, got {}", s.eval_every);
  // The calibration curve is probed every eval_every steps; with fewer steps it would have no point.
  GF_CHECK(s.eval_every <= s.steps, "lab smoothing: --eval-every {} is more than --steps {}: no calibration probe would be taken",
           s.eval_every, s.steps);
  std::optional<RealData> real;
  if (uses_real_data(r)) real = real_data(r), s.real = &*real;
  s.vocab = real ? real->ids.tgt_vocab : 4 + s.symbols;
  if (r.placebo_mode()) return placebo(r, s);
  const double eps = s.eps;
  if (real) {
    r.say(fmt::format("the real task above, no noise added (its own ambiguity is the uncertainty); calibration on its first {} test pairs, BLEU on",
                      std::min<size_t>(static_cast<size_t>(s.n_eval), real->ids.test.size())));
    r.say(fmt::format("its first {} validation pairs. Post-LN, d_model {}, {} heads, {}+{} layers; {} steps of Adam at lr {} (warm-up {}),",
                      std::min<size_t>(static_cast<size_t>(s.n_eval), real->ids.valid.size()), s.d_model, s.heads, s.layers, s.layers, s.steps,
                      s.lr, s.steps / 10));
  } else {
    r.say(fmt::format("copy task over {} symbols, lengths {}-{}, each target token replaced by a random symbol with probability {} (training and held-out",
                      s.symbols, s.min_len, s.max_len, s.noise));
    r.say(fmt::format("alike): {} training and {} held-out sequences. Post-LN, d_model {}, {} heads, {}+{} layers; {} steps of Adam at lr {} (warm-up {}),",
                      s.n_train, s.n_eval, s.d_model, s.heads, s.layers, s.layers, s.steps, s.lr, s.steps / 10));
  }
  r.say(fmt::format("{} tokens a batch, the same batches for both arms: eps 0 and eps {}.", s.max_tokens, eps));
  const std::vector<double> levels = eps_levels(r, s);
  r.say(fmt::format("The dose-response: the same model, data and batches at eps {} (the ones not 0 or {} trained only for it).",
                    fmt::join(levels, ", "), eps));
  Runs runs;
  std::vector<std::vector<double>> ln_gap, ece, bleu;  // [seed][level]
  for (int i = 0; i < r.seeds(); ++i) {
    const auto [data, clean_train] = noisy_task(s, r.seed(i));
    runs.push_back({train_arm(s, data, clean_train, 0.0, r.seed(i)), train_arm(s, data, clean_train, eps, r.seed(i))});
    ln_gap.emplace_back(), ece.emplace_back(), bleu.emplace_back();
    for (double level : levels) {
      const Arm extra = level == 0 || level == eps ? Arm{} : train_arm(s, data, clean_train, level, r.seed(i));
      const Arm& a = level == 0 ? runs.back()[0] : level == eps ? runs.back()[1] : extra;
      ln_gap.back().push_back(std::log(a.end.gap_train)), ece.back().push_back(a.end.held_out.ece), bleu.back().push_back(a.bleu);
    }
  }
  report(r, s, runs);
  add_figure(r, s, runs);
  r.section("dose-response: the logit gap on training tokens against eps (mean and 95% t interval over seeds)");
  const std::vector<Spread> ece_at = spread_per_column(ece);
  Table lv("levels", {"eps", "held-out ECE", "logit gap (geometric mean)", "the loss's optimum gap"});
  const int64_t V = s.vocab;
  const std::vector<Spread> gap_at = spread_per_column(ln_gap);
  for (size_t k = 0; k < levels.size(); ++k) {
    const double e = levels[k], optimum = e > 0 ? std::log((1 - e + e / static_cast<double>(V)) / (e / static_cast<double>(V))) : INFINITY;
    lv.row({e, ece_at[k].mean, std::exp(gap_at[k].mean), optimum});
  }
  r.print(lv);
  if (real) report_bleu(r, levels, bleu, s);
  // Slope, not per doubling: eps starts at 0, which has no log; ln(gap) since the gap changes by factors.
  const std::vector<double> gap_trend =
      r.dose_response({"eps", "label smoothing eps", "ln logit gap, training tokens", levels, ln_gap, TrendKind::Slope, false, kSmoothColor});
  auto& d = r.data();
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& a : runs[i])
      d["runs"].push_back({{"seed", r.seed(static_cast<int>(i))},
                           {"eps", a.eps},
                           {"losses", a.fit.losses},
                           {"ece", a.end.held_out.ece},
                           {"confidence", a.end.held_out.confidence},
                           {"accuracy", a.end.held_out.accuracy},
                           {"nll", a.end.nll},
                           {"gap_train", a.end.gap_train},
                           {"gap_held_out", a.end.gap_held_out},
                           {"cluster_ratio", a.end.cluster},
                           {"cluster_ratio_every_direction", a.end.cluster_raw},
                           {"cluster_ratio_every_label", a.end.cluster_all},
                           {"bin_count", a.end.held_out.count},
                           {"probe_steps", a.probe_steps},
                           {"probe_ece", a.probe_ece}});
  d["levels"] = {{"eps", levels}, {"ln_gap_train", ln_gap}, {"ece", ece}};
  if (real) d["levels"]["bleu_valid"] = bleu;
  check_claims(r, runs, gap_trend);
}

}  // namespace

Lab smoothing_lab() {
  Lab l;
  l.name = "smoothing";
  l.title = "label smoothing: calibration, the logit gap and the penultimate clusters";
  l.reference = "Müller, Kornblith and Hinton 2019, arXiv:1906.02629 (Sections 2 and 3, Figures 1 and 2)";
  l.question = "On a task with noise no model can predict, trained until it memorises its training set, does label smoothing lower the expected "
               "calibration error, bound the logit gap and tighten the penultimate layer's clusters?";
  l.control = "placebo: two groups of seeds of the eps-0 model; eps-0 models in every eps level's place";
  l.placebo = true;
  l.default_seeds = 5;
  l.options = {{"symbols", Option::Int, "16", "symbols in the task's alphabet"},
               {"min-len", Option::Int, "4", "shortest sequence"},
               {"max-len", Option::Int, "10", "longest sequence"},
               {"train", Option::Int, "600", "training sequences"},
               {"eval", Option::Int, "300", "held-out sequences"},
               {"noise", Option::Real, "0.2", "probability that a target token is replaced by a random symbol"},
               {"eps", Option::Real, "0.1", "label smoothing of the second arm"},
               {"eps-levels", Option::Text, "0,0.05,0.1,0.2", "the eps levels of the dose-response (4 or more, from 0; --eps among them)"},
               {"d-model", Option::Int, "64", "model width (FFN 4x)"},
               {"heads", Option::Int, "4", "attention heads"},
               {"layers", Option::Int, "2", "encoder and decoder layers each"},
               {"steps", Option::Int, "400", "training steps per arm"},
               {"lr", Option::Real, "0.002", "Adam learning rate (10% linear warm-up)"},
               {"max-tokens", Option::Int, "512", "padded tokens per batch"},
               {"eval-every", Option::Int, "50", "steps between held-out calibration probes"},
               {"feature-seqs", Option::Int, "300", "training sequences whose tokens give the logit gap and the clusters"}};
  add_real_data_options(l.options);  // --data: a real translation task in place of the noisy copy task (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

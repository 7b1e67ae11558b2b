// The measurements behind lab `smoothing` (lab/labs/smoothing.cpp): calibration, the cluster ratio
// in the templates' span, label smoothing's definition, the target noise, and one model trained and
// measured.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "autograd/grad_mode.h"
#include "lab/real_data.h"
#include "lab/smoothing.h"
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

}  // namespace

SmoothingMeasures smoothing_measures(const nn::Seq2SeqTransformer& model, const IdData& data, const std::vector<train::EncodedPair>& clean_train,
                                     size_t feature_seqs) {
  SmoothingMeasures m;
  const Tokens held = tokens_of(model, data.test, data.test.size(), false);
  m.held_out = held_out_calibration(held, &m.nll);
  m.gap_held_out = mean_of(held.gap);
  const Tokens train = tokens_of(model, data.train, feature_seqs, true, &clean_train);
  m.gap_train = mean_of(train.gap);
  const auto [features, labels] = clean_tokens(train);
  const Tensor templates = model.out->weight.data();  // (V, D): every class's template
  m.cluster = cluster_ratio(template_coordinates(features, templates), labels, 10);
  m.cluster_raw = cluster_ratio(features, labels, 10);
  m.cluster_all = cluster_ratio(template_coordinates(train.states, templates), train.labels, 10);
  return m;
}

SmoothingRun train_smoothing(const SmoothingTraining& t, const IdData& data, const std::vector<train::EncodedPair>& clean_train) {
  SmoothingRun a;
  nn::Seq2SeqTransformer model(t.shape, t.fit.seed);
  a.losses = fit(model, data.train, t.fit, [&](int64_t step, double) {
    if (t.probe_every == 0 || step % t.probe_every != 0) return;
    double nll = 0;
    const Calibration c = held_out_calibration(tokens_of(model, data.test, data.test.size(), false), &nll);  // no dropout: train mode = eval mode
    a.probe_steps.push_back(static_cast<double>(step)), a.probe_ece.push_back(c.ece), a.probe_over.push_back(c.confidence - c.accuracy);
  }).losses;
  model.eval();
  a.end = smoothing_measures(model, data, clean_train, t.feature_seqs);
  // The loss the model trained on, against label smoothing's definition, in float64.
  nn::Seq2SeqTransformer copy(model.options(), 1);
  copy.to(DType::Float64);
  copy.load_state_dict(model.state_dict());
  copy.eval();
  std::vector<size_t> part;
  for (size_t i = 0; i < std::min<size_t>(64, data.test.size()); ++i) part.push_back(i);
  const train::BatchTensors b = train::to_tensors(train::collate(data.test, part));
  NoGradGuard ng;
  const double eps = t.fit.label_smoothing;
  const double library = train::batch_loss(copy, b, eps).item();
  const Tensor z = copy.forward(b.src, b.tgt_in).data();  // (B, T, V)
  const double definition = smoothed_cross_entropy(z.reshape({-1, z.size(2)}), b.labels.to_vector<int64_t>(), eps, train::Vocab::kPad);
  a.loss_check = std::abs(library - definition) / definition;
  if (t.real) a.bleu = greedy_bleu(model, *t.real, t.real->ids.valid, t.real->valid_refs, t.bleu_pairs).score;
  return a;
}

void to_json(nlohmann::json& j, const SmoothingRun& r) {
  const SmoothingMeasures& m = r.end;
  j = {{"losses", r.losses},
       {"ece", m.held_out.ece},
       {"confidence", m.held_out.confidence},
       {"accuracy", m.held_out.accuracy},
       {"nll", m.nll},
       {"gap_train", m.gap_train},
       {"gap_held_out", m.gap_held_out},
       {"cluster_ratio", m.cluster},
       {"cluster_ratio_every_direction", m.cluster_raw},
       {"cluster_ratio_every_label", m.cluster_all},
       {"bin_count", m.held_out.count},
       {"probe_steps", r.probe_steps},
       {"probe_ece", r.probe_ece},
       {"loss_check", r.loss_check}};
  if (!std::isnan(r.bleu)) j["bleu_valid"] = r.bleu;
}

}  // namespace gf::lab

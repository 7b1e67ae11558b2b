// Lab `attribution`'s measurement of one trained translator (declared in lab/attribution.h): the
// maps of train/inspect/ on its own translations, their agreement, and counterfactual attention.
#include "lab/attribution.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/stats.h"
#include "tensor/kernels/random.h"
#include "train/decode/decode.h"
#include "train/inspect/attribution.h"

namespace gf::lab::attribution {

Map row_normalised(const Map& m) {
  Map r = m;
  for (auto& row : r) {
    double s = 0;
    for (double v : row) s += v;
    for (double& v : row) v = s > 0 ? v / s : 0;
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) { return v.empty() ? NAN : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

namespace {

using train::inspect::abs_map;
using train::inspect::attention_rollout;
using train::inspect::attribution_maps;
using train::inspect::AttributionMaps;
using train::inspect::head_mean;
using train::inspect::integrated_gradients;
using train::inspect::IntegratedGradients;
using train::inspect::leave_one_out;
using train::inspect::output_distributions;
using train::inspect::source_embeddings;
using train::inspect::total_variation;

// A rank correlation (Spearman's rho or Kendall's tau) of a's and b's rows, averaged over rows. A
// constant row ranks nothing and counts as 0 (a uniform map agrees with no ranking); NaN only for no rows.
double row_correlation(const Map& a, const Map& b, double (*correlation)(const std::vector<double>&, const std::vector<double>&)) {
  double sum = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    const double rho = correlation(a[t], b[t]);
    sum += std::isfinite(rho) ? rho : 0.0;
  }
  return a.empty() ? NAN : sum / static_cast<double>(a.size());
}
double row_spearman(const Map& a, const Map& b) { return row_correlation(a, b, spearman); }
double row_kendall(const Map& a, const Map& b) { return row_correlation(a, b, kendall_tau); }

// ---------------------------------------------------------------- attention transforms

// Installs a transform on every decoder layer's cross-attention while alive.
class CrossTransform {
 public:
  CrossTransform(const nn::Seq2SeqTransformer& model, std::function<Variable(const Variable&)> f) : model_(model) {
    for (auto& layer : *model.transformer->decoder->layers) layer->multihead_attn->weights_transform = f;
  }
  ~CrossTransform() {
    for (auto& layer : *model_.transformer->decoder->layers) layer->multihead_attn->weights_transform = nullptr;
  }
  CrossTransform(const CrossTransform&) = delete;
  CrossTransform& operator=(const CrossTransform&) = delete;

 private:
  const nn::Seq2SeqTransformer& model_;
};

// Weights (B, H, L, S) made uniform over the keys (no padding here: one unpadded source per row).
Variable uniform_weights(const Variable& w) { return Variable(Tensor::full(w.shape(), 1.0 / static_cast<double>(w.size(3)), w.dtype())); }

// Weights (B, H, L, S) with every (row, head, query) row shuffled over the keys by gen.
Variable permuted_weights(const Variable& w, Generator& gen) {
  const Tensor in = w.data().contiguous();  // (B, H, L, S)
  const int64_t S = in.size(3), rows = in.numel() / S;
  Tensor out = in.clone();
  std::vector<int64_t> perm(static_cast<size_t>(S));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = S - 1; i > 0; --i) std::swap(perm[i], perm[static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(i + 1)))]);
    for (int64_t s = 0; s < S; ++s) out.flat_set(r * S + s, in.flat_get(r * S + perm[s]));
  }
  return Variable(out);
}

// ---------------------------------------------------------------- one sentence

// The counterfactual distance: mean over output tokens of the next-token distributions' total
// variation distance, the model as it runs against the model with `f` on its cross-attention.
double counterfactual_tv(const nn::Seq2SeqTransformer& model, const Tensor& xb, const std::vector<int64_t>& out, const Map& factual,
                         const std::function<Variable(const Variable&)>& f) {
  CrossTransform on(model, f);
  const std::vector<Map> cf = output_distributions(model, xb, out);  // [row][t] (V)
  std::vector<double> per_row;
  for (const Map& row : cf) {
    double s = 0;
    for (size_t t = 0; t < row.size(); ++t) s += total_variation(factual[t], row[t]);
    per_row.push_back(s / static_cast<double>(row.size()));
  }
  return median(per_row);
}

Sentence study(const nn::Seq2SeqTransformer& model, std::vector<int64_t> src, std::vector<int64_t> out, const StudyOptions& st, uint64_t seed) {
  Sentence s;
  out.push_back(train::Vocab::kEos);
  // The model as it runs in this protocol: its own attention, or (control) uniform cross-attention.
  std::unique_ptr<CrossTransform> base;
  if (st.uniform) base = std::make_unique<CrossTransform>(model, uniform_weights);
  const AttributionMaps am = attribution_maps(model, src, out);
  std::vector<Map> enc, dec, cross;
  for (const auto& l : am.enc_self) enc.push_back(head_mean(l));
  for (const auto& l : am.dec_self) dec.push_back(head_mean(l));
  for (const auto& l : am.cross) cross.push_back(head_mean(l));
  s.maps[kAtt] = cross.back();
  s.maps[kGxi] = abs_map(am.grad_dot);
  s.maps[kLoo] = leave_one_out(model, src, out);
  const IntegratedGradients ig = integrated_gradients(model, src, out, st.ig_steps);
  s.maps[kIg] = abs_map(ig.ig);
  for (size_t t = 0; t < ig.ig.size(); ++t) {
    double sum = 0;
    for (double v : ig.ig[t]) sum += v;
    s.ig_sum_error.push_back(std::abs(sum - ig.endpoints[t]));
    s.ig_endpoint.push_back(std::abs(ig.endpoints[t]));
  }
  s.all_layers = head_mean(cross);
  s.rollout = attention_rollout(enc, dec, cross).source;
  for (int a = 0; a < kMaps; ++a)
    for (int b = 0; b < kMaps; ++b) {
      s.rho[a][b] = a == b ? 1.0 : row_spearman(s.maps[a], s.maps[b]);
      s.tau[a][b] = a == b ? 1.0 : row_kendall(s.maps[a], s.maps[b]);
    }
  for (int m = 1; m < kMaps; ++m) s.rho_all_layers[m] = row_spearman(s.all_layers, s.maps[m]), s.rho_rollout[m] = row_spearman(s.rollout, s.maps[m]);
  // Counterfactuals, on top of the attention the model runs with in this protocol.
  const Tensor x1 = source_embeddings(model, src);  // (S, D)
  const int64_t S = x1.size(0), D = x1.size(1);
  const Map factual = output_distributions(model, x1.reshape({1, S, D}), out).at(0);  // (T, V)
  const auto as_run = [&](const Variable& w) { return st.uniform ? uniform_weights(w) : w; };
  Generator gen(seed);
  base.reset();  // the counterfactual transforms below include the protocol's own
  const Tensor xp = x1.reshape({1, S, D}).expand({st.permutations, S, D}).contiguous();  // (P, S, D): one draw per row
  s.permuted_tv = counterfactual_tv(model, xp, out, factual, [&](const Variable& w) { return permuted_weights(as_run(w), gen); });
  s.uniform_tv = counterfactual_tv(model, x1.reshape({1, S, D}), out, factual, [&](const Variable& w) { return uniform_weights(as_run(w)); });
  s.src = std::move(src), s.out = std::move(out);
  return s;
}

// Greedy translations of the first n test sources, batched (no graph; the model's own attention), each
// at most its source's length + max_extra tokens: a barely trained model may not stop, and every
// output token costs the study a row of each map.
std::vector<std::vector<int64_t>> translations(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& test, size_t n,
                                               int64_t max_extra) {
  std::vector<std::vector<int64_t>> out;
  train::DecodeOptions o;
  o.max_extra = max_extra;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    train::Batch b = train::collate(test, part);
    Tensor src = Tensor::from_vector(b.src, {b.rows, b.src_len});  // (B, S)
    for (auto& y : train::translate_batch(model, src, o)) out.push_back(std::move(y));
  }
  return out;
}

}  // namespace

SeedStudy study_model(const TrainedModel& tm, size_t n, const StudyOptions& st, uint64_t seed) {
  SeedStudy res;
  const nn::Seq2SeqTransformer& model = *tm.model;
  const auto outs = translations(model, tm.test, n, st.max_extra);
  res.tf_accuracy = teacher_forced(model, tm.test, n).accuracy;
  for (size_t i = 0; i < n; ++i) res.sentences.push_back(study(model, tm.test[i].src, outs[i], st, seed * 1000003ULL + i));
  auto avg = [&](auto f) {
    std::vector<double> v;
    for (const Sentence& s : res.sentences) v.push_back(f(s));
    return mean(v);
  };
  for (int a = 0; a < kMaps; ++a)
    for (int b = 0; b < kMaps; ++b) {
      res.rho[a][b] = avg([&](const Sentence& s) { return s.rho[a][b]; });
      res.tau[a][b] = avg([&](const Sentence& s) { return s.tau[a][b]; });
    }
  for (int m = 1; m < kMaps; ++m) {
    res.rho_all_layers[m] = avg([&](const Sentence& s) { return s.rho_all_layers[m]; });
    res.rho_rollout[m] = avg([&](const Sentence& s) { return s.rho_rollout[m]; });
    double others = 0, others_tau = 0;
    for (int o = 1; o < kMaps; ++o)
      if (o != m) others += res.rho[m][o] / (kMaps - 2), others_tau += res.tau[m][o] / (kMaps - 2);
    res.methods_agree[m] = others - res.rho[kAtt][m];
    res.methods_agree_tau[m] = others_tau - res.tau[kAtt][m];
    res.attention_agrees += res.rho[kAtt][m] / (kMaps - 1);
  }
  res.permuted_tv = avg([](const Sentence& s) { return s.permuted_tv; });
  res.uniform_tv = avg([](const Sentence& s) { return s.uniform_tv; });
  return res;
}

}  // namespace gf::lab::attribution

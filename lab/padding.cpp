// Lab `padding`: what the padding masks and ignore_index are for.
//
// A batch pads every sentence to the longest one. The source padding mask keeps PAD out of the
// encoder's and the cross-attention's keys, the target padding mask keeps it out of the decoder's
// self-attention keys, and cross_entropy(ignore_index = PAD) keeps PAD labels out of the loss.
// With all three, a sentence computes the same thing alone and inside any batch.
//
// Here, on the built-in English -> Korean corpus:
//  1. a short sentence alone and as row 0 of a batch with the longest ones, in float64: the largest
//     difference of encoder output, logits, every attention map and every parameter gradient of
//     that sentence's loss, with the masks, and with each padding mask switched off;
//  2. the gradient of a batch's loss that reaches the PAD positions of the encoder's and the
//     decoder's input (exactly 0 when masked);
//  3. with ignore_index off (-100 instead of PAD), the share of the loss and of the gradient that PAD
//     labels carry, for random batches against length-bucketed ones (train::bucket_by_length);
//  4. a dose-response (lab/report.h) on the padded length: the short sentence of part 1 alone and
//     padded with PAD to each source length of --lengths, without the masks; the claim is the trend
//     of the logits' difference per doubling of the length.
// --control is a placebo (initialised models of different seeds, each padded to one length, in every
// length's place); --ablate keeps both padding masks on in every arm.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "nn/masks.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

// ---------------------------------------------------------------- 1. alone against in a batch

// What one forward and backward of a batch computes, for row 0.
struct Pass {
  Tensor memory;                 // (B, S, D) encoder output
  Tensor logits;                 // (B, T, V)
  std::vector<Tensor> weights;   // per attention call, (B, H, L, S)
  std::vector<Tensor> grads;     // per parameter, the gradient of row 0's loss
  Tensor src_emb_grad, tgt_emb_grad;  // (B, S, D), (B, T, D): d loss / d encoder and decoder input
};

// forward as Seq2SeqTransformer::forward does it (the masks as model.masks says), with the encoder
// output and the embeddings kept; loss: cross-entropy over the rows in `rows` (others ignored).
Pass run_pass(nn::Seq2SeqTransformer& model, const train::Batch& b, const std::vector<int64_t>& rows) {
  const std::vector<nn::MultiheadAttention*> attn = attention_modules(model);
  Pass p;
  for (auto* a : attn) a->weights_observer = [&p](const Variable& w) { p.weights.push_back(w.data()); };
  train::BatchTensors t = train::to_tensors(b);
  const int64_t pad = model.options().pad;
  Tensor src_pad = model.masks.source_padding ? nn::make_pad_mask(t.src, pad) : Tensor();     // (B, S)
  Tensor tgt_pad = model.masks.target_padding ? nn::make_pad_mask(t.tgt_in, pad) : Tensor();  // (B, T)
  Tensor causal = model.masks.causal ? nn::make_causal_mask(t.tgt_in.size(1)) : Tensor();    // (T, T)
  Variable es = model.embed_src(t.src);     // (B, S, D)
  Variable et = model.embed_tgt(t.tgt_in);  // (B, T, D)
  es.retain_grad(), et.retain_grad();
  Variable memory = model.transformer->encoder->forward(es, src_pad);  // (B, S, D)
  Variable logits = model.project(model.transformer->decoder->forward(et, memory, causal, tgt_pad, src_pad).output);  // (B, T, V)
  // Labels of rows not asked for become PAD, so the loss is exactly the chosen rows' mean.
  Tensor labels = t.labels.clone();  // (B*T)
  const int64_t T = t.tgt_in.size(1);
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (std::find(rows.begin(), rows.end(), i / T) == rows.end()) labels.flat_set(i, static_cast<double>(pad));
  Variable loss = cross_entropy(reshape(logits, {-1, logits.size(2)}), labels, pad);  // ()
  model.zero_grad();
  loss.backward();
  for (auto* a : attn) a->weights_observer = nullptr;
  p.memory = memory.data(), p.logits = logits.data();
  for (const auto& v : model.parameters()) p.grads.push_back(v.grad().defined() ? v.grad().clone() : Tensor::zeros(v.shape(), v.dtype()));
  p.src_emb_grad = es.grad(), p.tgt_emb_grad = et.grad();
  return p;
}

// Largest |a - b| over the leading block of row 0 that `a` (batch of one) covers, relative to max |a|.
struct Diff {
  double abs = 0, rel = 0;
};
Diff diff_row0(const Tensor& alone, const Tensor& batch) {
  Tensor b = batch.narrow(0, 0, 1);  // (1, ...)
  for (int d = 1; d < alone.ndim(); ++d) b = b.narrow(d, 0, alone.size(d));
  Tensor a = alone.contiguous(), bc = b.contiguous();  // (1, ...) each, the same shape
  Diff r;
  double scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    r.abs = std::max(r.abs, std::abs(a.flat_get(i) - bc.flat_get(i)));
    scale = std::max(scale, std::abs(a.flat_get(i)));
  }
  r.rel = scale > 0 ? r.abs / scale : r.abs;
  return r;
}
Diff worst(const Diff& a, const Diff& b) { return {std::max(a.abs, b.abs), std::max(a.rel, b.rel)}; }

struct Comparison {
  Diff memory, logits, weights, grads;
  double pad_weight = 0;  // largest attention weight row 0's real queries give to PAD keys, in the batch
};

// Row 0's attention to keys beyond its own length (PAD keys) in the batch.
double pad_weight(const Tensor& batch_w, int64_t real_queries, int64_t real_keys) {
  const int64_t S = batch_w.size(3);
  if (real_keys >= S) return 0;
  return max_abs(batch_w.narrow(0, 0, 1).narrow(2, 0, real_queries).narrow(3, real_keys, S - real_keys));
}

Comparison compare(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, const std::vector<size_t>& batch_rows) {
  const Pass alone = run_pass(model, train::collate(pairs, std::vector<size_t>{batch_rows[0]}), {0});
  const Pass in_batch = run_pass(model, train::collate(pairs, batch_rows), {0});
  Comparison c;
  c.memory = diff_row0(alone.memory, in_batch.memory);
  c.logits = diff_row0(alone.logits, in_batch.logits);
  for (size_t i = 0; i < alone.weights.size(); ++i) {
    c.weights = worst(c.weights, diff_row0(alone.weights[i], in_batch.weights[i]));
    c.pad_weight = std::max(c.pad_weight, pad_weight(in_batch.weights[i], alone.weights[i].size(2), alone.weights[i].size(3)));
  }
  // Parameter gradients have no batch dim: compare whole tensors, relative to the largest entry.
  double worst_abs = 0, scale = 0;
  for (size_t i = 0; i < alone.grads.size(); ++i) {
    scale = std::max(scale, max_abs(alone.grads[i]));
    for (int64_t k = 0; k < alone.grads[i].numel(); ++k)
      worst_abs = std::max(worst_abs, std::abs(alone.grads[i].flat_get(k) - in_batch.grads[i].flat_get(k)));
  }
  c.grads = {worst_abs, scale > 0 ? worst_abs / scale : worst_abs};
  return c;
}

// ---------------------------------------------------------------- 2. gradient at PAD positions

struct PadGradient {
  double src_pad = 0, src_real = 0;  // largest |d loss / d encoder input| at PAD and at real source positions
  double tgt_pad = 0, tgt_real = 0;  // the same for the decoder input
  std::vector<std::vector<double>> src_map;  // (B, S): |d loss / d encoder input| per source position
};

PadGradient pad_gradient(nn::Seq2SeqTransformer& model, const train::Batch& b) {
  std::vector<int64_t> all(static_cast<size_t>(b.rows));
  std::iota(all.begin(), all.end(), 0);
  const Pass p = run_pass(model, b, all);
  train::BatchTensors t = train::to_tensors(b);
  PadGradient g;
  auto split = [](const Tensor& ids, const Tensor& grad, double& at_pad, double& at_real) {
    const int64_t D = grad.size(2);
    const Tensor gc = grad.contiguous();  // (B, len, D)
    for (int64_t i = 0; i < ids.numel(); ++i) {
      double& slot = ids.flat_get(i) == train::Vocab::kPad ? at_pad : at_real;
      for (int64_t d = 0; d < D; ++d) slot = std::max(slot, std::abs(gc.flat_get(i * D + d)));
    }
  };
  split(t.src, p.src_emb_grad, g.src_pad, g.src_real);
  const int64_t B = t.src.size(0), S = t.src.size(1);
  for (int64_t row = 0; row < B; ++row) {
    g.src_map.emplace_back();
    for (int64_t s = 0; s < S; ++s) g.src_map.back().push_back(l2_norm(p.src_emb_grad.select(0, row).select(0, s)));
  }
  split(t.tgt_in, p.tgt_emb_grad, g.tgt_pad, g.tgt_real);
  return g;
}

// ---------------------------------------------------------------- 3. PAD labels without ignore_index

// A random split with the same token budget as bucket_by_length: shuffle, then cut greedily so
// that rows * (longest source + longest target + 2) <= max_tokens.
std::vector<std::vector<size_t>> random_batches(const std::vector<train::EncodedPair>& pairs, int64_t max_tokens, uint64_t seed) {
  std::vector<size_t> idx(pairs.size());
  std::iota(idx.begin(), idx.end(), 0);
  train::seeded_shuffle(idx, seed);
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> cur;
  int64_t ls = 0, lt = 0;
  for (size_t i : idx) {
    const int64_t s = static_cast<int64_t>(pairs[i].src.size()), t = static_cast<int64_t>(pairs[i].tgt.size()) + 2;
    const int64_t ns = std::max(ls, s), nt = std::max(lt, t);
    if (!cur.empty() && static_cast<int64_t>(cur.size() + 1) * (ns + nt) > max_tokens) {
      out.push_back(std::move(cur));
      cur.clear();
      ls = s, lt = t;
    } else {
      ls = ns, lt = nt;
    }
    cur.push_back(i);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

struct PadShare {
  int64_t labels = 0, pad_labels = 0;
  double loss_share = 0;      // PAD labels' part of the summed loss, ignore_index off
  double grad_share = 0;      // |gradient of the PAD labels' terms| / (that + |gradient of the real labels' terms|)
  double ignored_grad = 0;    // with ignore_index = PAD: |(loss, gradient) - (the real labels' loss, gradient)|, exactly 0
};

double grad_norm(const std::vector<Variable>& params) {
  double s = 0;
  for (const auto& p : params) s += std::pow(l2_norm(p.grad()), 2);
  return std::sqrt(s);
}

// Summed cross-entropy of the PAD labels and of the real ones, each backward on its own.
PadShare pad_share(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, const std::vector<std::vector<size_t>>& plan,
                   size_t limit) {
  const std::vector<Variable> params = model.parameters();
  double pad_loss = 0, all_loss = 0, pad_g = 0, real_g = 0, ignored = 0;
  PadShare r;
  for (size_t k = 0; k < std::min(limit, plan.size()); ++k) {
    train::BatchTensors t = train::to_tensors(train::collate(pairs, plan[k]));
    Variable logits = model.forward(t.src, t.tgt_in);                     // (B, T, V)
    Variable flat = reshape(logits, {-1, logits.size(2)});                // (B*T, V)
    Tensor pad_only = t.labels.clone(), real_only = t.labels.clone();     // (B*T)
    int64_t n_pad = 0;
    for (int64_t i = 0; i < t.labels.numel(); ++i) {
      const bool is_pad = t.labels.flat_get(i) == train::Vocab::kPad;
      n_pad += is_pad;
      (is_pad ? real_only : pad_only).flat_set(i, -100);  // -100: ignored
    }
    const int64_t n = t.labels.numel();
    r.labels += n, r.pad_labels += n_pad;
    // Mean over the kept labels times their count = the sum, the terms a mean over all labels adds up.
    Variable lp = cross_entropy(flat, pad_only, -100) * static_cast<double>(n_pad);           // ()
    Variable lr = cross_entropy(flat, real_only, -100) * static_cast<double>(n - n_pad);      // ()
    // The loss as trained, ignore_index = PAD: what is left of it beyond the real labels' terms is
    // what the PAD labels carry then.
    Variable li = cross_entropy(flat, t.labels, train::Vocab::kPad) * static_cast<double>(n - n_pad);  // ()
    pad_loss += lp.item(), all_loss += lp.item() + lr.item();
    model.zero_grad();
    lp.backward(true);
    pad_g += grad_norm(params);
    model.zero_grad();
    lr.backward(true);
    real_g += grad_norm(params);
    std::vector<Tensor> real_grads;
    for (const auto& v : params) real_grads.push_back(v.grad().defined() ? v.grad().clone() : Tensor());
    model.zero_grad();
    li.backward();
    double d2 = std::pow(li.item() - lr.item(), 2);  // loss and gradient entries together: all must vanish
    for (size_t j = 0; j < params.size(); ++j)
      for (int64_t e = 0; real_grads[j].defined() && e < real_grads[j].numel(); ++e)
        d2 += std::pow(params[j].grad().flat_get(e) - real_grads[j].flat_get(e), 2);
    ignored = std::max(ignored, std::sqrt(d2));
  }
  model.zero_grad();
  r.loss_share = all_loss > 0 ? pad_loss / all_loss : 0;
  r.grad_share = pad_g + real_g > 0 ? pad_g / (pad_g + real_g) : 0;
  r.ignored_grad = ignored;
  return r;
}

// ---------------------------------------------------------------- 4. the padded length

// A relative difference at float64's rounding reads "none": floored at the tolerance of the masked
// check (masked_alone_equals_batch). With the masks the difference is exactly 0 at some lengths and
// about 1e-16 at others (sums over more, masked, keys), which unfloored would make a trend of rounding.
constexpr double kDiffFloor = 1e-12;

// log10 of the relative difference of the logits of pair `idx` padded with PAD to `len` source
// tokens against `alone`, the pair's logits alone, in float64, with the padding masks as
// `model.masks` says.
double padded_log_diff(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t idx, int64_t len, const Tensor& alone) {
  train::Batch padded = train::collate(pairs, std::vector<size_t>{idx});  // one row: appending PAD ids pads its source
  padded.src.resize(static_cast<size_t>(len), train::Vocab::kPad);
  padded.src_len = len;
  return std::log10(std::max(diff_row0(alone, run_pass(model, padded, {0}).logits).rel, kDiffFloor));
}

// The padded lengths of the dose-response: 4 or more, increasing, above the longest source the lab
// pads (`shortest`) and within the model's positions.
std::vector<double> length_levels(const Report& r, int64_t shortest, int64_t max_len) {
  const std::vector<int64_t> lengths = parse_increasing_ints(r.text("lengths"), "lab padding: --lengths");
  GF_CHECK(lengths.size() >= 4, "lab padding: --lengths needs 4 or more padded lengths for the dose-response, got '{}'", r.text("lengths"));
  GF_CHECK(lengths.front() > shortest && lengths.back() <= max_len,
           "lab padding: --lengths must lie above the padded sentences' longest source ({} tokens) and at most at the model's {} positions, "
           "got '{}'", shortest, max_len, r.text("lengths"));
  return std::vector<double>(lengths.begin(), lengths.end());
}

// The pairs by length, shortest first (source, then target): seed i pads the i-th.
std::vector<size_t> by_length(const IdData& data) {
  std::vector<size_t> by_len(data.train.size());
  std::iota(by_len.begin(), by_len.end(), 0);
  std::stable_sort(by_len.begin(), by_len.end(), [&](size_t a, size_t b) {
    return std::pair(data.train[a].src.size(), data.train[a].tgt.size()) < std::pair(data.train[b].src.size(), data.train[b].tgt.size());
  });
  return by_len;
}

// The longest source among the pairs the first `n` seeds pad.
int64_t longest_padded(const IdData& data, const std::vector<size_t>& by_len, int n) {
  int64_t m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<int64_t>(data.train[by_len[static_cast<size_t>(i) % by_len.size()]].src.size()));
  return m;
}

nn::Seq2SeqOptions lab_model(Report& r, const IdData& data);

// Seed `seed`'s initialised model (float64), its i-th shortest pair padded to each length.
std::vector<double> padded_diffs(Report& r, const IdData& data, const std::vector<size_t>& by_len, int i, uint64_t seed,
                                 const std::vector<double>& lengths, bool masked) {
  nn::Seq2SeqTransformer model(lab_model(r, data), seed);
  model.to(DType::Float64);
  model.eval();
  model.masks.source_padding = model.masks.target_padding = masked;
  const size_t idx = by_len[static_cast<size_t>(i) % by_len.size()];
  const Tensor alone = run_pass(model, train::collate(data.train, std::vector<size_t>{idx}), {0}).logits;  // (1, T, V)
  std::vector<double> out;
  for (double len : lengths) out.push_back(padded_log_diff(model, data.train, idx, static_cast<int64_t>(len), alone));
  return out;
}

// Section 4: per seed, the short sentence of section 1 padded to every length; the trend per seed.
std::vector<double> padded_length_section(Report& r, const IdData& data) {
  const std::vector<size_t> by_len = by_length(data);
  const std::vector<double> lengths = length_levels(r, longest_padded(data, by_len, r.seeds()), 256);
  r.section(fmt::format("4. the padded length: each seed's sentence of part 1 alone and padded with PAD to {} source tokens, {} (float64)",
                        fmt::join(lengths, ", "), r.ablate() ? "both padding masks on (ablation)" : "no padding masks"));
  std::vector<std::vector<double>> per_seed;
  for (int i = 0; i < r.seeds(); ++i) per_seed.push_back(padded_diffs(r, data, by_len, i, r.seed(i), lengths, r.ablate()));
  r.say(fmt::format("the statistic: log10 of the logits' largest |difference| / largest |value|, padded against alone (floored at {:g}: none).",
                    kDiffFloor));
  return r.dose_response({"padded length", "padded source length", "log10 relative logits difference, padded vs alone", lengths, per_seed,
                          TrendKind::LogSlope, true, "#d62728"});
}

// --control: the placebo. Initialised models, each on its own seed and padding its own sentence to
// ONE length (the middle level), in every length's place: the true trend is 0. The other paper
// claims hold one arm against a threshold or compare two batchings of the same models.
void placebo(Report& r, const IdData& data) {
  const std::vector<size_t> by_len = by_length(data);
  const int k = static_cast<int>(parse_increasing_ints(r.text("lengths"), "lab padding: --lengths").size()), m = r.trend_placebo_pool(k);
  const std::vector<double> lengths = length_levels(r, longest_padded(data, by_len, m), 256);
  const double mid = lengths[lengths.size() / 2];
  r.say(fmt::format("PLACEBO: {} initialised models (seeds {}-{}), each padding its own sentence to {} source tokens only, no padding masks; the "
                    "trend claim reads {} of them per seed as lengths {}.", m, r.seed(0), r.seed(m - 1), mid, k, fmt::join(lengths, ", ")));
  std::vector<double> at_mid;
  for (int j = 0; j < m; ++j) at_mid.push_back(padded_diffs(r, data, by_len, j, r.seed(j), {mid}, false).front());
  const Spread sp = spread(at_mid);
  r.say(fmt::format("log10 relative logits difference at {} tokens over the pool: mean {:.3f}, from {:.3f} to {:.3f}", mid, sp.mean, sp.min, sp.max));
  r.placebo_trend("pad_change_trend", k, [&](const std::vector<int>& runs) {
    std::vector<double> y;
    for (int j : runs) y.push_back(at_mid[static_cast<size_t>(j)]);
    return trend(lengths, y, TrendKind::LogSlope);
  }, fmt::format("models of different seeds padded to {} tokens as the lengths", mid));
  const std::string one_arm = "one arm (no masks) against a threshold, no contrast between arms";
  r.no_placebo("unmasked_pad_changes_output", one_arm);
  r.no_placebo("unmasked_pad_gets_gradient", one_arm);
  const std::string batchings = "bucketed against random batches of the same models and sentences; a placebo of two random batchings is not measured";
  r.no_placebo("bucketing_cuts_pad_loss", batchings);
  r.no_placebo("bucketing_lowers_pad_gradient", batchings);
}

// ---------------------------------------------------------------- the lab

struct MaskSetting {
  const char* name;
  bool source, target;
};
constexpr MaskSetting kSettings[] = {{"both padding masks", true, true},
                                     {"no source padding mask", false, true},
                                     {"no target padding mask", true, false},
                                     {"no padding masks", false, false}};

// Everything the lab measures, filled section by section, then drawn and checked.
struct Results {
  std::map<std::string, Comparison> worst_by;  // per mask setting, the worst over seeds
  std::vector<Comparison> unmasked;            // "no padding masks", per seed
  std::vector<PadGradient> pad_grads[4];       // per mask setting, per seed
  PadGradient pg[4];                           // per mask setting, the worst over seeds
  std::vector<std::map<std::string, PadShare>> shares;  // per seed: "untrained random", "trained bucketed", ...
};

nn::Seq2SeqOptions lab_model(Report& r, const IdData& data) {
  const int64_t D = r.integer("d-model");
  return small_model(data, D, 2, 2, 2 * D, false);
}

// Section 1 (and the batches of section 2): per seed, the i-th shortest pair alone and with the 7 longest.
void alone_vs_batch(Report& r, const IdData& data, Results& res) {
  const std::vector<size_t> by_len = by_length(data);
  r.section("1. one sentence alone and as row 0 of a batch with the 7 longest (float64): largest |difference| / largest |value|");
  Table t1("alone_vs_batch", {"seed", "masks", "src/tgt len", "batch src/tgt len", "encoder out", "logits", "attention", "gradients",
                              "weight on PAD keys"});
  for (int i = 0; i < r.seeds(); ++i) {
    nn::Seq2SeqTransformer model(lab_model(r, data), r.seed(i));
    model.to(DType::Float64);
    model.eval();
    std::vector<size_t> rows{by_len[static_cast<size_t>(i) % by_len.size()]};
    for (size_t k = 0; k < 7; ++k) rows.push_back(by_len[by_len.size() - 1 - k]);
    const train::Batch b = train::collate(data.train, rows);
    std::vector<size_t> some(data.train.size());  // (section 2) 8 random pairs
    std::iota(some.begin(), some.end(), 0);
    train::seeded_shuffle(some, r.seed(i));
    some.resize(std::min<size_t>(8, some.size()));
    const train::Batch random_batch = train::collate(data.train, some);
    for (int s = 0; s < 4; ++s) {
      // --ablate: both padding masks in every arm, whatever the row is named.
      model.masks.source_padding = kSettings[s].source || r.ablate();
      model.masks.target_padding = kSettings[s].target || r.ablate();
      const Comparison c = compare(model, data.train, rows);
      Comparison& w = res.worst_by[kSettings[s].name];
      w.memory = worst(w.memory, c.memory), w.logits = worst(w.logits, c.logits), w.weights = worst(w.weights, c.weights);
      w.grads = worst(w.grads, c.grads), w.pad_weight = std::max(w.pad_weight, c.pad_weight);
      if (s == 3) res.unmasked.push_back(c);
      t1.row({static_cast<int64_t>(r.seed(i)), kSettings[s].name,
              fmt::format("{}/{}", data.train[rows[0]].src.size(), data.train[rows[0]].tgt.size() + 1),
              fmt::format("{}/{}", b.src_len, b.tgt_len - 1), c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel, c.pad_weight});
      res.pad_grads[s].push_back(pad_gradient(model, random_batch));
    }
  }
  r.print(t1);
  r.say("src/tgt len: source and decoder-input lengths; attention: every attention map (encoder self, decoder self and cross, every");
  r.say("layer), row 0's real queries and keys; gradients: every parameter's gradient of that sentence's loss (other rows' labels");
  r.say("ignored), relative to the largest entry; weight on PAD keys: the largest attention weight a real query of row 0 gives a PAD key.");
}

// Section 2: the worst over seeds of the gradient at PAD and real input positions.
void report_pad_gradient(Report& r, Results& res) {
  r.section("2. gradient of a batch's loss (8 random pairs) at PAD positions of the encoder and decoder input (largest |entry|, worst seed)");
  Table t2("pad_gradient", {"masks", "source PAD", "source real", "target PAD", "target real"});
  for (int s = 0; s < 4; ++s) {
    PadGradient& pg = res.pg[s];
    for (const auto& g : res.pad_grads[s]) {
      pg.src_pad = std::max(pg.src_pad, g.src_pad), pg.src_real = std::max(pg.src_real, g.src_real);
      pg.tgt_pad = std::max(pg.tgt_pad, g.tgt_pad), pg.tgt_real = std::max(pg.tgt_real, g.tgt_real);
    }
    t2.row({kSettings[s].name, pg.src_pad, pg.src_real, pg.tgt_pad, pg.tgt_real});
  }
  r.print(t2);
  r.say("Target PAD inputs come after the sentence: the causal mask already hides them from every real position, and their");
  r.say("own labels are PAD (ignored), so they get no gradient even without the target padding mask.");
}

// Section 3: PAD labels' share of loss and gradient, random against bucketed batches, untrained and
// trained, for each seed (the seed draws the initialisation, the random batches and the order).
void pad_share_section(Report& r, const IdData& data, Results& res) {
  r.section("3. ignore_index off: the share PAD labels carry, random against length-bucketed batches (float32)");
  const int64_t max_tokens = r.integer("max-tokens");
  const size_t limit = static_cast<size_t>(r.integer("batches"));
  std::vector<size_t> all(data.train.size());
  std::iota(all.begin(), all.end(), 0);
  Table t3("pad_share", {"seed", "model", "batching", "batches", "PAD labels", "PAD share of loss", "PAD share of gradient", "PAD part, ignore_index on"});
  for (int i = 0; i < r.seeds(); ++i) {
    const uint64_t seed = r.seed(i);
    nn::Seq2SeqTransformer model(lab_model(r, data), seed);
    FitOptions fo;
    fo.steps = r.integer("steps");
    fo.lr = 1e-3;
    fo.max_tokens = max_tokens;
    fo.seed = seed;
    res.shares.emplace_back();
    for (const char* stage : {"untrained", "trained"}) {
      if (std::string(stage) == "trained") fit(model, data.train, fo);
      model.eval();
      for (const char* kind : {"random", "bucketed"}) {
        const std::vector<std::vector<size_t>> plan = std::string(kind) == "random" ? random_batches(data.train, max_tokens, seed)
                                                                                     : train::bucket_by_length(data.train, all, max_tokens);
        // Bucketed batches come sorted by length: visit them in a shuffled order, as an epoch does.
        std::vector<size_t> order(plan.size());
        std::iota(order.begin(), order.end(), 0);
        train::seeded_shuffle(order, seed);
        std::vector<std::vector<size_t>> visited;
        for (size_t k : order) visited.push_back(plan[k]);
        const PadShare ps = pad_share(model, data.train, visited, limit);
        res.shares.back()[std::string(stage) + " " + kind] = ps;
        t3.row({static_cast<int64_t>(seed), stage, kind, static_cast<int64_t>(std::min(limit, plan.size())),
                static_cast<double>(ps.pad_labels) / ps.labels, ps.loss_share, ps.grad_share, ps.ignored_grad});
      }
    }
  }
  r.print(t3);
  r.say("PAD labels: their share of the label positions; share of the gradient: |g_PAD| / (|g_PAD| + |g_real|), g_PAD the gradient");
  r.say("of the PAD labels' loss terms, g_real of the real labels' terms, summed over batches; trained: after the steps above with");
  r.say("ignore_index = PAD (as the trainer does), so the model has learnt never to predict PAD. Last column: with ignore_index = PAD,");
  r.say("how far loss and gradient are from those of the real labels alone.");
}

void add_figure(Report& r, Results& res) {
  auto& d = r.data();
  for (const auto& [name, c] : res.worst_by)
    d["alone_vs_batch"][name] = {{"encoder_out", c.memory.rel}, {"logits", c.logits.rel}, {"attention", c.weights.rel},
                                 {"gradients", c.grads.rel}, {"pad_key_weight", c.pad_weight}};
  for (int s = 0; s < 4; ++s)
    d["pad_gradient"][kSettings[s].name] = {{"source_pad", res.pg[s].src_pad}, {"source_real", res.pg[s].src_real},
                                            {"target_pad", res.pg[s].tgt_pad}, {"target_real", res.pg[s].tgt_real}};
  for (const auto& [name, ps] : res.shares[0])
    d["pad_share"][name] = {{"labels", ps.labels}, {"pad_labels", ps.pad_labels}, {"loss_share", ps.loss_share},
                            {"grad_share", ps.grad_share}, {"ignored", ps.ignored_grad}};
  // Short captions: the colour bar's caption would run over long tick labels such as 1.52e-08.
  ValueMap diffs{"alone vs in a batch: relative difference, log (grey: 0)", "what is compared", "masks", {},
                 {"encoder out", "logits", "attention", "gradients"}, {}, true, ""};
  for (const auto& st : kSettings) {
    const Comparison& c = res.worst_by[st.name];
    diffs.row_labels.push_back(st.name);
    diffs.values.push_back({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel});
  }
  r.add_panel(diffs);
  ValueMap shares{fmt::format("PAD labels without ignore_index (seed {})", r.seed(0)), "share", "model, batching", {}, {"of labels", "of loss", "of gradient"}, {}, false, "share"};
  for (const char* stage : {"untrained", "trained"})
    for (const char* kind : {"random", "bucketed"}) {
      const PadShare& ps = res.shares[0][std::string(stage) + " " + kind];
      shares.row_labels.push_back(std::string(stage) + ", " + kind);
      shares.values.push_back({static_cast<double>(ps.pad_labels) / ps.labels, ps.loss_share, ps.grad_share});
    }
  r.add_panel(shares);
  for (int s : {0, 3})
    r.add_panel(ValueMap{fmt::format("{}: |d loss / d encoder input|, log (grey: 0)", s ? "no masks" : "masks"), "source position",
                         "batch row (8 random pairs)", {}, {}, res.pad_grads[s][0].src_map, true, ""});
}

// The claims (lab/claims.cpp's rows for padding).
void check_claims(Report& r, Results& res, const std::vector<double>& pad_trend) {
  auto largest = [](const Comparison& c) { return std::max({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel}); };
  auto ev = [&](const char* name) {
    const Comparison& c = res.worst_by[name];
    return fmt::format("{}, worst seed: encoder out {:.2g}, logits {:.2g}, attention {:.2g}, gradients {:.2g}, weight on PAD keys {:.2g}", name,
                       c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel, c.pad_weight);
  };
  const Comparison& both = res.worst_by[kSettings[0].name];
  r.check("masked_alone_equals_batch", std::max(largest(both), both.pad_weight), ev(kSettings[0].name));
  std::vector<double> differ;  // per seed: log10 of the smallest of the four differences without the masks
  std::string ev_differ;
  for (size_t i = 0; i < res.unmasked.size(); ++i) {
    const Comparison& c = res.unmasked[i];
    differ.push_back(std::log10(std::min({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel})));
    ev_differ += fmt::format("{}seed {}: {:.2g}, {:.2g}, {:.2g}, {:.2g}", i ? "; " : "", r.seed(static_cast<int>(i)), c.memory.rel, c.logits.rel,
                             c.weights.rel, c.grads.rel);
  }
  r.paper("unmasked_pad_changes_output", differ, "encoder out, logits, attention, gradients: " + ev_differ);
  r.paper("pad_change_trend", pad_trend,
          fmt::format("slope of log10 of the logits' relative difference per doubling of the padded source length, per seed: {:.4f}",
                      fmt::join(pad_trend, ", ")));
  r.check("target_mask_redundant", largest(res.worst_by[kSettings[2].name]), ev(kSettings[2].name));
  const PadGradient& on = res.pg[0];
  double nonzero = 0;  // seeds with a non-zero gradient at a PAD input, masks on
  for (const auto& g : res.pad_grads[0]) nonzero += (g.src_pad != 0.0) + (g.tgt_pad != 0.0);
  r.check("masked_pad_gradient_zero", nonzero,
          fmt::format("largest |gradient| at source PAD {:g} (real {:.3g}), target PAD {:g} (real {:.3g})", on.src_pad, on.src_real, on.tgt_pad,
                      on.tgt_real));
  std::vector<double> pad_ratio;  // per seed, no padding masks: largest |gradient| at source PAD over that at a real position
  for (const auto& g : res.pad_grads[3]) pad_ratio.push_back(g.src_real > 0 ? g.src_pad / g.src_real : NAN);
  r.paper("unmasked_pad_gets_gradient", pad_ratio, fmt::format("per seed: {:.3g}", fmt::join(pad_ratio, ", ")));
  double differs = 0;
  std::vector<double> loss_ratio, grad_ratio;  // per seed, the larger over the untrained and the trained model
  std::string ev_cut;
  for (size_t i = 0; i < res.shares.size(); ++i) {
    double lr = 0, gr = 0;
    for (const char* stage : {"untrained", "trained"}) {
      const PadShare &rnd = res.shares[i].at(std::string(stage) + " random"), &bkt = res.shares[i].at(std::string(stage) + " bucketed");
      differs += (rnd.ignored_grad != 0.0) + (bkt.ignored_grad != 0.0);
      lr = std::max(lr, bkt.loss_share / rnd.loss_share), gr = std::max(gr, bkt.grad_share / rnd.grad_share);
      if (i == 0)
        ev_cut += fmt::format("{}seed {} {}: loss {:.3f} -> {:.3f}, gradient {:.3f} -> {:.3f}", ev_cut.empty() ? "" : "; ", r.seed(0), stage,
                              rnd.loss_share, bkt.loss_share, rnd.grad_share, bkt.grad_share);
    }
    loss_ratio.push_back(lr), grad_ratio.push_back(gr);
  }
  r.check("ignore_index_exact", differs, "batches where the loss or gradient with ignore_index = PAD differs at all from the real labels' alone");
  r.paper("bucketing_cuts_pad_loss", loss_ratio, "bucketed / random PAD share of the loss, the larger of untrained and trained, per seed; " + ev_cut);
  r.paper("bucketing_lowers_pad_gradient", grad_ratio, "bucketed / random PAD share of the gradient, the larger of untrained and trained, per seed");
}

void run(Report& r) {
  const IdData data = builtin_corpus(r.integer("pairs"));
  r.say(fmt::format("built-in corpus: {} training pairs, vocabularies {} / {}; Post-LN, d_model {}, 2 heads, 2 layers, untrained "
                    "(each seed its own initialisation); {} seeds",
                    data.train.size(), data.src_vocab, data.tgt_vocab, r.integer("d-model"), r.seeds()));
  if (r.placebo_mode()) return placebo(r, data);
  length_levels(r, longest_padded(data, by_length(data), r.seeds()), 256);  // a bad --lengths fails before the work, not after it
  if (r.ablate()) r.say("ABLATION: both padding masks on in every arm (the rows keep their names).");
  Results res;
  alone_vs_batch(r, data, res);
  report_pad_gradient(r, res);
  pad_share_section(r, data, res);
  const std::vector<double> pad_trend = padded_length_section(r, data);
  add_figure(r, res);
  check_claims(r, res, pad_trend);
}

}  // namespace

Lab padding_lab() {
  Lab l;
  l.name = "padding";
  l.title = "padding masks and ignore_index";
  l.reference = "the course: PAD must not change what a sentence computes";
  l.question = "Does a sentence compute the same alone and padded in a batch, with and without the padding masks? How much of the "
               "loss and gradient do PAD labels carry without ignore_index, with random and with length-bucketed batches?";
  l.control = "placebo: initialised models of different seeds padded to one length, in every length's place";
  l.placebo = true;
  l.ablation = "both padding masks in every arm";
  l.default_seeds = 5;
  l.options = {{"pairs", Option::Int, "2000", "pairs of the built-in corpus (90% train)"},
               {"d-model", Option::Int, "32", "model width (feed-forward 2x)"},
               {"max-tokens", Option::Int, "1024", "padded tokens per batch"},
               {"batches", Option::Int, "20", "batches measured per batching"},
               {"steps", Option::Int, "200", "training steps before the second PAD-share measurement"},
               {"lengths", Option::Text, "8,16,32,64",
                "padded source lengths of the dose-response (4 or more, increasing, above the padded sentences' own)"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

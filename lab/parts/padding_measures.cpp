// The measurements behind lab `padding` (lab/labs/padding.cpp): a sentence alone against in a
// batch, the gradient at PAD positions, PAD labels' share without ignore_index, the padded length.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/padding.h"
#include "nn/masks.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

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

// Row 0's attention to keys beyond its own length (PAD keys) in the batch.
double pad_weight(const Tensor& batch_w, int64_t real_queries, int64_t real_keys) {
  const int64_t S = batch_w.size(3);
  if (real_keys >= S) return 0;
  return max_abs(batch_w.narrow(0, 0, 1).narrow(2, 0, real_queries).narrow(3, real_keys, S - real_keys));
}

}  // namespace

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

Comparison compare_alone_batch(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, const std::vector<size_t>& batch_rows) {
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

static double grad_norm(const std::vector<Variable>& params) {
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

double padded_log_diff(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t idx, int64_t len) {
  const Tensor alone = run_pass(model, train::collate(pairs, std::vector<size_t>{idx}), {0}).logits;  // (1, T, V)
  train::Batch padded = train::collate(pairs, std::vector<size_t>{idx});  // one row: appending PAD ids pads its source
  padded.src.resize(static_cast<size_t>(len), train::Vocab::kPad);
  padded.src_len = len;
  return std::log10(std::max(diff_row0(alone, run_pass(model, padded, {0}).logits).rel, kDiffFloor));
}

std::vector<size_t> by_length(const IdData& data) {
  std::vector<size_t> by_len(data.train.size());
  std::iota(by_len.begin(), by_len.end(), 0);
  std::stable_sort(by_len.begin(), by_len.end(), [&](size_t a, size_t b) {
    return std::pair(data.train[a].src.size(), data.train[a].tgt.size()) < std::pair(data.train[b].src.size(), data.train[b].tgt.size());
  });
  return by_len;
}

int64_t longest_padded(const IdData& data, const std::vector<size_t>& by_len, int64_t n) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<int64_t>(data.train[by_len[static_cast<size_t>(i) % by_len.size()]].src.size()));
  return m;
}

}  // namespace gf::lab

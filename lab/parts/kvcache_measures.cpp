// The measurements behind lab `kvcache` (lab/labs/kvcache.cpp): fixed-length greedy decoding cached
// and recomputed, the cache's bytes, and the time of one decoding step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/kvcache.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/kernels/random.h"
#include "train/decode/decode.h"

namespace gf::lab {

int64_t kv_bytes_per_token(int64_t layers, int64_t kv_heads, int64_t head_dim, DType dtype) {
  return 2 * layers * kv_heads * head_dim * static_cast<int64_t>(dtype_size(dtype));
}

CacheBytes cache_bytes(const std::vector<nn::DecoderLayerCache>& caches) {
  CacheBytes b;
  for (const auto& c : caches) {
    b.self += c.self.bytes();
    for (const Tensor* t : {&c.cross_k, &c.cross_v})
      if (t->defined()) b.cross += static_cast<int64_t>(t->nbytes());
  }
  return b;
}

namespace {

// The newest position's logits (B, V) in float64, from decoder states (B, 1, D).
Tensor last_logits(const nn::Seq2SeqTransformer& model, const Variable& h) {
  const int64_t B = h.size(0);
  Tensor logits = model.project(h).data();  // (B, 1, V)
  return logits.reshape({B, logits.size(2)}).to(DType::Float64).contiguous();  // (B, V)
}

// Column t of a [row][step] table as a (B, 1) id tensor.
Tensor column(const std::vector<std::vector<int64_t>>& rows, int64_t t) {
  std::vector<int64_t> ids;
  for (const auto& r : rows) ids.push_back(r[static_cast<size_t>(t)]);
  return Tensor::from_vector(ids, {static_cast<int64_t>(rows.size()), 1});  // (B, 1)
}

// Columns [0, t) of a [row][step] table as a (B, t) id tensor.
Tensor prefix(const std::vector<std::vector<int64_t>>& rows, int64_t t) {
  std::vector<int64_t> ids;
  for (const auto& r : rows) ids.insert(ids.end(), r.begin(), r.begin() + t);
  return Tensor::from_vector(ids, {static_cast<int64_t>(rows.size()), t});  // (B, t)
}

}  // namespace

Decoded decode_fixed(const nn::Seq2SeqTransformer& model, const Tensor& src, int64_t steps, bool cached,
                     const std::vector<std::vector<int64_t>>* follow) {
  NoGradGuard ng;
  const int64_t B = src.size(0);
  GF_CHECK(steps >= 1, "decode_fixed: steps must be positive, got {}", steps);
  GF_CHECK(!follow || (static_cast<int64_t>(follow->size()) == B &&
                       std::all_of(follow->begin(), follow->end(), [&](const auto& r) { return static_cast<int64_t>(r.size()) >= steps; })),
           "decode_fixed: `follow` must hold {} rows of at least {} tokens", B, steps);
  const Tensor pad = nn::make_pad_mask(src, train::Vocab::kPad);  // (B, S)
  const Variable memory = model.encode(src, pad);                 // (B, S, D)
  const auto& decoder = *model.transformer->decoder;
  std::vector<nn::DecoderLayerCache> caches;
  if (cached) caches = decoder.start_cache(memory, steps);
  // inputs[b]: <bos>, then each step's token; the decoder reads inputs[b][0 .. t] at step t.
  std::vector<std::vector<int64_t>> inputs(static_cast<size_t>(B), std::vector<int64_t>{train::Vocab::kBos});
  Decoded d;
  d.tokens.assign(static_cast<size_t>(B), {});
  for (int64_t t = 0; t < steps; ++t) {
    Variable h;  // (B, 1, D): the newest position's state
    if (cached) {
      h = decoder.forward_step(model.embed_tgt(column(inputs, t), t), caches, pad).output;  // (B, 1, D)
    } else {
      Variable all = decoder.forward(model.embed_tgt(prefix(inputs, t + 1)), memory, nn::make_causal_mask(t + 1), Tensor(), pad).output;  // (B, t+1, D)
      h = Variable(all.data().narrow(1, t, 1).contiguous());  // (B, 1, D)
    }
    Tensor logits = last_logits(model, h);  // (B, V)
    const int64_t V = logits.size(1);
    for (int64_t b = 0; b < B; ++b) {
      const double* row = logits.data<double>() + b * V;
      const int64_t best = std::max_element(row, row + V) - row;
      d.tokens[b].push_back(best);
      inputs[b].push_back(follow ? (*follow)[b][t] : best);
    }
    d.logits.push_back(logits);
  }
  return d;
}

double relative_logit_difference(const Decoded& a, const Decoded& b, int64_t row) {
  GF_CHECK(a.logits.size() == b.logits.size() && !a.logits.empty(), "relative_logit_difference: {} and {} steps", a.logits.size(),
           b.logits.size());
  double diff = 0, scale = 0;
  for (size_t t = 0; t < a.logits.size(); ++t) {
    const Tensor& x = a.logits[t];
    const Tensor& y = b.logits[t];  // (rows of b, V)
    GF_CHECK(x.size(1) == y.size(1) && row >= 0 && row + y.size(0) <= x.size(0), "relative_logit_difference: logits {} against {} at row {}",
             shape_str(x.shape()), shape_str(y.shape()), row);
    const int64_t V = x.size(1);
    for (int64_t i = 0; i < y.size(0); ++i)
      for (int64_t v = 0; v < V; ++v) {
        const double p = x.data<double>()[(row + i) * V + v], q = y.data<double>()[i * V + v];
        diff = std::max(diff, std::abs(p - q));
        scale = std::max(scale, std::abs(p));
      }
  }
  return scale > 0 ? diff / scale : diff;
}

int64_t differing_tokens(const Decoded& a, const Decoded& b, int64_t row) {
  int64_t n = 0;
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    const auto& x = a.tokens.at(static_cast<size_t>(row) + i);
    const auto& y = b.tokens[i];
    GF_CHECK(x.size() == y.size(), "differing_tokens: {} and {} steps", x.size(), y.size());
    for (size_t t = 0; t < x.size(); ++t) n += x[t] != y[t];
  }
  return n;
}

Exactness exactness(const nn::Seq2SeqTransformer& model, const Sources& u, int64_t steps) {
  Exactness e;
  const Decoded cached = decode_fixed(model, u.src, steps, true);
  const Decoded recomputed = decode_fixed(model, u.src, steps, false, &cached.tokens);
  e.cached_diff = relative_logit_difference(cached, recomputed);
  e.cached_tokens = differing_tokens(cached, recomputed);
  for (size_t t = 0; t < cached.logits.size(); ++t) {
    double m = 0;
    for (int64_t i = 0; i < cached.logits[t].numel(); ++i)
      m = std::max(m, std::abs(cached.logits[t].flat_get(i) - recomputed.logits[t].flat_get(i)));
    e.per_step.push_back(m);
  }
  for (int64_t r = 0; r < u.src.size(0); ++r) {
    const Tensor alone_src = u.src.narrow(0, r, 1).narrow(1, 0, u.lengths[r]).contiguous();  // (1, len): no padding
    const Decoded alone = decode_fixed(model, alone_src, steps, true);
    e.alone_diff = std::max(e.alone_diff, relative_logit_difference(cached, alone, r));
    e.alone_tokens += differing_tokens(cached, alone, r);
  }
  // The library's greedy decoding, cached and not, for a fixed number of steps (no stop at <eos>).
  train::DecodeOptions o;
  o.stop_at_eos = false;
  o.max_extra = steps - u.src.size(1) > 0 ? steps - u.src.size(1) : 1;
  o.use_cache = true;
  const auto with = train::translate_batch(model, u.src, o);
  o.use_cache = false;
  const auto without = train::translate_batch(model, u.src, o);
  for (size_t r = 0; r < with.size(); ++r)
    for (size_t t = 0; t < std::max(with[r].size(), without[r].size()); ++t)
      e.library_tokens += t >= with[r].size() || t >= without[r].size() || with[r][t] != without[r][t];
  return e;
}

CacheCheck check_cache_bytes(const nn::Seq2SeqTransformer& model, const Tensor& src, const std::vector<int64_t>& capacities) {
  NoGradGuard ng;
  CacheCheck b;
  const auto& attn = *model.transformer->decoder->layers->operator[](0).self_attn;
  b.formula = kv_bytes_per_token(model.options().num_layers, attn.kv_heads, attn.head_dim, model.out->weight.dtype());
  const int64_t R = src.size(0), S = src.size(1);
  const Variable memory = model.encode(src, nn::make_pad_mask(src, train::Vocab::kPad));  // (R, S, D)
  for (int64_t capacity : capacities) {
    const CacheBytes c = cache_bytes(model.transformer->decoder->start_cache(memory, capacity));
    b.self_totals.push_back(c.self);
    b.worst = std::max({b.worst, std::abs(c.self - R * capacity * b.formula), std::abs(c.cross - R * S * b.formula)});
    b.self = c.self / (R * capacity);
    b.cross = c.cross / (R * S);
  }
  train::DecodeOptions o;
  o.max_extra = 2;
  train::DecodeStats st;
  train::translate_batch(model, src, o, &st);
  b.library = st.self_bytes_per_token;
  b.library_cross = st.cross_bytes_per_src_token;
  b.worst = std::max({b.worst, std::abs(b.library - b.formula), std::abs(b.library_cross - b.formula)});
  return b;
}

namespace {
double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

StepTimes time_steps(const nn::Seq2SeqTransformer& model, const Tensor& src, const std::vector<int64_t>& lengths, int64_t reps, int64_t symbols,
                     uint64_t seed, bool recompute_both) {
  NoGradGuard ng;
  const int64_t R = src.size(0), longest = lengths.back();
  Generator gen(seed * 7919 + 17);
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(R));
  for (auto& row : ids) {
    row.push_back(train::Vocab::kBos);
    for (int64_t t = 1; t < longest; ++t) row.push_back(4 + static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(symbols))));
  }
  const Tensor pad = nn::make_pad_mask(src, train::Vocab::kPad);  // (R, S)
  const Variable memory = model.encode(src, pad);                 // (R, S, D)
  const auto& decoder = *model.transformer->decoder;
  auto caches = decoder.start_cache(memory, longest);
  for (int64_t p = 0; p + 1 < longest; ++p) decoder.forward_step(model.embed_tgt(column(ids, p), p), caches, pad);
  auto cached_step = [&](int64_t t) {
    for (auto& c : caches) c.self.length = t - 1;
    return last_logits(model, decoder.forward_step(model.embed_tgt(column(ids, t - 1), t - 1), caches, pad).output);  // (R, V)
  };
  auto recomputed_step = [&](int64_t t) {
    Variable h = decoder.forward(model.embed_tgt(prefix(ids, t)), memory, nn::make_causal_mask(t), Tensor(), pad).output;  // (R, t, D)
    return last_logits(model, Variable(h.data().narrow(1, t - 1, 1).contiguous()));                                       // (R, V)
  };
  auto fastest = [&](const auto& step, int64_t t) {
    step(t);  // once untimed: buffers of this size allocated, caches warm
    double best = INFINITY;
    for (int64_t k = 0; k < reps; ++k) {
      const double t0 = now_seconds();
      step(t);
      best = std::min(best, now_seconds() - t0);
    }
    return best;
  };
  StepTimes tm;
  for (int64_t t : lengths) {
    tm.cached.push_back(recompute_both ? fastest(recomputed_step, t) : fastest(cached_step, t));
    tm.recomputed.push_back(fastest(recomputed_step, t));
  }
  std::vector<double> x(lengths.begin(), lengths.end());
  tm.slope_cached = loglog_slope(x, tm.cached);
  tm.slope_recomputed = loglog_slope(x, tm.recomputed);
  return tm;
}

}  // namespace gf::lab

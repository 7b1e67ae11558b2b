// Lab `kvcache`: what the KV cache changes in decoding, and what it does not.
//
// A decoder that writes one token a step could recompute its whole prefix every step; the cache
// keeps each layer's keys and values of the positions already decoded, so a step projects only the
// newest position and attends over the stored ones. Nothing else changes: cached decoding must
// produce the recomputed decoding's logits. Not bit for bit: the two reach each number through
// different products (one row against t rows, gradflow's own attend_one against the fused op), and
// OpenBLAS promises no summation order, so in float32 they agree to rounding (docs/testing.md,
// "Results across OpenBLAS kernels") and in float64 to ~1e-15, where a different greedy token
// would need two logits equal to that precision.
//
// Here, per seed (the seed draws the model and the source sentences):
//  - cached against recomputed greedy decoding on one prefix, in float32 and float64: the largest
//    logit difference and the tokens; the same through the library's train::translate_batch;
//  - each sentence decoded alone against its row of a padded batch (cached both times);
//  - the cache's bytes against the formula 2 x layers x kv_heads x d_k x bytes per token;
//  - the time of one decoding step at position t, cached and recomputed, over a sweep of t: the
//    fitted exponent of each (time ~ t^a) and their ratio at the longest t.
// The control recomputes in both arms of the timing (the cache disabled in both).
#include "lab/kvcache.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
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

namespace {

constexpr const char* kCachedColor = "#1f77b4";
constexpr const char* kRecomputedColor = "#d62728";
const char* dtype_label(DType d) { return d == DType::Float64 ? "float64" : "float32"; }

struct Settings {
  int64_t symbols, min_len, max_len, rows, steps, d_model, heads, kv_heads, layers, reps;
  std::vector<int64_t> lengths;
};

// One seed's sources and models (float32 and a float64 copy of the same weights).
struct Setup {
  Tensor src;                   // (rows, S), PAD-padded
  std::vector<int64_t> lengths;  // each row's length without padding
  std::unique_ptr<nn::Seq2SeqTransformer> f32, f64;
};

Setup make_setup(const Settings& s, uint64_t seed) {
  IdData data = synthetic_task("copy", s.symbols, s.min_len, s.max_len, 1, s.rows, seed);
  GF_CHECK(static_cast<int64_t>(data.test.size()) == s.rows, "lab kvcache: only {} distinct sources of lengths {}-{} over {} symbols, {} asked",
           data.test.size(), s.min_len, s.max_len, s.symbols, s.rows);
  Setup u;
  std::vector<size_t> all(data.test.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  train::Batch b = train::collate(data.test, all);
  u.src = Tensor::from_vector(b.src, {b.rows, b.src_len});  // (rows, S)
  for (const auto& p : data.test) u.lengths.push_back(static_cast<int64_t>(p.src.size()));
  nn::Seq2SeqOptions o = small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false);
  o.layer.kv_heads = s.kv_heads;
  o.max_len = std::max(s.lengths.back(), s.steps) + 1;
  u.f32 = std::make_unique<nn::Seq2SeqTransformer>(o, seed);
  u.f64 = std::make_unique<nn::Seq2SeqTransformer>(o, seed);
  u.f64->to(DType::Float64);
  u.f32->eval(), u.f64->eval();
  return u;
}

// ---- part 1: cached = recomputed, and a sentence alone = its row of a padded batch ----
struct Exactness {
  double cached_diff = 0, alone_diff = 0;                          // relative logit differences
  int64_t cached_tokens = 0, alone_tokens = 0, library_tokens = 0;  // tokens that differ
  std::vector<double> per_step;                                    // max |logit difference| per step, cached vs recomputed
};

Exactness exactness(const nn::Seq2SeqTransformer& model, const Setup& u, int64_t steps) {
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

// ---- part 2: the cache's bytes against the formula ----
struct Bytes {
  DType dtype;
  int64_t formula = 0;           // per token, all layers
  int64_t self = 0, cross = 0;   // measured per token: buffer bytes / (rows x positions)
  int64_t library = 0;           // translate_batch's DecodeStats::self_bytes_per_token
  int64_t library_cross = 0;     // ... cross_bytes_per_src_token
  int64_t worst = 0;             // largest |measured - formula| in bytes, over every total compared
  std::vector<int64_t> self_totals;  // the self-attention buffers' bytes at each capacity of the sweep (all rows)
};

Bytes measure_bytes(const nn::Seq2SeqTransformer& model, const Setup& u, const Settings& s, DType dtype) {
  NoGradGuard ng;
  Bytes b{dtype};
  const auto& attn = *model.transformer->decoder->layers->operator[](0).self_attn;
  b.formula = kv_bytes_per_token(s.layers, attn.kv_heads, attn.head_dim, dtype);
  const int64_t R = u.src.size(0), S = u.src.size(1);
  const Variable memory = model.encode(u.src, nn::make_pad_mask(u.src, train::Vocab::kPad));  // (R, S, D)
  for (int64_t capacity : s.lengths) {
    const CacheBytes c = cache_bytes(model.transformer->decoder->start_cache(memory, capacity));
    b.self_totals.push_back(c.self);
    b.worst = std::max({b.worst, std::abs(c.self - R * capacity * b.formula), std::abs(c.cross - R * S * b.formula)});
    b.self = c.self / (R * capacity);
    b.cross = c.cross / (R * S);
  }
  train::DecodeOptions o;
  o.max_extra = 2;
  train::DecodeStats st;
  train::translate_batch(model, u.src, o, &st);
  b.library = st.self_bytes_per_token;
  b.library_cross = st.cross_bytes_per_src_token;
  b.worst = std::max({b.worst, std::abs(b.library - b.formula), std::abs(b.library_cross - b.formula)});
  return b;
}

// ---- part 3: the time of one decoding step against its position ----
double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Timing {
  std::vector<double> cached, recomputed;  // seconds per step at each length (the fastest of the reps)
  double slope_cached = NAN, slope_recomputed = NAN;
};

// Times step t (the t-th output position) both ways on a random target prefix, float32. The cache
// is filled once up to the longest length; a cached step at t rewinds every layer's cache to t - 1
// positions and writes position t - 1 again. The control recomputes in the cached arm too.
Timing time_steps(const nn::Seq2SeqTransformer& model, const Setup& u, const Settings& s, uint64_t seed, bool control) {
  NoGradGuard ng;
  const int64_t R = u.src.size(0), longest = s.lengths.back();
  Generator gen(seed * 7919 + 17);
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(R));
  for (auto& row : ids) {
    row.push_back(train::Vocab::kBos);
    for (int64_t t = 1; t < longest; ++t) row.push_back(4 + static_cast<int64_t>(gen.next_below(static_cast<uint64_t>(s.symbols))));
  }
  const Tensor pad = nn::make_pad_mask(u.src, train::Vocab::kPad);  // (R, S)
  const Variable memory = model.encode(u.src, pad);                 // (R, S, D)
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
    for (int64_t k = 0; k < s.reps; ++k) {
      const double t0 = now_seconds();
      step(t);
      best = std::min(best, now_seconds() - t0);
    }
    return best;
  };
  Timing tm;
  for (int64_t t : s.lengths) {
    tm.cached.push_back(control ? fastest(recomputed_step, t) : fastest(cached_step, t));
    tm.recomputed.push_back(fastest(recomputed_step, t));
  }
  std::vector<double> x(s.lengths.begin(), s.lengths.end());
  tm.slope_cached = loglog_slope(x, tm.cached);
  tm.slope_recomputed = loglog_slope(x, tm.recomputed);
  return tm;
}

// "mean [lo, hi]" of a per-seed column (the t interval), or the one value.
std::string with_interval(const std::vector<double>& v, const char* format = "{:.3g}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

struct SeedResult {
  Exactness exact[2];  // float32, float64
  Bytes bytes[2];
  Timing timing;
};

void report_exactness(Report& r, const std::vector<SeedResult>& res) {
  r.section("cached against recomputed greedy decoding, and each sentence alone against its row of a padded batch");
  Table t("exactness", {"seed", "dtype", "cached vs recomputed: max |dlogit| / max |logit|", "tokens differing", "alone vs batch: max |dlogit| / max |logit|",
                        "tokens differing", "translate_batch cached vs not: tokens differing"});
  for (size_t i = 0; i < res.size(); ++i)
    for (int k = 0; k < 2; ++k) {
      const Exactness& e = res[i].exact[k];
      t.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), dtype_label(k ? DType::Float64 : DType::Float32), e.cached_diff, e.cached_tokens,
             e.alone_diff, e.alone_tokens, e.library_tokens});
    }
  r.print(t);
  r.say("Recomputed decoding is fed the cached decoding's tokens, so both score one prefix; 'tokens differing' counts steps whose");
  r.say("argmax differs. A sentence alone has no padding; in the batch its source is padded to the longest and its cross-attention");
  r.say("skips the padded keys. The two ways reach each logit through different products, so they agree to rounding, not to the bit.");
}

void report_bytes(Report& r, const std::vector<SeedResult>& res, const Settings& s) {
  r.section("the cache's bytes against 2 x layers x kv_heads x d_k x bytes, per token");
  Table t("cache bytes", {"dtype", "layers", "kv heads", "d_k", "formula (bytes/token)", "self-attention buffers / (rows x positions)",
                          "cross-attention / (rows x source positions)", "DecodeStats self", "DecodeStats cross", "largest |measured - formula|"});
  for (int k = 0; k < 2; ++k) {
    const Bytes& b = res[0].bytes[k];
    int64_t worst = 0;
    for (const auto& x : res) worst = std::max(worst, x.bytes[k].worst);
    t.row({dtype_label(b.dtype), s.layers, s.kv_heads > 0 ? s.kv_heads : s.heads, s.d_model / s.heads, b.formula, b.self, b.cross, b.library,
           b.library_cross, worst});
  }
  r.print(t);
  r.say(fmt::format("Buffers started for {} rows at every capacity of the sweep ({}); the largest difference is over every total and seed.",
                    s.rows, fmt::join(s.lengths, ", ")));
}

void report_timing(Report& r, const std::vector<SeedResult>& res, const Settings& s) {
  r.section(fmt::format("time of one decoding step at position t, {} rows, float32 (the fastest of {} runs; mean [min, max] over seeds)", s.rows,
                        s.reps));
  Table t("step time", {"t", "cached (ms)", "min", "max", "recomputed (ms)", "min", "max", "recomputed / cached"});
  std::vector<std::vector<double>> cached, recomputed;
  for (const auto& x : res) cached.push_back(x.timing.cached), recomputed.push_back(x.timing.recomputed);
  const auto c = spread_per_column(cached), q = spread_per_column(recomputed);
  for (size_t k = 0; k < s.lengths.size(); ++k)
    t.row({s.lengths[k], 1e3 * c[k].mean, 1e3 * c[k].min, 1e3 * c[k].max, 1e3 * q[k].mean, 1e3 * q[k].min, 1e3 * q[k].max, q[k].mean / c[k].mean});
  r.print(t);
  Table e("exponents", {"seed", "cached: slope of log time on log t", "recomputed", "gap", "recomputed / cached at the longest t"});
  for (size_t i = 0; i < res.size(); ++i) {
    const Timing& tm = res[i].timing;
    e.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), tm.slope_cached, tm.slope_recomputed, tm.slope_recomputed - tm.slope_cached,
           tm.recomputed.back() / tm.cached.back()});
  }
  r.print(e);
  std::vector<double> sc, sr;
  for (const auto& x : res) sc.push_back(x.timing.slope_cached), sr.push_back(x.timing.slope_recomputed);
  r.say(fmt::format("exponent a in time ~ t^a (t 95% interval over seeds): cached {}, recomputed {}", with_interval(sc), with_interval(sr)));
  r.say("A recomputed step runs every product on t rows (and attention on t x t scores); a cached one on one row (attention on 1 x t).");
  r.say("Per step: cached a + b t, recomputed a' t + b' t^2 -- exponents one apart whether the projections (small t) or attention (large t) dominate.");
}

void add_figure(Report& r, const std::vector<SeedResult>& res, const Settings& s) {
  std::vector<double> x(s.lengths.begin(), s.lengths.end());
  std::vector<std::vector<double>> cached, recomputed, ratio;
  for (const auto& v : res) {
    cached.push_back({}), recomputed.push_back({}), ratio.push_back({});
    for (size_t k = 0; k < x.size(); ++k) {
      cached.back().push_back(1e3 * v.timing.cached[k]);
      recomputed.back().push_back(1e3 * v.timing.recomputed[k]);
      ratio.back().push_back(v.timing.recomputed[k] / v.timing.cached[k]);
    }
  }
  const auto c = spread_per_column(cached), q = spread_per_column(recomputed), rt = spread_per_column(ratio);
  ChartSeries lin{"~ t (slope 1)", x, {}, {}, {}, true, "#7f7f7f"}, sq{"~ t^2 (slope 2)", x, {}, {}, {}, true, "#bbbbbb"};
  for (double t : x) lin.y.push_back(q.front().mean * t / x.front()), sq.y.push_back(q.front().mean * t * t / (x.front() * x.front()));
  r.add_panel(Chart{"one decoding step at position t (band: seeds min..max)", "position t", "ms", true, true,
                    {band_series(r.control() ? "\"cached\" (recomputes: control)" : "cached", x, c, kCachedColor),
                     band_series("recomputed", x, q, kRecomputedColor), lin, sq},
                    x, Chart::Corner::TopLeft});
  ChartSeries ideal{"t (one row against t)", x, x, {}, {}, true, "#7f7f7f"};
  r.add_panel(Chart{"recomputed / cached time per step", "position t", "ratio", true, true, {band_series("ratio", x, rt, "#2ca02c"), ideal}, x,
                    Chart::Corner::TopLeft});
  std::vector<ChartSeries> diffs;
  for (int k = 0; k < 2; ++k) {
    ChartSeries d{fmt::format("{} (seed {})", dtype_label(k ? DType::Float64 : DType::Float32), r.seed(0)), {}, {}, {}, {}, false,
                  k ? "#9467bd" : "#ff7f0e"};
    for (size_t t = 0; t < res[0].exact[k].per_step.size(); ++t) d.x.push_back(static_cast<double>(t + 1)), d.y.push_back(res[0].exact[k].per_step[t]);
    diffs.push_back(d);
  }
  r.add_panel(Chart{"largest |logit difference| per step, cached vs recomputed", "decoding step", "max |dlogit| (a gap: exactly 0)", false, true, diffs,
                    {}, Chart::Corner::BottomRight});
  // Bytes against positions: the formula's line through the measured totals.
  std::vector<ChartSeries> bytes;
  for (int k = 0; k < 2; ++k) {
    const Bytes& b = res[0].bytes[k];
    ChartSeries m{fmt::format("measured, {}", dtype_label(b.dtype)), x, {}, {}, {}, false, k ? "#9467bd" : "#ff7f0e"};
    ChartSeries f{fmt::format("formula, {}", dtype_label(b.dtype)), x, {}, {}, {}, true, "#7f7f7f"};
    for (size_t k = 0; k < x.size(); ++k) {
      m.y.push_back(static_cast<double>(b.self_totals[k]) / 1024.0);
      f.y.push_back(static_cast<double>(b.formula) * static_cast<double>(s.rows) * x[k] / 1024.0);
    }
    bytes.push_back(m), bytes.push_back(f);
  }
  r.add_panel(Chart{fmt::format("self-attention cache of {} rows", s.rows), "positions held", "KiB", true, true, bytes, x, Chart::Corner::TopLeft});
}

void check_claims(Report& r, const std::vector<SeedResult>& res) {
  std::vector<double> gap, speedup;
  double f64_diff = 0, f32_diff = 0;
  int64_t f64_tokens = 0, bytes_worst = 0;
  for (const auto& x : res) {
    gap.push_back(x.timing.slope_recomputed - x.timing.slope_cached);
    speedup.push_back(x.timing.recomputed.back() / x.timing.cached.back());
    const Exactness &e32 = x.exact[0], &e64 = x.exact[1];
    f64_diff = std::max({f64_diff, e64.cached_diff, e64.alone_diff});
    f32_diff = std::max({f32_diff, e32.cached_diff, e32.alone_diff});
    f64_tokens += e64.cached_tokens + e64.alone_tokens + e64.library_tokens;
    bytes_worst = std::max({bytes_worst, x.bytes[0].worst, x.bytes[1].worst});
  }
  r.paper("exponent_gap", gap, fmt::format("recomputed minus cached exponent per seed: {:.2f}", fmt::join(gap, ", ")));
  r.paper("speedup_longest", speedup, fmt::format("recomputed / cached at the longest t per seed: {:.1f}", fmt::join(speedup, ", ")));
  r.check("tokens_f64", static_cast<double>(f64_tokens),
          fmt::format("{} differing tokens over {} seeds (cached vs recomputed, alone vs batch, translate_batch)", f64_tokens, res.size()));
  r.check("logits_f64", f64_diff, fmt::format("largest relative logit difference {:.3g}", f64_diff));
  r.check("logits_f32", f32_diff, fmt::format("largest relative logit difference {:.3g}", f32_diff));
  r.check("cache_bytes", static_cast<double>(bytes_worst), fmt::format("largest |measured - formula| {} bytes", bytes_worst));
}

void run(Report& r) {
  Settings s{r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("rows"),   r.integer("steps"),
             r.integer("d-model"), r.integer("heads"),   r.integer("kv-heads"), r.integer("layers"), r.integer("reps"),
             parse_increasing_ints(r.text("lengths"), "lab kvcache: --lengths")};
  GF_CHECK(s.reps >= 1 && s.steps >= 1 && s.rows >= 1, "lab kvcache: --reps, --steps and --rows must be positive, got {}, {}, {}", s.reps, s.steps,
           s.rows);
  r.say(fmt::format("Post-LN translator, d_model {}, {} heads ({} key/value heads), {}+{} layers, FFN {}, at its initialisation (the seed draws",
                    s.d_model, s.heads, s.kv_heads > 0 ? s.kv_heads : s.heads, s.layers, s.layers, 4 * s.d_model));
  r.say(fmt::format("it and {} source sentences of {}-{} symbols out of {}); greedy decoding of {} steps, never stopping at <eos>.", s.rows, s.min_len,
                    s.max_len, s.symbols, s.steps));
  if (r.control()) r.say("Here the timing's cached arm recomputes the prefix too; the exact checks run as in the lab.");

  std::vector<SeedResult> res;
  for (int i = 0; i < r.seeds(); ++i) {
    const Setup u = make_setup(s, r.seed(i));
    SeedResult x;
    x.exact[0] = exactness(*u.f32, u, s.steps);
    x.exact[1] = exactness(*u.f64, u, s.steps);
    x.bytes[0] = measure_bytes(*u.f32, u, s, DType::Float32);
    x.bytes[1] = measure_bytes(*u.f64, u, s, DType::Float64);
    x.timing = time_steps(*u.f32, u, s, r.seed(i), r.control());
    res.push_back(std::move(x));
  }
  report_exactness(r, res);
  report_bytes(r, res, s);
  report_timing(r, res, s);
  add_figure(r, res, s);
  auto& d = r.data();
  for (size_t i = 0; i < res.size(); ++i) {
    const SeedResult& x = res[i];
    d["seeds"].push_back({{"seed", r.seed(static_cast<int>(i))},
                          {"lengths", s.lengths},
                          {"cached_seconds", x.timing.cached},
                          {"recomputed_seconds", x.timing.recomputed},
                          {"slope_cached", x.timing.slope_cached},
                          {"slope_recomputed", x.timing.slope_recomputed},
                          {"float32_cached_vs_recomputed", x.exact[0].cached_diff},
                          {"float64_cached_vs_recomputed", x.exact[1].cached_diff},
                          {"float32_alone_vs_batch", x.exact[0].alone_diff},
                          {"float64_alone_vs_batch", x.exact[1].alone_diff},
                          {"float32_tokens_differing", x.exact[0].cached_tokens + x.exact[0].alone_tokens + x.exact[0].library_tokens},
                          {"float64_tokens_differing", x.exact[1].cached_tokens + x.exact[1].alone_tokens + x.exact[1].library_tokens},
                          {"bytes_per_token_formula", {x.bytes[0].formula, x.bytes[1].formula}},
                          {"bytes_per_token_measured", {x.bytes[0].self, x.bytes[1].self}}});
  }
  check_claims(r, res);
}

}  // namespace

Lab kvcache_lab() {
  Lab l;
  l.name = "kvcache";
  l.title = "the KV cache: the same logits, linear instead of quadratic growth, and its bytes";
  l.reference = "Shazeer 2019, arXiv:1911.02150 (incremental decoding, Section 2.4); Pope et al. 2022, arXiv:2211.05102 (the KV cache's size)";
  l.question = "Does decoding with a KV cache compute what recomputing the prefix computes, for a sentence alone and in a padded batch; how "
               "does the time of a step grow with its position either way; and does the cache hold 2 x layers x kv_heads x d_k values per token?";
  l.control = "the KV cache disabled in both timing arms (both recompute the prefix)";
  l.default_seeds = 5;
  l.options = {{"symbols", Option::Int, "16", "symbols of the source sentences"},
               {"min-len", Option::Int, "4", "shortest source"},
               {"max-len", Option::Int, "12", "longest source"},
               {"rows", Option::Int, "8", "sentences decoded together (the batch)"},
               {"steps", Option::Int, "24", "greedy steps compared, cached against recomputed"},
               {"d-model", Option::Int, "64", "model width (FFN 4x)"},
               {"heads", Option::Int, "4", "attention heads"},
               {"kv-heads", Option::Int, "0", "key/value heads (0: as many as heads)"},
               {"layers", Option::Int, "2", "encoder and decoder layers each"},
               {"lengths", Option::Text, "32,64,128,256,512", "positions t at which one step is timed"},
               {"reps", Option::Int, "5", "timed runs of each step (the fastest counts)"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

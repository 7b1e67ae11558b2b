#include "train/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/softmax.h"
#include "nn/masks.h"
#include "tensor/kernels/indexing.h"

namespace gf::train {
namespace {

// Length of each row without padding.
std::vector<int64_t> source_lengths(const Tensor& src, int64_t pad) {
  std::vector<int64_t> len(static_cast<size_t>(src.size(0)), 0);
  for (int64_t b = 0; b < src.size(0); ++b)
    for (int64_t s = 0; s < src.size(1); ++s)
      if (static_cast<int64_t>(src.at({b, s})) != pad) len[b] = s + 1;
  return len;
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  return kernels::index_select(t, Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));
}

// Log-probabilities of the next token for each row: (R, V) float32, from the cache or the prefix.
class StepModel {
 public:
  StepModel(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt, int64_t capacity)
      : model_(model), opt_(opt) {
    src_pad_ = nn::make_pad_mask(src, opt.pad);  // (R, S)
    memory_ = model.encode(src, src_pad_);       // (R, S, D)
    if (opt.use_cache) caches_ = model.transformer->decoder->start_cache(memory_, capacity);
  }

  // prefix: (R, t) tokens so far (starting with <bos>). Returns (R, V) log-probabilities.
  Tensor next_log_probs(const Tensor& prefix) {
    const int64_t t = prefix.size(1);
    Variable h;
    if (opt_.use_cache) {
      Tensor last = prefix.narrow(1, t - 1, 1).contiguous();  // (R, 1)
      h = model_.transformer->decoder->forward_step(model_.embed_tgt(last, t - 1), caches_, src_pad_).output;  // (R, 1, D)
    } else {
      Tensor causal = nn::make_causal_mask(t);  // (t, t)
      h = model_.transformer->decoder->forward(model_.embed_tgt(prefix), memory_, causal, Tensor(), src_pad_).output;  // (R, t, D)
      h = Variable(h.data().narrow(1, t - 1, 1).contiguous());  // (R, 1, D)
    }
    Variable logits = model_.project(h);  // (R, 1, V)
    return log_softmax(logits).data().reshape({logits.size(0), logits.size(2)});  // (R, V)
  }

  // Keeps rows (in this order) of every per-row state.
  void select_rows(const std::vector<int64_t>& rows) {
    src_pad_ = rows_of(src_pad_, rows);
    memory_ = Variable(rows_of(memory_.data(), rows));
    for (auto& c : caches_) c.select_rows(rows);
  }

  void record(DecodeStats& st, int64_t step) const {
    st.steps = step;
    int64_t n = 0, self = 0, cross = 0;
    for (const auto& c : caches_) {
      n += c.bytes();
      // (B, H, positions, d_k) each for K and V: per position H * d_k elements.
      self += 2 * c.self.k.size(1) * c.self.k.size(3) * static_cast<int64_t>(dtype_size(c.self.k.dtype()));
      cross += 2 * c.cross_k.size(1) * c.cross_k.size(3) * static_cast<int64_t>(dtype_size(c.cross_k.dtype()));
    }
    st.cache_bytes_peak = std::max(st.cache_bytes_peak, n);
    st.self_bytes_per_token = self;
    st.cross_bytes_per_src_token = cross;
  }

 private:
  const nn::Seq2SeqTransformer& model_;
  const DecodeOptions& opt_;
  Tensor src_pad_;
  Variable memory_;
  std::vector<nn::DecoderLayerCache> caches_;
};

std::vector<std::vector<int64_t>> greedy(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                         DecodeStats* stats) {
  const int64_t B = src.size(0);
  std::vector<int64_t> limit = source_lengths(src, opt.pad);
  int64_t max_steps = 0;
  for (auto& l : limit) max_steps = std::max(max_steps, l += opt.max_extra);
  if (!opt.stop_at_eos) std::fill(limit.begin(), limit.end(), max_steps);
  StepModel step(model, src, opt, max_steps + 1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  std::vector<int64_t> alive(static_cast<size_t>(B));  // original row of each live row
  for (int64_t b = 0; b < B; ++b) alive[b] = b;
  std::vector<std::vector<int64_t>> prefix(static_cast<size_t>(B), std::vector<int64_t>{opt.bos});
  for (int64_t t = 0; t < max_steps && !alive.empty(); ++t) {
    const int64_t R = static_cast<int64_t>(alive.size());
    Tensor pre = Tensor::empty({R, t + 1}, DType::Int64);  // (R, t+1)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j <= t; ++j) pre.data<int64_t>()[r * (t + 1) + j] = prefix[alive[r]][j];
    Tensor lp = step.next_log_probs(pre).contiguous();  // (R, V)
    if (stats && opt.use_cache) step.record(*stats, t + 1);
    const int64_t V = lp.size(1);
    std::vector<int64_t> keep;
    for (int64_t r = 0; r < R; ++r) {
      const float* row = lp.data<float>() + r * V;
      int64_t best = std::max_element(row, row + V) - row;
      int64_t b = alive[r];
      prefix[b].push_back(best);
      if (best == opt.eos && opt.stop_at_eos) continue;
      out[b].push_back(best);
      if (static_cast<int64_t>(out[b].size()) >= limit[b]) continue;
      keep.push_back(r);
    }
    if (static_cast<int64_t>(keep.size()) != R) {
      std::vector<int64_t> next_alive;
      for (int64_t r : keep) next_alive.push_back(alive[r]);
      alive = next_alive;
      if (!keep.empty()) step.select_rows(keep);
    }
  }
  return out;
}

struct Hypothesis {
  std::vector<int64_t> tokens;  // after <bos>, without <eos>
  double log_prob = 0;
};

std::vector<std::vector<int64_t>> beam_search(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                              DecodeStats* stats) {
  const int64_t B = src.size(0), K = opt.beam;
  std::vector<int64_t> limit = source_lengths(src, opt.pad);
  int64_t max_steps = 0;
  for (auto& l : limit) max_steps = std::max(max_steps, l += opt.max_extra);
  // Every source row repeated K times: row b*K + k is beam k of sentence b.
  std::vector<int64_t> rep;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < K; ++k) rep.push_back(b);
  StepModel step(model, rows_of(src, rep), opt, max_steps + 1);
  auto normalized = [&](const Hypothesis& h) {
    double len = static_cast<double>(h.tokens.size() + 1);  // + <eos>
    return h.log_prob / std::pow(len, opt.length_penalty);
  };
  std::vector<std::vector<Hypothesis>> beams(static_cast<size_t>(B)), finished(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) beams[b].push_back(Hypothesis{});  // one live beam at first
  std::vector<int64_t> row_sentence = rep;                             // sentence of each cache row
  std::vector<int64_t> row_beam(rep.size());
  for (size_t i = 0; i < rep.size(); ++i) row_beam[i] = static_cast<int64_t>(i) % K;
  for (int64_t t = 0; t < max_steps; ++t) {
    const int64_t R = static_cast<int64_t>(row_sentence.size());
    if (R == 0) break;
    Tensor pre = Tensor::empty({R, t + 1}, DType::Int64);  // (R, t+1)
    for (int64_t r = 0; r < R; ++r) {
      const auto& h = beams[row_sentence[r]][std::min<size_t>(row_beam[r], beams[row_sentence[r]].size() - 1)];
      int64_t* p = pre.data<int64_t>() + r * (t + 1);
      p[0] = opt.bos;
      for (int64_t j = 0; j < t; ++j) p[j + 1] = h.tokens[j];
    }
    Tensor lp = step.next_log_probs(pre).contiguous();  // (R, V)
    if (stats && opt.use_cache) step.record(*stats, t + 1);
    const int64_t V = lp.size(1);
    std::vector<int64_t> keep_rows, next_sentence, next_beam;
    std::vector<std::vector<Hypothesis>> next_beams(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      // Candidates from this sentence's live rows.
      struct Cand {
        double score;
        int64_t row, token;
      };
      std::vector<Cand> cands;
      for (int64_t r = 0; r < R; ++r) {
        if (row_sentence[r] != b || row_beam[r] >= static_cast<int64_t>(beams[b].size())) continue;
        const Hypothesis& h = beams[b][row_beam[r]];
        const float* row = lp.data<float>() + r * V;
        // The K best tokens of this row are enough: the sentence keeps at most K.
        std::vector<int64_t> idx(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v) idx[v] = v;
        int64_t take = std::min<int64_t>(K + 1, V);
        std::partial_sort(idx.begin(), idx.begin() + take, idx.end(), [&](int64_t a, int64_t c) { return row[a] > row[c]; });
        for (int64_t j = 0; j < take; ++j) cands.push_back({h.log_prob + row[idx[j]], r, idx[j]});
      }
      std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& c) { return a.score > c.score; });
      for (const Cand& c : cands) {
        if (static_cast<int64_t>(next_beams[b].size()) >= K) break;
        const Hypothesis& parent = beams[b][row_beam[c.row]];
        Hypothesis h{parent.tokens, c.score};
        bool at_limit = static_cast<int64_t>(h.tokens.size()) + 1 >= limit[b];
        if (c.token == opt.eos) {
          finished[b].push_back(std::move(h));
          continue;
        }
        h.tokens.push_back(c.token);
        if (at_limit) {
          finished[b].push_back(std::move(h));
          continue;
        }
        next_beams[b].push_back(std::move(h));
        keep_rows.push_back(c.row);
        next_sentence.push_back(b);
        next_beam.push_back(static_cast<int64_t>(next_beams[b].size()) - 1);
      }
      // A sentence is done once it has K finished hypotheses and none live can beat the best.
      if (static_cast<int64_t>(finished[b].size()) >= K) {
        for (auto it = next_sentence.begin(); it != next_sentence.end();) {
          size_t i = static_cast<size_t>(it - next_sentence.begin());
          if (*it == b) {
            it = next_sentence.erase(it);
            keep_rows.erase(keep_rows.begin() + static_cast<long>(i));
            next_beam.erase(next_beam.begin() + static_cast<long>(i));
          } else {
            ++it;
          }
        }
        next_beams[b].clear();
      }
    }
    beams = std::move(next_beams);
    row_sentence = next_sentence;
    row_beam = next_beam;
    if (!keep_rows.empty()) step.select_rows(keep_rows);
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto& pool = finished[b];
    for (auto& h : beams[b]) pool.push_back(h);
    if (pool.empty()) continue;
    auto best = std::max_element(pool.begin(), pool.end(), [&](const Hypothesis& a, const Hypothesis& c) { return normalized(a) < normalized(c); });
    out[b] = best->tokens;
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> translate_batch(const nn::Seq2SeqTransformer& model, const Tensor& src, const DecodeOptions& opt,
                                                  DecodeStats* stats) {
  check_dtype(src, DType::Int64, "translate_batch");
  if (src.ndim() != 2) throw std::invalid_argument("translate_batch: src must be (B, S), got " + shape_str(src.shape()));
  if (opt.beam < 1) throw std::invalid_argument("translate_batch: beam must be >= 1, got " + std::to_string(opt.beam));
  if (opt.beam > 1 && !opt.stop_at_eos)
    throw std::invalid_argument("translate_batch: stop_at_eos = false is for greedy decoding only, got beam " + std::to_string(opt.beam));
  NoGradGuard ng;
  if (src.size(0) == 0) return {};
  return opt.beam == 1 ? greedy(model, src, opt, stats) : beam_search(model, src, opt, stats);
}

}  // namespace gf::train

#include "train/loop/grad_stats.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

#include "nn/masks.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/plain_file.h"
#include "train/data/line_reader.h"
#include "train/run/batch_loss.h"
#include "train/run/json_fields.h"
#include "train/run/checkpoint.h"
#include "train/plot/svg_chart.h"
#include "train/eval/translator.h"

namespace gf::train {

// ---------------------------------------------------------------- attention entropy

namespace {

double clock_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void check_mask(const Tensor& m, int64_t rows, int64_t cols, const char* what) {
  if (!m.defined()) return;
  GF_CHECK(m.dtype() == DType::Bool && m.ndim() == 2 && m.size(0) == rows && m.size(1) == cols,
           "head_entropy: {} must be bool ({}, {}), got {} {}", what, rows, cols, dtype_name(m.dtype()), shape_str(m.shape()));
}

template <class T>
HeadEntropy entropy_of(const T* w, int64_t B, int64_t H, int64_t L, int64_t S, const bool* qpad, const bool* kpad, bool causal) {
  HeadEntropy r;
  r.heads.assign(static_cast<size_t>(H), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      if (qpad && qpad[b * L + l]) continue;
      double total = 0;  // head 0's row sum: 0 when every key is blocked (the masks are the same for every head)
      const T* row0 = w + ((b * H) * L + l) * S;
      for (int64_t s = 0; s < S; ++s) total += static_cast<double>(row0[s]);
      if (total == 0) continue;
      int64_t visible = 0;
      for (int64_t s = 0; s < S; ++s) visible += (!kpad || !kpad[b * S + s]) && (!causal || s <= l);
      r.uniform += std::log(static_cast<double>(std::max<int64_t>(visible, 1)));
      r.rows += 1;
      for (int64_t h = 0; h < H; ++h) {
        const T* row = w + ((b * H + h) * L + l) * S;
        double e = 0;
        for (int64_t s = 0; s < S; ++s) {
          const double p = static_cast<double>(row[s]);
          if (p > 0) e -= p * std::log(p);
          else if (std::isnan(p)) e = NAN;  // a NaN weight (naive softmax of a blocked row) shows, not hides
        }
        r.heads[static_cast<size_t>(h)] += e;
      }
    }
  if (r.rows > 0) {
    for (double& e : r.heads) e /= static_cast<double>(r.rows);
    r.uniform /= static_cast<double>(r.rows);
  }
  return r;
}

}  // namespace

HeadEntropy head_entropy(const Tensor& weights, const Tensor& query_pad, const Tensor& key_pad, bool causal) {
  GF_CHECK(weights.defined() && weights.ndim() == 4, "head_entropy: weights must be (B, H, L, S), got {}",
           weights.defined() ? shape_str(weights.shape()) : std::string("an undefined tensor"));
  const int64_t B = weights.size(0), H = weights.size(1), L = weights.size(2), S = weights.size(3);
  check_mask(query_pad, B, L, "query_pad");
  check_mask(key_pad, B, S, "key_pad");
  const Tensor q = query_pad.defined() ? query_pad.contiguous() : Tensor();  // (B, L)
  const Tensor k = key_pad.defined() ? key_pad.contiguous() : Tensor();      // (B, S)
  const bool* qp = q.defined() ? q.data<bool>() : nullptr;
  const bool* kp = k.defined() ? k.data<bool>() : nullptr;
  const Tensor w = weights.contiguous();  // (B, H, L, S)
  if (w.dtype() == DType::Float32) return entropy_of(w.data<float>(), B, H, L, S, qp, kp, causal);
  if (w.dtype() == DType::Float64) return entropy_of(w.data<double>(), B, H, L, S, qp, kp, causal);
  GF_FAIL("head_entropy: weights must be float32 or float64, got {}", dtype_name(w.dtype()));
}

std::vector<AttentionSite> attention_sites(const nn::Seq2SeqTransformer& model) {
  std::vector<AttentionSite> out;
  int i = 0;
  for (const auto& layer : *model.transformer->encoder->layers)
    out.push_back({fmt::format("enc{}.self", i++), layer->self_attn.get(), AttentionSite::EncoderSelf});
  i = 0;
  for (const auto& layer : *model.transformer->decoder->layers) {
    out.push_back({fmt::format("dec{}.self", i), layer->self_attn.get(), AttentionSite::DecoderSelf});
    out.push_back({fmt::format("dec{}.cross", i++), layer->multihead_attn.get(), AttentionSite::Cross});
  }
  return out;
}

std::vector<AttentionSite> attention_sites(const nn::DecoderOnlyTransformer& model) {
  std::vector<AttentionSite> out;
  int i = 0;
  for (const auto& layer : *model.transformer->layers)
    out.push_back({fmt::format("layer{}.self", i++), layer->self_attn.get(), AttentionSite::SequenceSelf});
  return out;
}

struct EntropyProbe::Site {
  AttentionSite where;
  std::function<void(const Tensor&)> previous;
  Tensor query_pad, key_pad;  // (B, L) and (B, S) bool for the armed batch; key_pad undefined when unmasked
  bool causal = false;
  std::vector<double> sum;  // (H) entropy summed over counted rows
  double uniform_sum = 0;
  int64_t rows = 0;
};

EntropyProbe::EntropyProbe(const nn::Seq2SeqTransformer& model) : seq2seq_(&model), pad_(model.options().pad) {
  install(attention_sites(model));
}

EntropyProbe::EntropyProbe(const nn::DecoderOnlyTransformer& model) : pad_(model.options().pad) { install(attention_sites(model)); }

void EntropyProbe::install(const std::vector<AttentionSite>& sites) {
  for (const AttentionSite& a : sites) {
    auto site = std::make_unique<Site>();
    site->where = a;
    site->previous = a.attention->weights_peek;
    Site* s = site.get();
    // A peek, not an observer: attention keeps its fused op, so recording leaves training's numbers alone.
    a.attention->weights_peek = [this, s](const Tensor& weights) {
      if (s->previous) s->previous(weights);
      if (!armed_) return;
      const double t0 = clock_seconds();
      const Tensor& w = weights;  // (B, H, L, S)
      GF_CHECK_AS(std::logic_error, w.size(2) == s->query_pad.size(1), "EntropyProbe: {} saw weights {} but was armed for {} query positions",
                  s->where.name, shape_str(w.shape()), s->query_pad.size(1));
      HeadEntropy h = head_entropy(w, s->query_pad, s->key_pad, s->causal);
      if (s->sum.empty()) s->sum.assign(h.heads.size(), 0.0);
      for (size_t k = 0; k < h.heads.size(); ++k) s->sum[k] += h.heads[k] * static_cast<double>(h.rows);
      s->uniform_sum += h.uniform * static_cast<double>(h.rows);
      s->rows += h.rows;
      seconds_ += clock_seconds() - t0;
    };
    sites_.push_back(std::move(site));
  }
}

EntropyProbe::~EntropyProbe() {
  for (auto& s : sites_) s->where.attention->weights_peek = s->previous;
}

void EntropyProbe::arm(const Tensor& src, const Tensor& tgt_in) {
  GF_CHECK_AS(std::logic_error, seq2seq_, "EntropyProbe::arm(src, tgt_in): the probe is on a decoder-only model; use arm(ids)");
  const Tensor src_pad = nn::make_pad_mask(src, pad_);     // (B, S)
  const Tensor tgt_pad = nn::make_pad_mask(tgt_in, pad_);  // (B, T)
  const auto& m = seq2seq_->masks;
  for (auto& s : sites_) {
    switch (s->where.kind) {
      case AttentionSite::EncoderSelf:
        s->query_pad = src_pad, s->key_pad = m.source_padding ? src_pad : Tensor(), s->causal = false;
        break;
      case AttentionSite::DecoderSelf:
        s->query_pad = tgt_pad, s->key_pad = m.target_padding ? tgt_pad : Tensor(), s->causal = m.causal;
        break;
      case AttentionSite::Cross:
        s->query_pad = tgt_pad, s->key_pad = m.source_padding ? src_pad : Tensor(), s->causal = false;
        break;
      case AttentionSite::SequenceSelf:
        break;  // not on an encoder-decoder
    }
    s->sum.clear(), s->uniform_sum = 0, s->rows = 0;
  }
  armed_ = true;
  seconds_ = 0;
}

void EntropyProbe::arm(const Tensor& ids) {
  GF_CHECK_AS(std::logic_error, !seq2seq_, "EntropyProbe::arm(ids): the probe is on an encoder-decoder; use arm(src, tgt_in)");
  const Tensor pad = nn::make_pad_mask(ids, pad_);  // (B, L)
  for (auto& s : sites_) {
    s->query_pad = pad, s->key_pad = pad, s->causal = true;
    s->sum.clear(), s->uniform_sum = 0, s->rows = 0;
  }
  armed_ = true;
  seconds_ = 0;
}

std::vector<std::pair<std::string, HeadEntropy>> EntropyProbe::take() {
  armed_ = false;
  std::vector<std::pair<std::string, HeadEntropy>> out;
  for (auto& s : sites_) {
    HeadEntropy h;
    h.rows = s->rows;
    if (s->rows > 0) {
      for (double x : s->sum) h.heads.push_back(x / static_cast<double>(s->rows));
      h.uniform = s->uniform_sum / static_cast<double>(s->rows);
    }
    out.emplace_back(s->where.name, std::move(h));
  }
  return out;
}

// ---------------------------------------------------------------- parameter groups

namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string p; std::getline(in, p, '.');) parts.push_back(p);
  return parts;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

namespace {

// The group of a parameter inside one layer: p[first] is the layer's child ("self_attn", "linear1", ...).
std::string layer_group(const std::string& layer, const std::vector<std::string>& p, size_t first) {
  const std::string& mod = p[first];
  if ((mod == "self_attn" || mod == "multihead_attn") && first + 1 < p.size()) {
    const std::string a = layer + (mod == "self_attn" ? ".self" : ".cross");
    const std::string& part = p[first + 1];
    if (part == "in_proj_weight" || part == "in_proj_bias" || part == "q_proj") return a + ".q";
    if (part == "k_proj") return a + ".k";
    if (part == "v_proj") return a + ".v";
    if (part == "out_proj") return a + ".out";
  }
  if (starts_with(mod, "linear") || mod == "ff") return layer + ".ffn";  // ff: a registered feed-forward kind
  if (starts_with(mod, "norm")) return layer + ".norm";
  return "";
}

}  // namespace

std::string group_of(const std::string& name) {
  const std::vector<std::string> p = split_dots(name);
  const size_t n = p.size();
  if (n == 2 && p[0] == "src_emb") return "emb.src";
  if (n == 2 && p[0] == "tgt_emb") return "emb.tgt";
  if (n == 2 && p[0] == "emb") return "emb";
  if (n == 2 && p[0] == "out") return "out";
  if (n >= 4 && p[0] == "transformer" && (p[1] == "encoder" || p[1] == "decoder")) {  // the encoder-decoder
    const std::string side = p[1] == "encoder" ? "enc" : "dec";
    if (p[2] == "norm") return side + ".final_norm";
    if (p[2] == "layers" && n >= 6)
      if (std::string g = layer_group(side + p[3], p, 4); !g.empty()) return g;
  }
  if (n >= 3 && p[0] == "transformer" && p[1] == "norm") return "final_norm";  // the decoder-only model
  if (n >= 5 && p[0] == "transformer" && p[1] == "layers")
    if (std::string g = layer_group("layer" + p[2], p, 3); !g.empty()) return g;
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::vector<GradGroup> grad_groups(const std::vector<std::pair<std::string, Variable>>& named) {
  std::vector<GradGroup> groups;
  std::map<std::string, size_t> index;
  auto add = [&](const std::string& group, GradGroup::Piece piece) {
    auto [it, fresh] = index.emplace(group, groups.size());
    if (fresh) groups.push_back({group, {}});
    groups[it->second].pieces.push_back(std::move(piece));
  };
  std::vector<const void*> seen;
  size_t param = 0;
  for (const auto& [name, v] : named) {
    if (std::find(seen.begin(), seen.end(), v.impl().get()) != seen.end()) continue;  // a tied weight's second name
    seen.push_back(v.impl().get());
    const std::string g = group_of(name);
    const bool in_proj = name.size() > 14 && (name.ends_with(".in_proj_weight") || name.ends_with(".in_proj_bias"));
    if (in_proj) {
      const int64_t rows = v.size(0) / 3, row_numel = v.numel() / v.size(0);  // D rows of D (weight) or 1 (bias) each
      const std::string base = g.substr(0, g.size() - 2);                      // "enc0.self"
      const char* parts[] = {".q", ".k", ".v"};
      for (int64_t k = 0; k < 3; ++k)
        add(base + parts[k], {fmt::format("{}[{}:{}]", name, k * rows, (k + 1) * rows), param, k * rows * row_numel, (k + 1) * rows * row_numel});
    } else {
      add(g, {name, param, 0, v.numel()});
    }
    ++param;
  }
  return groups;
}

// ---------------------------------------------------------------- the recorder

namespace {

// Sum of squares of a contiguous float tensor's flat range [begin, end); of (a - b) when b is given.
double sum_sq(const Tensor& a, int64_t begin, int64_t end, const Tensor& b = Tensor()) {
  if (!a.defined()) return 0;
  const Tensor x = a.contiguous(), y = b.defined() ? b.contiguous() : Tensor();
  auto run = [&]<class T>() {
    const T* px = x.data<T>();
    const T* py = y.defined() ? y.data<T>() : nullptr;
    double s = 0;
    for (int64_t i = begin; i < end; ++i) {
      const double d = static_cast<double>(px[i]) - (py ? static_cast<double>(py[i]) : 0.0);
      s += d * d;
    }
    return s;
  };
  if (x.dtype() == DType::Float32) return run.template operator()<float>();
  if (x.dtype() == DType::Float64) return run.template operator()<double>();
  GF_FAIL("grad stats: parameters must be float32 or float64, got {} {}", dtype_name(x.dtype()), shape_str(x.shape()));
}

double ratio(double num, double den) { return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0); }

// 6 significant digits are plenty for a statistic and keep a line a third as long.
double short_number(double x) { return std::isfinite(x) ? std::stod(fmt::format("{:.6g}", x)) : x; }

// The lines of an existing grad_stats.jsonl with step <= last_step; a torn last line (a run killed
// mid-write), or any line that is not a record (parse_stats_record), is dropped. Sets `changed`
// when anything was dropped.
std::vector<StatsJson> read_records(const std::string& path, int64_t last_step, bool& changed) {
  std::vector<StatsJson> kept;
  changed = false;
  for_each_stats_line(path, [&](size_t, const std::string& line) {
    try {
      StatsJson j = parse_stats_record(line);
      if (json_fields::integer_at(j, "step") <= last_step) return kept.push_back(std::move(j));
    } catch (const json_fields::FieldError&) {
    } catch (const nlohmann::json::exception&) {
    }
    changed = true;
  });
  return kept;
}

// Every byte of `text` to fd; std::runtime_error naming `path` when a write fails.
void write_fully(int fd, const std::string& text, const std::string& path) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    GF_CHECK_AS(std::runtime_error, w > 0, "grad stats: writing '{}' failed: {}", path, std::strerror(w < 0 ? errno : EIO));
    done += static_cast<size_t>(w);
  }
}

}  // namespace

GradStatsRecorder::GradStatsRecorder(const TranslationModel& model, const std::string& dir, int64_t every, int64_t resume_step)
    : model_(model), dir_(dir), every_(every) {
  GF_CHECK(every >= 1, "grad stats: the interval must be at least 1 step, got {}", every);
  if (const nn::Seq2SeqTransformer* s = model.seq2seq()) probe_ = std::make_unique<EntropyProbe>(*s);
  else if (const auto* d = dynamic_cast<const nn::DecoderOnlyTransformer*>(&model.module())) probe_ = std::make_unique<EntropyProbe>(*d);
  const auto named = model.module().named_parameters();
  groups_ = grad_groups(named);
  std::vector<const void*> seen;
  for (const auto& [name, v] : named)
    if (std::find(seen.begin(), seen.end(), v.impl().get()) == seen.end()) seen.push_back(v.impl().get()), params_.push_back(v);
  const std::string path = run_file(dir, kJsonl);
  // Its own regular file, never a link planted in the folder: refused before anything is read or written.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    GF_FAIL_AS(std::runtime_error, "grad stats: '{}' is {}; gradflow writes it only as a regular file of its own (remove it)", path,
               file_kind(st.st_mode));
  if (resume_step > 0 && std::filesystem::exists(path)) {
    bool changed = false;
    records_ = read_records(path, resume_step, changed);
    if (changed) {
      std::string text;
      for (const auto& j : records_) text += j.dump() + "\n";
      write_file_atomic(path, text);
    }
  }
  out_ = open_own_file(path, O_WRONLY | O_CREAT | (resume_step > 0 ? O_APPEND : O_TRUNC), "grad stats");
}

GradStatsRecorder::~GradStatsRecorder() {
  if (out_ >= 0) ::close(out_);
}

void GradStatsRecorder::begin_step(int64_t step, const Batch& batch) {
  step_ = due(step) ? step : 0;
  seconds_ = 0;
  if (!step_ || !probe_) return;
  const double t0 = clock_seconds();
  if (model_.seq2seq()) {
    const BatchTensors t = to_tensors(batch);
    probe_->arm(t.src, t.tgt_in);
  } else {
    probe_->arm(to_sequence_tensors(batch, model_.decode_options().bos).input);  // bos is <sep> there
  }
  seconds_ += clock_seconds() - t0;
}

void GradStatsRecorder::after_backward() {
  if (!step_) return;
  const double t0 = clock_seconds();
  grad_sq_.clear();
  for (const auto& g : groups_)
    for (const auto& p : g.pieces) grad_sq_.push_back(sum_sq(params_[p.param].grad(), p.begin, p.end));
  before_.clear();
  for (const auto& v : params_) before_.push_back(v.data().clone());
  seconds_ += clock_seconds() - t0;
}

void GradStatsRecorder::after_update(double loss, double lr) {
  if (!step_) return;
  const double t0 = clock_seconds();
  StatsJson line = {{"step", step_}, {"loss", loss}, {"lr", lr}};
  double g_all = 0, p_all = 0, u_all = 0;
  StatsJson groups = StatsJson::array();
  size_t k = 0;  // piece index into grad_sq_
  for (const auto& group : groups_) {
    double g_sq = 0, p_sq = 0, u_sq = 0;
    StatsJson tensors = StatsJson::array();
    for (const auto& piece : group.pieces) {
      const Tensor& before = before_[piece.param];
      const double gs = grad_sq_[k++];
      const double ps = sum_sq(before, piece.begin, piece.end), us = sum_sq(params_[piece.param].data(), piece.begin, piece.end, before);
      tensors.push_back({{"name", piece.tensor}, {"grad_norm", short_number(std::sqrt(gs))}, {"param_norm", short_number(std::sqrt(ps))},
                         {"update_ratio", short_number(ratio(std::sqrt(us), std::sqrt(ps)))}});
      g_sq += gs, p_sq += ps, u_sq += us;
    }
    groups.push_back({{"name", group.name}, {"grad_norm", short_number(std::sqrt(g_sq))}, {"param_norm", short_number(std::sqrt(p_sq))},
                      {"update_ratio", short_number(ratio(std::sqrt(u_sq), std::sqrt(p_sq)))}, {"tensors", std::move(tensors)}});
    g_all += g_sq, p_all += p_sq, u_all += u_sq;
  }
  // The whole model; the gradient norm is before clipping (what the loss gave, not what was applied).
  line["grad_norm"] = short_number(std::sqrt(g_all));
  line["param_norm"] = short_number(std::sqrt(p_all));
  line["update_ratio"] = short_number(ratio(std::sqrt(u_all), std::sqrt(p_all)));
  line["groups"] = std::move(groups);
  line["attention"] = attention_json();
  // What recording this step cost (entropies, norms, the parameter copy; not writing the line): not a
  // statistic of the run, and the one field that differs between identical runs.
  line["record_seconds"] = short_number(seconds_ + (probe_ ? probe_->seconds() : 0.0) + clock_seconds() - t0);
  write_fully(out_, line.dump() + "\n", run_file(dir_, kJsonl));
  records_.push_back(std::move(line));
  before_.clear();
  step_ = 0;
}

StatsJson GradStatsRecorder::attention_json() {
  StatsJson attention = StatsJson::array();
  if (!probe_) return attention;
  for (const auto& [name, h] : probe_->take()) {
    std::vector<double> heads;  // (H)
    for (double e : h.heads) heads.push_back(short_number(e));
    attention.push_back({{"name", name}, {"entropy", heads}, {"uniform", short_number(h.uniform)}, {"rows", h.rows}});
  }
  return attention;
}

void GradStatsRecorder::write_svg() const {
  if (!records_.empty()) write_file_atomic(run_file(dir_, kSvg), grad_stats_svg(records_));
}

// ---------------------------------------------------------------- reading grad_stats.jsonl

namespace {

using json_fields::as_array;
using json_fields::as_object;
using json_fields::at_index;
using json_fields::member;

int64_t step_of(const StatsJson& record) {
  const int64_t step = json_fields::integer_at(record, "step");
  if (step < 0 || step > kMaxStateCount) json_fields::bad_field("step", record["step"], "an integer from 0 to 10^15");
  return step;
}

// The lines of a reader, each non-empty one to each(); its errors (a line over the bound, invalid
// UTF-8) as std::runtime_error: a damaged file, not a bad argument.
void each_line(LineReader& in, const std::function<void(size_t, const std::string&)>& each) {
  std::string line;
  for (;;) {
    try {
      if (!in.next(line)) return;
    } catch (const std::invalid_argument& e) {
      GF_FAIL_AS(std::runtime_error, "grad stats: {}", e.what());
    }
    if (!line.empty()) each(in.lines(), line);
  }
}

}  // namespace

double stats_number(const StatsJson& v, const std::string& key) {
  if (v.is_null()) return NAN;
  if (!v.is_number()) json_fields::bad_field(key, v, "a number or null");
  return v.get<double>();
}

double stats_number_at(const StatsJson& obj, const char* key, const std::string& path) {
  return stats_number(member(obj, key, path), path + key);
}

StatsJson parse_stats_record(std::string_view line) {
  StatsJson j = json_fields::parse<StatsJson>(line, json_fields::kMaxRunJsonDepth);
  as_object(j, "the line");
  (void)step_of(j);
  (void)stats_number_at(j, "loss");
  (void)stats_number_at(j, "lr");
  const StatsJson& groups = as_array(member(j, "groups"), "groups");
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string at = at_index("groups", i) + ".";
    as_object(groups[i], at_index("groups", i));
    (void)json_fields::string_at(groups[i], "name", at);
    for (const char* stat : {"grad_norm", "param_norm", "update_ratio"}) (void)stats_number_at(groups[i], stat, at);
  }
  if (const StatsJson* attention = json_fields::find_member(j, "attention")) {
    as_array(*attention, "attention");
    for (size_t i = 0; i < attention->size(); ++i) {
      const StatsJson& a = (*attention)[i];
      const std::string at = at_index("attention", i) + ".";
      as_object(a, at_index("attention", i));
      (void)json_fields::string_at(a, "name", at);
      const StatsJson& entropy = as_array(member(a, "entropy", at), at + "entropy");
      for (size_t h = 0; h < entropy.size(); ++h) (void)stats_number(entropy[h], at_index(at + "entropy", h));
      (void)stats_number_at(a, "uniform", at);
    }
  }
  return j;
}

void for_each_stats_line(const std::string& path, const std::function<void(size_t, const std::string&)>& each) {
  struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
  } f{open_regular_file(path, "grad stats")};
  struct stat st;
  GF_CHECK_AS(std::runtime_error, ::fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) <= kMaxGradStatsBytes,
              "grad stats: '{}' holds {} bytes, more than the {} read from such a file", path, static_cast<uint64_t>(st.st_size),
              kMaxGradStatsBytes);
  LineReader in(f.fd, path, kMaxGradStatsLineBytes);
  each_line(in, each);
}

void for_each_stats_line_of(std::string_view text, const std::string& name, const std::function<void(size_t, const std::string&)>& each) {
  LineReader in(text, name, kMaxGradStatsLineBytes);
  each_line(in, each);
}

// ---------------------------------------------------------------- the figure

namespace {

// rows x steps of one statistic; row names in order of first appearance; a missing cell is NaN.
ValueMap stat_map(const std::vector<StatsJson>& records, const std::string& title, const std::string& stat, const std::string& label) {
  ValueMap m;
  m.title = title;
  m.x_label = "step";
  m.value_label = label;
  m.log_scale = true;
  std::map<std::string, size_t> row;
  for (size_t c = 0; c < records.size(); ++c) {
    m.col_labels.push_back(std::to_string(step_of(records[c])));
    for (const auto& g : as_array(member(records[c], "groups"), "groups")) {
      const std::string name = json_fields::string_at(as_object(g, "groups[]"), "name", "groups[].");
      auto [it, fresh] = row.emplace(name, m.row_labels.size());
      if (fresh) m.row_labels.push_back(name), m.values.emplace_back(records.size(), NAN);
      m.values[it->second][c] = stats_number_at(g, stat.c_str(), "groups[].");
    }
  }
  return m;
}

// 0 and round steps up to `last`, at most 7 ticks.
std::vector<double> step_ticks(int64_t last) {
  int64_t every = 1;
  for (int64_t m = 1; every * 6 < last; m *= 10)
    for (int64_t c : {1, 2, 5, 10})
      if (every = c * m; every * 6 >= last) break;
  std::vector<double> t;
  for (int64_t s = 0; s <= last; s += every) t.push_back(static_cast<double>(s));
  if (t.back() < static_cast<double>(last)) t.push_back(static_cast<double>(t.back() + every));
  return t;
}

// (site, head) x steps of entropy / uniform: 1 is attending evenly to every visible key, 0 to one.
ValueMap entropy_map(const std::vector<StatsJson>& records) {
  ValueMap m;
  m.title = "attention entropy per head / its maximum log(keys)";
  m.x_label = "step";
  m.value_label = "H / log(visible keys)";
  m.lo = 0, m.hi = 1;
  std::map<std::string, size_t> row;
  for (size_t c = 0; c < records.size(); ++c) {
    m.col_labels.push_back(std::to_string(step_of(records[c])));
    const StatsJson* attention = json_fields::find_member(records[c], "attention");
    if (!attention) continue;
    for (const auto& a : as_array(*attention, "attention")) {
      as_object(a, "attention[]");
      const double uniform = stats_number_at(a, "uniform", "attention[].");
      const StatsJson& entropy = as_array(member(a, "entropy", "attention[]."), "attention[].entropy");
      const std::string site = json_fields::string_at(a, "name", "attention[].");
      for (size_t h = 0; h < entropy.size(); ++h) {
        const std::string name = fmt::format("{}.h{}", site, h);
        auto [it, fresh] = row.emplace(name, m.row_labels.size());
        if (fresh) m.row_labels.push_back(name), m.values.emplace_back(records.size(), NAN);
        m.values[it->second][c] = uniform > 0 ? stats_number(entropy[h], "attention[].entropy[]") / uniform : NAN;
      }
    }
  }
  return m;
}

}  // namespace

std::string grad_stats_svg(const std::vector<StatsJson>& all) {
  GF_CHECK(!all.empty(), "grad_stats_svg: no recorded step to draw");
  // At most kMaxColumns columns: every k-th line and the last.
  const size_t k = (all.size() + kMaxColumns - 1) / kMaxColumns;
  std::vector<StatsJson> records;
  for (size_t i = 0; i < all.size(); i += k) records.push_back(all[i]);
  if ((all.size() - 1) % k != 0) records.push_back(all.back());
  const int64_t first = step_of(all.front()), last = step_of(all.back());

  Chart loss{"training loss at the recorded steps", "step", "loss", false, false, {}, {}};
  ChartSeries s{"loss", {}, {}, {}, {}, false, ""};
  for (const auto& r : all) s.x.push_back(static_cast<double>(step_of(r))), s.y.push_back(stats_number_at(r, "loss"));
  loss.series.push_back(std::move(s));
  loss.x_ticks = step_ticks(last);  // the axis spans the run, not beyond
  std::vector<Panel> panels;
  for (ValueMap m : {stat_map(records, "gradient norm (before clipping)", "grad_norm", "|grad|"),
                     stat_map(records, "update / parameter: |p_after - p_before| / |p_before|", "update_ratio", "ratio"),
                     stat_map(records, "parameter norm", "param_norm", "|p|"), entropy_map(records)})
    if (!m.values.empty()) panels.push_back(std::move(m));  // no attention recorded (a model the probe does not know): no map
  panels.push_back(std::move(loss));
  const std::string shown = k > 1 ? fmt::format(", one in {} drawn", k) : "";
  return figure_svg(fmt::format("gradient statistics: {} recorded steps ({} to {}){}", all.size(), first, last, shown), panels, 2);
}

}  // namespace gf::train

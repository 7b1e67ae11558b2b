// The measurements behind lab `gqa` (lab/labs/gqa.cpp): the multi-head expansion of a grouped
// model, Ainslie et al.'s mean-pooling conversion, the shared head's gradient against its parts, and
// one arm trained and measured.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "lab/common.h"
#include "lab/gqa.h"
#include "lab/kvcache.h"
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

void check_groups(const std::vector<int64_t>& g, int64_t heads) {
  const std::string text = fmt::format("{}", fmt::join(g, ","));
  GF_CHECK(std::adjacent_find(g.begin(), g.end(), std::greater_equal<>()) == g.end(), "lab gqa: --groups must increase, got '{}'", text);
  GF_CHECK(g.size() >= 4, "lab gqa: --groups needs 4 or more group sizes for the dose-response, got {} ('{}')", g.size(), text);
  GF_CHECK(g[0] == 1 && g[1] == 2, "lab gqa: --groups must start 1,2 (the multi-head checkpoint, and the heads/2 arm gqa_near_mha reads), got '{}'",
           text);
  GF_CHECK(g.back() == heads, "lab gqa: --groups must end at --heads {} (multi-query, the arm shared_grad_mqa reads), got '{}'", heads, text);
  for (int64_t G : g) GF_CHECK(heads % G == 0, "lab gqa: group size {} of --groups does not divide --heads {}", G, heads);
}

namespace {

// A float64 copy of a model's weights, with its options.
std::unique_ptr<nn::Seq2SeqTransformer> float64_copy(const nn::Seq2SeqTransformer& m) {
  auto c = std::make_unique<nn::Seq2SeqTransformer>(m.options(), 1);
  c->to(DType::Float64);
  c->load_state_dict(m.state_dict());
  return c;
}

nn::Seq2SeqOptions options_for(const GqaSettings& s, const IdData& data, int64_t kv) {
  nn::Seq2SeqOptions o = small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false);
  o.layer.kv_heads = kv;
  return o;
}

}  // namespace

std::unique_ptr<nn::Seq2SeqTransformer> gqa_checkpoint(const GqaSettings& s, const IdData& data, uint64_t seed) {
  auto m = std::make_unique<nn::Seq2SeqTransformer>(options_for(s, data, s.heads), seed);
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = s.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = seed;
  fit(*m, data.train, fo);
  m->eval();
  return m;
}

GqaArm train_gqa_arm(const GqaSettings& s, const IdData& data, const RealData* real, int64_t kv, bool quality_only, uint64_t seed,
                     const nn::Seq2SeqTransformer* start) {
  GqaArm a;
  a.kv = kv;
  const train::BatchTensors first = train::to_tensors(batches(data.train, s.max_tokens, seed).front());
  if (!quality_only) {
    nn::Seq2SeqTransformer fresh(options_for(s, data, kv), seed);
    a.init = shared_head_grads(*float64_copy(fresh), first);
  }
  std::unique_ptr<nn::Seq2SeqTransformer> model;
  FitOptions fo;
  fo.lr = s.lr, fo.max_tokens = s.max_tokens;
  if (start) {
    model = pool_to_grouped(*start, kv);
    model->eval();
    a.converted = teacher_forced(*model, data.test);
    fo.steps = s.uptrain, fo.warmup = s.uptrain / 10, fo.lr = s.uptrain_lr, fo.divergence_factor = 0;
    fo.seed = seed + 1000003;  // batches in another order than the checkpoint's first ones
  } else {
    model = std::make_unique<nn::Seq2SeqTransformer>(options_for(s, data, kv), seed);
    fo.steps = s.steps + s.uptrain, fo.warmup = (s.steps + s.uptrain) / 10, fo.seed = seed;
  }
  a.kv_built = model->options().layer.key_value_heads();
  a.params = model->num_parameters();
  const FitResult f = fit(*model, data.train, fo);
  a.losses = f.losses, a.diverged = f.diverged;
  model->eval();
  a.tf = teacher_forced(*model, data.test);
  if (quality_only) return a;
  a.fr = free_running_accuracy(*model, data.test);
  if (real) a.bleu = greedy_bleu(*model, *real, real->ids.valid, real->valid_refs, static_cast<size_t>(s.task.eval)).score;
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

void to_json(nlohmann::json& j, const GqaArm& a) {
  j = {{"kv_heads", a.kv},
       {"kv_heads_built", a.kv_built},
       {"parameters", a.params},
       {"losses", a.losses},
       {"converted_tf_accuracy", a.converted.accuracy},
       {"tf_accuracy", a.tf.accuracy},
       {"tf_nll", a.tf.nll},
       {"free_running_tokens", a.fr.tokens},
       {"free_running_exact", a.fr.exact},
       {"init_ratio", a.init.ratio},
       {"init_cosine", a.init.cosine},
       {"trained_ratio", a.trained.ratio},
       {"trained_cosine", a.trained.cosine},
       {"bytes_per_token", a.bytes_per_token}};
  if (!std::isnan(a.bleu)) j["bleu_valid"] = a.bleu;
}

}  // namespace gf::lab

// The attention explorer's data for one sentence (declared in app/report_attention.h).
#include "app/report_attention.h"

#include <cmath>
#include <stdexcept>

#include "app/report_page.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "train/data/utf8.h"

namespace gf::app {
namespace {

using lab::heads_of;
using lab::Map;
using train::Vocab;

// Every layer's self-attention weights during one forward of the decoder-only model (row 0 of the
// batch); the observers are removed when it goes out of scope.
class StackRecorder {
 public:
  explicit StackRecorder(const nn::DecoderOnlyTransformer& model) : model_(model) {
    auto& layers = *model.transformer->layers;
    maps.resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) layers[l].self_attn->weights_observer = [this, l](const Variable& w) { maps[l] = heads_of(w.data()); };
  }
  ~StackRecorder() {
    for (auto& layer : *model_.transformer->layers) layer->self_attn->weights_observer = nullptr;
  }
  StackRecorder(const StackRecorder&) = delete;
  StackRecorder& operator=(const StackRecorder&) = delete;
  std::vector<std::vector<Map>> maps;  // [layer][head]

 private:
  const nn::DecoderOnlyTransformer& model_;
};

// ---------------------------------------------------------------- JSON of the maps

// Weights and shares in [0, 1] to 3 decimals (what a colour or a tooltip shows, and half the
// characters of 4 significant digits: the maps are most of the page); other values (gradient x
// input, log p) to 4 significant digits.
enum class Precision { Share, Value };

double rounded(double v, Precision p) {
  if (p == Precision::Value) return round_significant(v);
  return std::isfinite(v) ? std::round(v * 1000) / 1000 : v;
}

nlohmann::json values_json(const std::vector<double>& row, Precision p) {
  nlohmann::json r = nlohmann::json::array();
  for (double v : row) r.push_back(rounded(v, p));
  return r;
}

nlohmann::json map_json(const Map& m, Precision p) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : m) rows.push_back(values_json(row, p));
  return rows;
}

// [layer][head] -> JSON arrays of the same nesting.
nlohmann::json layers_json(const std::vector<std::vector<Map>>& layers) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& heads : layers) {
    nlohmann::json hs = nlohmann::json::array();
    for (const Map& m : heads) hs.push_back(map_json(m, Precision::Share));
    out.push_back(std::move(hs));
  }
  return out;
}

// One attention of the explorer: its queries and keys, and [layer][head] maps (queries x keys).
// target_rows[t]: the query row of output token t (null where output tokens are not queries).
// note: how to read the view's rows, shown under it.
nlohmann::json view_json(const std::string& id, const std::string& label, const std::string& note, const std::vector<std::string>& queries,
                         const std::vector<std::string>& keys, const std::vector<std::vector<Map>>& layers, const nlohmann::json& target_rows) {
  return {{"id", id},       {"label", label},           {"note", note}, {"queries", queries}, {"keys", keys},
          {"target_rows", target_rows}, {"layers", layers_json(layers)}};
}

std::vector<std::string> tokens_of(const Vocab& v, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (int64_t id : ids) out.push_back(v.token(id));
  return out;
}

// The source tokens as shown: the text's own pieces, marked where the vocabulary lacks them.
std::vector<std::string> source_labels(const train::Tokens& pieces, const std::vector<int64_t>& ids) {
  std::vector<std::string> out;
  for (size_t i = 0; i < pieces.size(); ++i) out.push_back(ids[i] == Vocab::kUnk ? pieces[i] + " (unk)" : pieces[i]);
  return out;
}

nlohmann::json seq2seq_sentence(const train::Translator& t, const train::Tokens& pieces, const std::vector<int64_t>& src_ids,
                                std::vector<int64_t> out_ids, nlohmann::json s) {
  const nn::Seq2SeqTransformer& model = t.seq2seq();
  out_ids.push_back(Vocab::kEos);
  const lab::AttributionMaps m = lab::attribution_maps(model, src_ids, out_ids);
  std::vector<Map> enc_mean, dec_mean, cross_mean;
  for (const auto& l : m.enc_self) enc_mean.push_back(lab::head_mean(l));
  for (const auto& l : m.dec_self) dec_mean.push_back(lab::head_mean(l));
  for (const auto& l : m.cross) cross_mean.push_back(lab::head_mean(l));
  const lab::Rollout r = lab::attention_rollout(enc_mean, dec_mean, cross_mean);

  const std::vector<std::string> src = source_labels(pieces, src_ids), outputs = tokens_of(t.tgt_vocab, out_ids);
  std::vector<std::string> dec_in{"<bos>"};
  dec_in.insert(dec_in.end(), outputs.begin(), outputs.end() - 1);
  nlohmann::json diagonal = nlohmann::json::array();  // output token t is the query at decoder position t
  for (size_t i = 0; i < outputs.size(); ++i) diagonal.push_back(i);
  const std::string decoder_rows = "Decoder rows are labelled by the token they read; the row of <bos> predicts the first output token, and so on.";
  s["views"] = {view_json("enc_self", "encoder self-attention", "Every source token attends to every source token.", src, src, m.enc_self, nullptr),
                view_json("dec_self", "decoder self-attention (causal)", decoder_rows + " A position sees itself and earlier ones.", dec_in,
                          dec_in, m.dec_self, diagonal),
                view_json("cross", "cross-attention (decoder -> source)", decoder_rows, dec_in, src, m.cross, diagonal)};
  s["inputs"] = src;
  s["outputs"] = outputs;
  s["log_probs"] = values_json(m.log_probs, Precision::Value);
  s["grad_x_input"] = map_json(m.grad_dot, Precision::Value);
  s["rollout"] = map_json(r.source, Precision::Share);
  s["rollout_note"] = "the source part of the decoder's rollout, each row divided by its source share";
  s["rollout_source_share"] = values_json(r.source_share, Precision::Share);
  return s;
}

nlohmann::json decoder_only_sentence(const train::Translator& t, const nn::DecoderOnlyTransformer& model, const train::Tokens& pieces,
                                     const std::vector<int64_t>& src_ids, std::vector<int64_t> out_ids, nlohmann::json s) {
  const int64_t sep = t.default_decode_options().bos;
  std::vector<int64_t> prompt = src_ids;
  prompt.push_back(sep);
  out_ids.push_back(Vocab::kEos);
  const StackMaps m = decoder_only_maps(model, prompt, out_ids);
  const std::vector<std::string> outputs = tokens_of(t.tgt_vocab, out_ids);
  std::vector<std::string> seq = source_labels(pieces, src_ids);
  seq.push_back(t.src_vocab.token(sep));
  seq.insert(seq.end(), outputs.begin(), outputs.end() - 1);
  nlohmann::json rows = nlohmann::json::array();  // output token t is the query at position P - 1 + t
  for (size_t i = 0; i < outputs.size(); ++i) rows.push_back(prompt.size() - 1 + i);
  s["views"] = {view_json("self", "self-attention (causal)",
                          "One sequence: the source, <sep>, then the output so far. Rows are labelled by the token they read; the row of <sep> "
                          "predicts the first output token, and so on. A position sees itself and earlier ones.",
                          seq, seq, m.self, rows)};
  s["inputs"] = seq;
  s["prompt_length"] = prompt.size();
  s["outputs"] = outputs;
  s["log_probs"] = values_json(m.log_probs, Precision::Value);
  s["grad_x_input"] = map_json(m.grad_dot, Precision::Value);
  s["rollout"] = map_json(m.rollout, Precision::Share);
  s["rollout_note"] = "the row of the stack's rollout at the position that predicts the token";
  return s;
}

}  // namespace

Map stack_rollout(const std::vector<Map>& layers) {
  GF_CHECK(!layers.empty(), "stack_rollout: no layers");
  const size_t L = layers[0].size();
  Map r(L, std::vector<double>(L, 0.0));
  for (size_t i = 0; i < L; ++i) r[i][i] = 1;
  for (size_t l = 0; l < layers.size(); ++l) {
    Map a = layers[l];
    GF_CHECK(a.size() == L, "stack_rollout: layer {} has {} rows, layer 0 has {}", l, a.size(), L);
    for (size_t i = 0; i < L; ++i) {
      GF_CHECK(a[i].size() == L, "stack_rollout: layer {} row {} has {} values for {} rows", l, i, a[i].size(), L);
      for (double& v : a[i]) v *= 0.5;
      a[i][i] += 0.5;  // the residual connection, as Abnar and Zuidema add it
    }
    r = lab::map_product(a, r);  // (L, L)
  }
  return r;
}

StackMaps decoder_only_maps(const nn::DecoderOnlyTransformer& model, const std::vector<int64_t>& prompt, const std::vector<int64_t>& out) {
  GF_CHECK(prompt.size() >= 1, "decoder_only_maps: the prompt is empty");
  GF_CHECK(!out.empty() && out.back() == Vocab::kEos, "decoder_only_maps: the output ({} tokens) must end with <eos>", out.size());
  const int64_t P = static_cast<int64_t>(prompt.size()), T = static_cast<int64_t>(out.size()), L = P + T - 1;
  const int64_t D = model.options().layer.d_model;
  std::vector<int64_t> seq = prompt;
  seq.insert(seq.end(), out.begin(), out.end() - 1);
  Tensor x1;
  {
    NoGradGuard ng;
    const Tensor ids = Tensor::from_vector(seq, {1, L});                                              // (1, L)
    x1 = (model.emb->forward(ids) * std::sqrt(static_cast<double>(D))).data().select(0, 0).contiguous();  // (L, D)
  }
  // T copies of the sequence: copy t's loss is -log p(out[t]) at position P - 1 + t alone, so one
  // backward gives every output token's gradient, each in its own copy.
  EnableGradGuard grad_on;
  Variable x(x1.reshape({1, L, D}).expand({T, L, D}).contiguous(), true);  // (T, L, D)
  StackRecorder rec(model);
  Variable h = model.drop->forward(model.pos->forward(x));                                 // (T, L, D)
  Variable logits = model.out->forward(model.transformer->forward(h, Tensor(), nn::make_causal_mask(L)));  // (T, L, V)
  const int64_t V = logits.size(2);
  std::vector<int64_t> labels(static_cast<size_t>(T * L), Vocab::kPad);  // (T, L): out[t] at (t, P - 1 + t)
  for (int64_t t = 0; t < T; ++t) labels[t * L + P - 1 + t] = out[t];
  // cross_entropy averages over the T labelled positions; times T it is -sum_t log p(out[t]).
  Variable loss = cross_entropy(reshape(logits, {T * L, V}), Tensor::from_vector(labels, {T * L}), Vocab::kPad) * static_cast<double>(T);  // ()
  loss.backward();

  StackMaps m;
  m.self = rec.maps;
  const Tensor lg = logits.data().to(DType::Float64).contiguous();  // (T, L, V)
  const Tensor g = x.grad().to(DType::Float64).contiguous();        // (T, L, D): d(-sum log p) / dx
  const Tensor xe = x1.to(DType::Float64).contiguous();             // (L, D)
  m.grad_dot.assign(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(L)));
  for (int64_t t = 0; t < T; ++t) {
    m.log_probs.push_back(lab::log_softmax_at(lg.data<double>() + (t * L + P - 1 + t) * V, V, out[t]));
    for (int64_t j = 0; j < L; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < D; ++k) dot -= g.data<double>()[(t * L + j) * D + k] * xe.data<double>()[j * D + k];  // minus: the gradient of +log p
      m.grad_dot[t][j] = dot;
    }
  }
  std::vector<Map> means;
  for (const auto& heads : m.self) means.push_back(lab::head_mean(heads));
  const Map r = stack_rollout(means);  // (L, L)
  for (int64_t t = 0; t < T; ++t) m.rollout.push_back(r[P - 1 + t]);
  return m;
}

nlohmann::json sentence_report(const train::Translator& t, const std::string& source, const std::string& reference) {
  if (size_t bad = train::utf8::find_invalid(source); bad != std::string::npos)
    GF_FAIL_AS(std::invalid_argument, "report: the source sentence is not valid UTF-8 (byte {})", bad);
  const train::Tokens pieces = t.segmenters.src.split(source);  // words, or the run's subword pieces
  GF_CHECK_AS(std::invalid_argument, !pieces.empty(), "report: a source sentence must hold at least one token");
  GF_CHECK_AS(std::invalid_argument, static_cast<int64_t>(pieces.size()) <= t.config.max_len,
              "report: the source sentence has {} tokens; the model takes at most {}: \"{}\"", pieces.size(), t.config.max_len, source);
  const std::vector<int64_t> src_ids = t.src_vocab.encode(pieces);
  std::vector<int64_t> out_ids;
  {
    NoGradGuard ng;
    const Tensor src = Tensor::from_vector(src_ids, {1, static_cast<int64_t>(src_ids.size())});  // (1, S)
    out_ids = t.net->translate(src, t.default_decode_options(), nullptr).at(0);
  }
  nlohmann::json s = {{"source", source}, {"output", t.segmenters.tgt.join(tokens_of(t.tgt_vocab, out_ids))}};
  s["reference"] = reference.empty() ? nlohmann::json(nullptr) : nlohmann::json(reference);
  if (t.net->seq2seq()) return seq2seq_sentence(t, pieces, src_ids, std::move(out_ids), std::move(s));
  if (const auto* d = dynamic_cast<const nn::DecoderOnlyTransformer*>(&t.net->module()))
    return decoder_only_sentence(t, *d, pieces, src_ids, std::move(out_ids), std::move(s));
  GF_FAIL("report: no attention explorer for the run's architecture '{}'", t.config.arch);
}

}  // namespace gf::app

// The attention explorer's data for one sentence (declared in app/report_attention.h).
#include "app/report_attention.h"

#include <cmath>
#include <stdexcept>

#include "app/report_page.h"
#include "autograd/grad_mode.h"
#include "tensor/check.h"
#include "train/data/utf8.h"
#include "train/inspect/attribution.h"
#include "train/inspect/decoder_only.h"

namespace gf::app {
namespace {

namespace inspect = train::inspect;
using inspect::Map;
using train::Vocab;

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
  const inspect::AttributionMaps m = inspect::attribution_maps(model, src_ids, out_ids);
  std::vector<Map> enc_mean, dec_mean, cross_mean;
  for (const auto& l : m.enc_self) enc_mean.push_back(inspect::head_mean(l));
  for (const auto& l : m.dec_self) dec_mean.push_back(inspect::head_mean(l));
  for (const auto& l : m.cross) cross_mean.push_back(inspect::head_mean(l));
  const inspect::Rollout r = inspect::attention_rollout(enc_mean, dec_mean, cross_mean);

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
  const inspect::StackMaps m = inspect::decoder_only_maps(model, prompt, out_ids);
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

#include "train/eval/translator.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "nn/decode_layout.h"
#include "tensor/check.h"
#include "tensor/io/safetensors.h"
#include "train/run/batch_loss.h"
#include "train/run/checkpoint.h"
#include "train/run/memory_estimate.h"
#include "train/data/utf8.h"

namespace gf::train {
namespace fs = std::filesystem;

std::string run_file(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

namespace {

// A damaged best.safetensors: the latest checkpoint may still serve.
std::string latest_instead(const std::string& run_dir) {
  if (run_dir.empty() || !fs::exists(run_file(run_dir, "state.json"))) return "";
  return fmt::format(" (the run's latest checkpoint can be used instead: --model {})", run_file(run_dir, load_state(run_dir).model_file));
}

// The weights file's header (no tensor data read) against the config, before the model is built:
// a config whose model holds more than twice the checkpoint's values (a corrupt or foreign
// config.json, d_model 100000 beside a small checkpoint) is refused here, naming both files and
// both sizes, so nothing of its size is allocated. A smaller difference (a tensor missing, extra
// or mis-shaped) is left to load_state_dict, which names the tensor, after building a model no
// larger than twice the checkpoint. The other way round, a checkpoint holding more than twice the
// config's values (a file made to be huge, sparse on disk) is refused before any of its data is
// read: the weights file is bounded by the model it is for.
void check_checkpoint_fits(const Translator& t, const std::string& cfg, const std::string& run_dir) {
  std::vector<SafetensorsEntry> entries;
  try {
    entries = read_safetensors_header(t.weights_file);
  } catch (const std::exception& e) {
    const std::string instead = latest_instead(run_dir);
    if (instead.empty()) throw;
    GF_FAIL_AS(std::runtime_error, "{}{}", e.what(), instead);
  }
  double values = 0;
  for (const SafetensorsEntry& e : entries) {
    double n = 1;
    for (int64_t d : e.shape) n *= static_cast<double>(d);
    values += n;
  }
  const double expected = checkpoint_values(t.config, t.src_vocab.size(), t.tgt_vocab.size());
  GF_CHECK_AS(std::runtime_error, expected <= 2 * values && values <= 2 * expected,
              "'{}' does not fit the model of {}: it holds {:.0f} values, and that config (d_model {}, {} layers, ff {}, vocabularies of {} "
              "and {} tokens) describes {:.0f}",
              t.weights_file, cfg, values, t.config.layer.d_model, t.config.layers, t.config.layer.dim_feedforward, t.src_vocab.size(),
              t.tgt_vocab.size(), expected);
}

// t.weights_file into t.net; errors name the file (a run folder holds several) and, in a run
// folder, the latest checkpoint to use instead of a broken one. `recorded`: the digest a state of
// the folder records for the file ("" when none names it).
void load_weights(Translator& t, const std::string& cfg, const std::string& run_dir, const std::string& recorded) {
  SafetensorsFile f;
  try {
    f = load_recorded(t.weights_file, recorded);
  } catch (const std::exception& e) {
    const std::string instead = latest_instead(run_dir);
    if (instead.empty()) throw;
    GF_FAIL_AS(std::runtime_error, "{}{}", e.what(), instead);
  }
  try {
    t.net->module().load_state_dict(f.tensors, true);
  } catch (const std::exception& e) {
    GF_FAIL_AS(std::runtime_error, "'{}' does not fit the model of {}: {}", t.weights_file, cfg, e.what());
  }
}

// A translation as one line of text: a subword model's byte pieces decode to any byte, a line
// break (<0x0A>, <0x0D>) among them, which would break translate's one output line per input line;
// each vertical whitespace character becomes a space.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f') c = ' ';
  return text;
}

}  // namespace

Translator Translator::load(const std::string& path, DType weights) {
  fs::path p(path);
  GF_CHECK_AS(std::runtime_error, fs::exists(p), "--model '{}' does not exist", path);
  std::string dir = fs::is_directory(p) ? p.string() : p.parent_path().string();
  if (dir.empty()) dir.assign(1, '.');  // (not = ".": GCC 12 warns falsely, -Wrestrict)
  Translator t;
  std::string cfg = run_file(dir, "config.json");
  GF_CHECK_AS(std::runtime_error, fs::exists(cfg), "'{}' has no config.json: not a gradflow run folder", dir);
  t.config = RunConfig::read(cfg);
  RunVocabularies v = load_run_vocabularies(t.config, dir);
  t.segmenters = std::move(v.segmenters);
  t.src_vocab = std::move(v.src);
  t.tgt_vocab = std::move(v.tgt);
  std::string recorded;  // the digest state.json records for the weights, when it names them
  if (fs::is_directory(p)) {
    if (fs::exists(run_file(dir, "best.safetensors"))) {
      t.weights_file = run_file(dir, "best.safetensors");
    } else {
      const RunState state = load_state(dir);
      t.weights_file = run_file(dir, state.model_file);
      recorded = state.model_digest;
    }
  } else {
    t.weights_file = p.string();
    recorded = recorded_digest(dir, p.filename().string());
  }
  // Before anything is built: the checkpoint must be this config's model, and the model must fit.
  check_checkpoint_fits(t, cfg, fs::is_directory(p) ? dir : "");
  check_decoding_memory(t.config, t.src_vocab.size(), t.tgt_vocab.size(), cfg);
  t.net = make_translation_model(t.config, t.src_vocab, t.tgt_vocab, 1);
  load_weights(t, cfg, fs::is_directory(p) ? dir : "", recorded);  // the file's tensors are freed before the weights are laid out
  t.net->module().eval();
  nn::lay_out_for_decoding(t.net->module(), weights);  // this model only translates and scores
  return t;
}

const nn::Seq2SeqTransformer& Translator::seq2seq() const {
  if (const nn::Seq2SeqTransformer* m = net->seq2seq()) return *m;
  GF_FAIL_AS(std::runtime_error, "this needs an encoder-decoder model; the run's --arch is {}", config.arch);
}

DecodeOptions Translator::default_decode_options() const { return net->decode_options(); }

double Translator::mean_nll(const std::vector<TokenPair>& pairs) const {
  std::vector<EncodedPair> enc = encode_pairs(segment_pairs(pairs, segmenters), src_vocab, tgt_vocab);
  BatchPlan plan(enc, config.max_tokens, 0);
  return evaluate_loss(*net, plan);
}

std::vector<std::string> Translator::translate(const std::vector<std::string>& sentences, const DecodeOptions& opt, int64_t batch_size,
                                               DecodeStats* stats, Pieces* pieces) const {
  std::vector<std::vector<int64_t>> ids(sentences.size());
  if (pieces) *pieces = {std::vector<Tokens>(sentences.size()), std::vector<Tokens>(sentences.size()), std::vector<size_t>(sentences.size())};
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (size_t bad = utf8::find_invalid(sentences[i]); bad != std::string::npos)
      GF_FAIL("translate: input line {}: invalid UTF-8 at byte {}", i + 1, bad + 1);
    // Split as the training text was (whitespace as Python's str.split(), or the run's subword model).
    Tokens toks = segmenters.src.split(sentences[i]);
    if (pieces) pieces->source_length[i] = toks.size();
    // Longer than the positional table allows: keep the head (pieces->source_length says so).
    if (static_cast<int64_t>(toks.size()) > config.max_len) toks.resize(static_cast<size_t>(config.max_len));
    ids[i] = src_vocab.encode(toks);
    if (pieces) pieces->source[i] = std::move(toks);
  }
  // Similar lengths together: less padding, fewer wasted steps.
  std::vector<size_t> order(sentences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  std::vector<std::string> out(sentences.size());
  if (batch_size < 1) batch_size = 1;
  DecodeOptions o = opt;
  o.max_extra = std::min<int64_t>(o.max_extra, 510 - config.max_len);  // (decoder-only: clamped further per source length)
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size)) {
    size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size));
    std::vector<size_t> rows;
    for (size_t k = start; k < end; ++k)
      if (!ids[order[k]].empty()) rows.push_back(order[k]);
    if (rows.empty()) continue;
    int64_t S = 0;
    for (size_t r : rows) S = std::max<int64_t>(S, static_cast<int64_t>(ids[r].size()));
    Tensor src = Tensor::full({static_cast<int64_t>(rows.size()), S}, static_cast<double>(Vocab::kPad), DType::Int64);  // (B, S)
    int64_t* p = src.data<int64_t>();
    for (size_t b = 0; b < rows.size(); ++b) std::copy(ids[rows[b]].begin(), ids[rows[b]].end(), p + static_cast<int64_t>(b) * S);
    DecodeStats batch_stats;
    auto hyps = net->translate(src, o, &batch_stats);
    if (stats) {
      stats->steps += batch_stats.steps;
      stats->cache_bytes_peak = std::max(stats->cache_bytes_peak, batch_stats.cache_bytes_peak);
      stats->self_bytes_per_token = batch_stats.self_bytes_per_token;
      stats->cross_bytes_per_src_token = batch_stats.cross_bytes_per_src_token;
    }
    for (size_t b = 0; b < rows.size(); ++b) {
      Tokens toks = tgt_vocab.decode(hyps[b]);
      out[rows[b]] = one_line(segmenters.tgt.join(toks));
      if (pieces) pieces->output[rows[b]] = std::move(toks);
    }
  }
  return out;
}

}  // namespace gf::train

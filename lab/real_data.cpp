#include "lab/real_data.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "lab/output.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/parallel.h"
#include "train/decode/decode.h"
#include "train/run/model.h"
#include "train/run/run_data.h"

namespace gf::lab {
namespace fs = std::filesystem;

Fields<RealDataSettings> real_data_fields(bool with_cache) {
  using S = RealDataSettings;
  Fields<S> f = {
      {"data", &S::data,
       "a folder of DIR/{train,val,test*}.{SRC,TGT} (e.g. ../shared/data/multi30k): run the claims on this translation task instead of the toy "
       "one"},
      {"src", &S::src, "--data: the source language's file extension"},
      {"tgt", &S::tgt, "--data: the target language's file extension"},
      {"subwords", &S::subwords, "--data: SentencePiece pieces of the joint subword model (0: whitespace tokens)"},
      {"data-train", &S::data_train, "--data: the first N training pairs only (0: all)"},
      {"data-max-len", &S::data_max_len, "--data: pairs with more subwords than this on either side are left out"}};
  if (with_cache) f.add({{"cache", &S::cache, "--data: folder for the subword models, reused by the next run"}});
  return f;
}

namespace {

train::RunConfig data_config(const RealDataSettings& s) {
  train::RunConfig c;
  c.data = s.data;
  c.src = s.src, c.tgt = s.tgt;
  c.subwords = s.subwords;
  c.joint_vocab = c.subwords > 0;  // one model for both sides, as `--subwords N --joint-vocab`
  c.max_len = s.data_max_len;
  return c;
}

// The files --data needs, each named when missing, before the trainer's loader reads them.
void check_folder(const Output& r, const train::RunConfig& c) {
  const std::string who = "lab " + r.name() + ": --data";
  GF_CHECK_AS(std::runtime_error, fs::exists(c.data), "{} '{}' does not exist (a folder of train.{}/train.{}, val.* and test*.*)", who, c.data,
              c.src, c.tgt);
  GF_CHECK_AS(std::runtime_error, fs::is_directory(c.data), "{} '{}' is not a folder", who, c.data);
  for (const std::string& lang : {c.src, c.tgt}) {
    const fs::path f = fs::path(c.data) / ("train." + lang);
    GF_CHECK_AS(std::runtime_error, fs::exists(f), "{} '{}': missing {} (the training split's {} side; --src {} --tgt {})", who, c.data, f.string(),
                lang == c.src ? "source" : "target", c.src, c.tgt);
  }
}

// Pairs with an empty side or more than max_len tokens on a side are left out; `refs` gets each kept
// pair's target text before segmentation.
std::vector<train::TokenPair> keep_short(const std::vector<train::TokenPair>& raw, const std::vector<train::TokenPair>& segmented, int64_t max_len,
                                         std::vector<std::string>* refs) {
  std::vector<train::TokenPair> kept;
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto& [s, t] = segmented[i];
    if (s.empty() || t.empty() || static_cast<int64_t>(s.size()) > max_len || static_cast<int64_t>(t.size()) > max_len) continue;
    kept.push_back(segmented[i]);
    if (refs) refs->push_back(train::join_tokens(raw[i].second));
  }
  return kept;
}

// The subword models and vocabularies in `dir`: learnt from `train` and saved, or loaded when a
// complete earlier run left them (data.json is written last).
std::pair<train::Vocab, train::Vocab> vocabularies(Output& r, const train::RunConfig& c, const std::vector<train::TokenPair>& train,
                                                   const std::string& dir, train::RunSegmenters& seg) {
  if (fs::exists(fs::path(dir) / "data.json")) {
    train::RunVocabularies v = train::load_run_vocabularies(c, dir);
    seg = std::move(v.segmenters);
    r.say(fmt::format("subword models and vocabularies loaded from {}", dir));
    return {std::move(v.src), std::move(v.tgt)};
  }
  fs::create_directories(dir);
  std::pair<train::Vocab, train::Vocab> v;
  if (c.subwords > 0) {
    seg = train::train_run_subwords(c, train, dir, max_threads());
    v = train::subword_vocabularies(seg);
  } else {
    v = train::build_vocabularies(c, train);
  }
  v.first.save(fs::path(dir) / "vocab.src.txt");
  v.second.save(fs::path(dir) / "vocab.tgt.txt");
  write_file_atomic((fs::path(dir) / "data.json").string(), nlohmann::json{{"data", c.data}, {"pairs", train.size()}}.dump() + "\n");
  r.say(fmt::format("subword models and vocabularies learnt from {} training pairs, kept in {}", train.size(), dir));
  return v;
}

}  // namespace

std::string real_data_key(const RealDataSettings& s) {
  const train::RunConfig c = data_config(s);
  std::error_code ec;
  const fs::path full = fs::weakly_canonical(fs::absolute(c.data), ec);
  const std::string name = fs::path(c.data).lexically_normal().filename().string();
  return fmt::format("{}-{}-{}-sw{}-n{}-len{}-{:08x}", name.empty() ? "data" : name, c.src, c.tgt, c.subwords, s.data_train, c.max_len,
                     std::hash<std::string>{}(full.string()) & 0xffffffffu);
}

RealData real_data(const RealDataSettings& s, Output& r) {
  RealData d;
  d.config = data_config(s);
  const train::RunConfig& c = d.config;
  GF_CHECK_AS(std::invalid_argument, c.subwords >= 0 && c.max_len >= 1 && s.data_train >= 0,
              "lab {}: --subwords {} and --data-train {} must be at least 0, --data-max-len {} at least 1", r.name(), c.subwords,
              s.data_train, c.max_len);
  check_folder(r, c);
  train::RunData raw = train::load_run_data(c, true);
  if (const int64_t cap = s.data_train; cap > 0 && static_cast<size_t>(cap) < raw.train.size()) raw.train.resize(static_cast<size_t>(cap));
  GF_CHECK_AS(std::runtime_error, !raw.train.empty() && !raw.valid.empty(), "lab {}: --data '{}': the training ({}) or validation ({}) split is empty",
              r.name(), c.data, raw.train_name, raw.valid_name);
  const std::string cache = s.cache.empty() ? (fs::path(r.out_dir()) / "data").string() : s.cache;
  d.subword_dir = (fs::path(cache) / ("subwords-" + real_data_key(s))).string();
  auto [src_words, tgt_words] = vocabularies(r, c, raw.train, d.subword_dir, d.segmenters);
  const bool has_test = !raw.test.empty();
  const auto train = keep_short(raw.train, train::segment_pairs(raw.train, d.segmenters), c.max_len, nullptr);
  const auto valid = keep_short(raw.valid, train::segment_pairs(raw.valid, d.segmenters), c.max_len, &d.valid_refs);
  const auto test = has_test ? keep_short(raw.test, train::segment_pairs(raw.test, d.segmenters), c.max_len, &d.test_refs) : valid;
  if (!has_test) d.test_refs = d.valid_refs;
  GF_CHECK_AS(std::runtime_error, !train.empty() && !valid.empty(), "lab {}: --data '{}': no pair of {} or fewer subwords a side (--data-max-len)",
              r.name(), c.data, c.max_len);
  d.ids.train = train::encode_pairs(train, src_words, tgt_words);
  d.ids.valid = train::encode_pairs(valid, src_words, tgt_words);
  d.ids.test = train::encode_pairs(test, src_words, tgt_words);
  d.ids.src_vocab = src_words.size(), d.ids.tgt_vocab = tgt_words.size();
  d.ids.src_words = std::move(src_words), d.ids.tgt_words = std::move(tgt_words);
  d.description = fmt::format("{} ({} -> {}): {} training, {} validation, {} test pairs ({}) of at most {} {} a side; vocabulary {} ({})", c.data,
                              c.src, c.tgt, train.size(), valid.size(), test.size(), has_test ? raw.test_name : "the validation split",
                              c.max_len, c.subwords > 0 ? "subwords" : "tokens", d.ids.tgt_vocab,
                              c.subwords > 0 ? fmt::format("joint SentencePiece {}", c.subword_type) : "whitespace tokens, min count 2");
  r.say("data: " + d.description);
  r.data()["real_data"] = {{"data", c.data},
                           {"src", c.src},
                           {"tgt", c.tgt},
                           {"subwords", c.subwords},
                           {"max_len", c.max_len},
                           {"train_pairs", d.ids.train.size()},
                           {"valid_pairs", d.ids.valid.size()},
                           {"test_pairs", d.ids.test.size()},
                           {"test_split", has_test ? raw.test_name : raw.valid_name},
                           {"src_vocab", d.ids.src_vocab},
                           {"tgt_vocab", d.ids.tgt_vocab}};
  return d;
}

BleuResult greedy_bleu(const nn::Seq2SeqTransformer& model, const RealData& data, const std::vector<train::EncodedPair>& pairs,
                       const std::vector<std::string>& refs, size_t limit) {
  const size_t n = limit == 0 ? pairs.size() : std::min(limit, pairs.size());
  GF_CHECK(n > 0 && refs.size() >= n, "greedy_bleu: {} pairs and {} references (need at least one pair and a reference each)", n, refs.size());
  std::vector<std::string> hyps;
  const train::DecodeOptions o;
  for (size_t start = 0; start < n; start += 64) {
    std::vector<size_t> part;
    for (size_t i = start; i < std::min(n, start + 64); ++i) part.push_back(i);
    const train::Batch b = train::collate(pairs, part);
    const Tensor src = Tensor::from_vector(b.src, {b.rows, b.src_len});  // (B, S)
    for (const auto& ids : train::translate_batch(model, src, o)) {
      train::Tokens pieces;
      for (int64_t id : ids) pieces.push_back(data.ids.tgt_words.token(id));
      hyps.push_back(data.segmenters.tgt.join(pieces));
    }
  }
  return corpus_bleu(hyps, std::vector<std::string>(refs.begin(), refs.begin() + static_cast<std::ptrdiff_t>(n)), "13a");
}

}  // namespace gf::lab

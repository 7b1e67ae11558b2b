#include "train/run/run_subwords.h"

#include <filesystem>

#include "tensor/check.h"

namespace gf::train {
namespace fs = std::filesystem;

std::vector<std::string> subword_model_files(const RunConfig& c) {
  if (c.joint_vocab) return {"spm.model"};
  return {"spm.src.model", "spm.tgt.model"};
}

namespace {

SubwordOptions options(const RunConfig& c, int threads) {
  return {.vocab_size = c.subwords, .type = c.subword_type, .sep = c.arch == "decoder-only", .threads = threads};
}

std::vector<std::string> side_text(const std::vector<TokenPair>& pairs, bool source, bool target) {
  std::vector<std::string> text;
  text.reserve(pairs.size() * (source + target));
  for (const auto& p : pairs) {
    if (source) text.push_back(join_tokens(p.first));
    if (target) text.push_back(join_tokens(p.second));
  }
  return text;
}

}  // namespace

RunSegmenters train_run_subwords(const RunConfig& c, const std::vector<TokenPair>& train, const std::string& dir, int threads) {
  GF_CHECK(c.subwords > 0, "train_run_subwords: the run has no --subwords");
  const std::vector<std::string> files = subword_model_files(c);
  auto learn = [&](bool source, bool target, const std::string& what, const std::string& file) {
    auto model = std::make_shared<const Subwords>(Subwords::train(side_text(train, source, target), options(c, threads), what));
    model->save(fs::path(dir) / file);
    return model;
  };
  if (c.joint_vocab) {
    auto joint = learn(true, true, "the training text (both sides)", files[0]);
    return {Segmenter(joint), Segmenter(joint)};
  }
  return {Segmenter(learn(true, false, "the source side of the training text", files[0])),
          Segmenter(learn(false, true, "the target side of the training text", files[1]))};
}

namespace {

RunSegmenters load_run_subwords(const RunConfig& c, const std::string& dir) {
  if (c.subwords == 0) return {};
  const std::vector<std::string> files = subword_model_files(c);
  auto load = [&](const std::string& file) { return std::make_shared<const Subwords>(Subwords::load(fs::path(dir) / file)); };
  if (c.joint_vocab) {
    auto joint = load(files[0]);
    return {Segmenter(joint), Segmenter(joint)};
  }
  return {Segmenter(load(files[0])), Segmenter(load(files[1]))};
}

}  // namespace

RunVocabularies load_run_vocabularies(const RunConfig& c, const std::string& dir) {
  const fs::path d(dir);
  RunVocabularies v{load_run_subwords(c, dir), Vocab::load(d / "vocab.src.txt"), Vocab::load(d / "vocab.tgt.txt")};
  if (const Subwords* sp = v.segmenters.src.subwords()) check_vocab_matches(v.src, *sp, (d / "vocab.src.txt").string());
  if (const Subwords* sp = v.segmenters.tgt.subwords()) check_vocab_matches(v.tgt, *sp, (d / "vocab.tgt.txt").string());
  return v;
}

std::pair<Vocab, Vocab> subword_vocabularies(const RunSegmenters& s) {
  GF_CHECK(s.src.subwords() && s.tgt.subwords(), "subword_vocabularies: the run has no subword models");
  return {s.src.subwords()->vocab(), s.tgt.subwords()->vocab()};
}

std::vector<TokenPair> segment_pairs(const std::vector<TokenPair>& pairs, const RunSegmenters& s) {
  if (!s.src.subwords() && !s.tgt.subwords()) return pairs;
  std::vector<TokenPair> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs) out.emplace_back(s.src.split(join_tokens(p.first)), s.tgt.split(join_tokens(p.second)));
  return out;
}

}  // namespace gf::train


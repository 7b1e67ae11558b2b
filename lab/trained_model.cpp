#include "lab/trained_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "lab/common.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "train/run/checkpoint.h"
#include "korean/corpus_ko.h"
#include "train/run/run_data.h"
#include "train/eval/translator.h"
#include "train/data/utf8.h"

namespace gf::lab {
namespace fs = std::filesystem;

namespace {

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The run configuration of a model trained here: what Translator::load needs to rebuild it.
// With --data (lab/real_data.h) its data settings, else the built-in corpus.
train::RunConfig config_of(const TrainedModelSettings& s, uint64_t seed, const RealData* real) {
  train::RunConfig c;
  if (real) {
    c = real->config;
  } else {
    c.data = "";  // the built-in corpus
    c.src = "en", c.tgt = "ko";
    c.corpus_seed = seed;
    c.corpus_size = s.corpus;
    c.min_freq = 1;  // builtin_corpus keeps every training token
  }
  c.layer.d_model = s.d_model;
  c.layer.nhead = s.heads;
  c.layers = s.layers;
  c.layer.dim_feedforward = 4 * c.layer.d_model;
  c.layer.dropout = 0;
  c.label_smoothing = 0;
  c.lr = s.lr;
  c.warmup = s.warmup;
  c.steps = s.train_steps;
  c.max_tokens = 2048;
  c.seed = seed;
  c.validate();
  return c;
}

// Test pairs of a run's data, encoded with its vocabularies: the built-in corpus regenerated from
// the run's corpus seed and size, or the run's test split (its validation split when it has none).
// Text is segmented as the run's models read it (its subword models, or whitespace).
std::vector<train::EncodedPair> test_pairs_of(const train::RunConfig& c, const train::RunSegmenters& seg, const train::Vocab& src,
                                              const train::Vocab& tgt) {
  std::vector<train::TokenPair> pairs;
  if (c.builtin()) {
    train::CorpusSplits s = train::make_korean_corpus(c.corpus_seed, static_cast<size_t>(c.corpus_size));
    for (const auto& p : s.test) pairs.push_back({train::utf8::split_whitespace(p.src), train::utf8::split_whitespace(p.tgt)});
  } else {
    train::RunData d = train::load_run_data(c, false);
    pairs = d.test.empty() ? d.valid : d.test;
  }
  GF_CHECK_AS(std::runtime_error, !pairs.empty(), "trained model: the run's data ({}) has no test or validation pairs to study",
              c.data_description());
  return train::encode_pairs(train::segment_pairs(pairs, seg), src, tgt);
}

TrainedModel from_translator(train::Translator t, const std::string& origin) {
  TrainedModel m;
  m.test = test_pairs_of(t.config, t.segmenters, t.src_vocab, t.tgt_vocab);
  m.src_words = std::move(t.src_vocab);
  m.tgt_words = std::move(t.tgt_vocab);
  GF_CHECK_AS(std::runtime_error, t.net->seq2seq(), "trained model: {} is a {} run; the labs study an encoder-decoder", origin, t.config.arch);
  std::shared_ptr<train::TranslationModel> owner(std::move(t.net));
  m.model = std::shared_ptr<nn::Seq2SeqTransformer>(owner, owner->seq2seq());  // shares the owner's lifetime
  m.model->eval();
  const train::RunConfig& c = t.config;
  m.description = fmt::format("{}: d_model {}, {} heads, {}+{} layers, ff {}, {} parameters; data: {}", origin, c.layer.d_model, c.layer.nhead,
                              c.layers, c.layers, c.layer.dim_feedforward, parameter_count(*m.model), c.data_description());
  return m;
}

// Writes a run folder Translator::load reads, plus lab.json with the training curve.
void save_cache(const std::string& dir, const train::RunConfig& c, const IdData& data, const nn::Seq2SeqTransformer& model,
                const TrainedModel& m, double seconds, const RealData* real) {
  fs::create_directories(dir);
  if (real)  // Translator::load reads the subword models from the run folder
    for (const std::string& f : train::subword_model_files(c))
      if (c.subwords > 0) fs::copy_file(fs::path(real->subword_dir) / f, fs::path(dir) / f, fs::copy_options::overwrite_existing);
  data.src_words.save(fs::path(dir) / "vocab.src.txt");
  data.tgt_words.save(fs::path(dir) / "vocab.tgt.txt");
  save_safetensors((fs::path(dir) / "best.safetensors").string(), model.state_dict());
  nlohmann::json j = {{"losses", m.losses},       {"train_seconds", seconds}, {"valid_steps", m.valid_steps},
                      {"valid_nll", m.valid_nll}, {"valid_free_running", m.valid_free_running}, {"best_step", m.best_step},
                      {"converged", m.converged}};
  write_file_atomic((fs::path(dir) / "lab.json").string(), j.dump() + "\n");
  write_file_atomic((fs::path(dir) / "config.json").string(), c.to_json());  // last: its presence means complete
}

}  // namespace

Fields<TrainedModelSettings> trained_model_fields() {
  using S = TrainedModelSettings;
  return {{"model", &S::model, "a run folder from `gradflow train` to study instead of training one here"},
          {"cache", &S::cache, "folder for the model trained here, reused by the next run (\"\": none)"},
          {"retrain", &S::retrain, "train the model even when the cache has it"},
          {"corpus", &S::corpus, "pairs of the built-in English->Korean corpus (90% train, 5% test)"},
          {"d-model", &S::d_model, "model width (ff is 4x)"},
          {"heads", &S::heads, "attention heads"},
          {"layers", &S::layers, "encoder and decoder layers (each)"},
          {"train-steps", &S::train_steps, "Adam steps of 2048-token batches"},
          {"lr", &S::lr, "Adam learning rate after warm-up"},
          {"warmup", &S::warmup, "linear warm-up steps"}};
}

Fields<TrainedModelSettings> trained_model_data_fields() {
  return Fields<TrainedModelSettings>::nest(&TrainedModelSettings::real, real_data_fields(/*with_cache=*/false));
}

std::string cache_key(const TrainedModelSettings& s, uint64_t seed, const Recipe& recipe) {
  const std::string data = s.real.given() ? "data-" + real_data_key(s.real_settings()) : fmt::format("ko-n{}", s.corpus);
  std::string key = fmt::format("{}-d{}-h{}-l{}-s{}-lr{}-w{}-c{}-seed{}", data, s.d_model, s.heads, s.layers, s.train_steps, s.lr, s.warmup,
                                seed, seed);
  if (recipe.converge)
    key += fmt::format("-conv{}x{}-{}{}", recipe.until.every, recipe.until.patience, recipe.until.min_improvement,
                       recipe.until.select_free_running ? fmt::format("-fr{}", recipe.until.select_limit) : "");
  if (recipe.sampling.k > 0) key += fmt::format("-ss{}", recipe.sampling.k);
  return key;
}

TrainedModel trained_model(const TrainedModelSettings& s, const RealData* rd, uint64_t seed, Output& r, const Recipe& recipe) {
  if (!s.model.empty()) {
    TrainedModel m = from_translator(train::Translator::load(s.model), "loaded from " + s.model);
    r.say("model " + m.description);
    return m;
  }
  GF_CHECK_AS(std::logic_error, s.real.given() == (rd != nullptr), "trained_model: --data {} but the task {} given", s.real.given() ? "set" : "not set",
              rd ? "is" : "is not");
  const train::RunConfig c = config_of(s, seed, rd);
  const std::string dir = s.cache.empty() ? "" : (fs::path(s.cache) / cache_key(s, seed, recipe)).string();
  if (!dir.empty() && !s.retrain && fs::exists(fs::path(dir) / "config.json")) {
    const nlohmann::json j = nlohmann::json::parse(train::read_text_file((fs::path(dir) / "lab.json").string()));
    const auto losses = j.at("losses").get<std::vector<double>>();
    TrainedModel m = from_translator(train::Translator::load(dir),
                                     fmt::format("trained earlier ({} steps, loss {:.3f} -> {:.3f}; --retrain trains again), loaded from {}",
                                                 losses.size(), losses.front(), losses.back(), dir));
    m.losses = losses;
    m.steps = static_cast<int64_t>(losses.size());
    m.valid_steps = j.value("valid_steps", std::vector<int64_t>{});
    m.valid_nll = j.value("valid_nll", std::vector<double>{});
    m.valid_free_running = j.value("valid_free_running", std::vector<double>{});
    m.best_step = j.value("best_step", int64_t{-1});
    m.converged = j.value("converged", false);
    if (rd) m.test = rd->ids.test;  // the pairs the lab's length cap keeps, as when it was trained
    r.say("model " + m.description);
    return m;
  }

  IdData data = rd ? rd->ids : builtin_corpus(c.corpus_size, c.corpus_seed);
  TrainedModel m;
  m.model = std::make_shared<nn::Seq2SeqTransformer>(c.model_options(data.src_vocab, data.tgt_vocab), c.seed);
  FitOptions fo{.steps = c.steps, .lr = c.lr, .warmup = c.warmup, .clip = c.clip, .max_tokens = c.max_tokens, .seed = c.seed,
                .until = recipe.until, .sampling = recipe.sampling};
  fo.until.valid = recipe.converge ? &data.valid : nullptr;  // Recipe::converge decides, not until.valid
  const double t0 = now_seconds();
  FitResult fr = fit(*m.model, data.train, fo);
  m.train_seconds = now_seconds() - t0;
  m.model->eval();
  m.losses = fr.losses;
  m.steps = static_cast<int64_t>(fr.losses.size());
  m.valid_steps = fr.valid_steps, m.valid_nll = fr.valid_nll, m.valid_free_running = fr.valid_free_running;
  m.best_step = fr.best_step, m.converged = fr.converged;
  GF_CHECK_AS(std::runtime_error, !fr.diverged, "trained model: training diverged at step {} (lower --lr)", fr.diverged_at);
  if (!dir.empty()) save_cache(dir, c, data, *m.model, m, m.train_seconds, rd);
  const std::string how = recipe.converge ? fmt::format(" (until converged: {}, kept step {})", m.converged ? "stopped by the rule" : "stopped at the limit",
                                                        m.best_step)
                                          : "";
  m.description = fmt::format("trained here in {:.0f} s{}: d_model {}, {} heads, {}+{} layers, ff {}, {} parameters; {} steps{} on {} pairs, loss {:.3f} -> {:.3f}{}",
                              m.train_seconds, recipe.sampling.k > 0 ? fmt::format(" with scheduled sampling (k {:g})", recipe.sampling.k) : "",
                              c.layer.d_model, c.layer.nhead, c.layers, c.layers, c.layer.dim_feedforward, parameter_count(*m.model), m.steps, how,
                              data.train.size(), m.losses.front(), m.losses.back(), dir.empty() ? "" : "; cached in " + dir);
  m.src_words = std::move(data.src_words);
  m.tgt_words = std::move(data.tgt_words);
  m.test = std::move(data.test);
  r.say("model " + m.description);
  return m;
}

}  // namespace gf::lab

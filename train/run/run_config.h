#pragma once
// Everything that defines a training run: data, model, recipe and budget. Saved as config.json in
// the run folder, so that translate/eval/resume rebuild the same model.
#include <cstdint>
#include <string>

#include "nn/seq2seq.h"
#include "optim/schedule.h"

namespace gf::train {

struct RunConfig {
  // ---- data ----
  std::string data;  // a folder of DIR/{split}.{lang} files, a .tsv file, or "" for the built-in corpus
  std::string src = "de", tgt = "en";
  std::string train_split = "train", valid_split, test_split;  // "" = detect (val|valid, test*)
  uint64_t corpus_seed = 1;    // built-in corpus
  int64_t corpus_size = 24000;  // built-in corpus
  int64_t min_freq = 2, max_len = 100, max_tokens = 4096;
  // 0: whitespace tokens (pre-tokenised text). N: SentencePiece subwords, N pieces per model
  // (train/run/run_subwords.h); min_freq then does not apply.
  int64_t subwords = 0;
  std::string subword_type = "unigram";  // or "bpe"
  bool joint_vocab = false;              // one subword model and vocabulary for both sides
  // ---- model ----
  std::string arch = "encoder-decoder";  // or "decoder-only" (train/run/model.h)
  nn::TransformerLayerOptions layer;  // every layer: width, heads, kv heads, ff, activation, norm, placement, dropout
  int64_t layers = 3;                 // encoder and decoder layers each
  bool tie = false;                   // output projection tied to the target embedding
  // ---- recipe ----
  double lr = 1e-3, label_smoothing = 0.1, clip = 1.0;
  int64_t warmup = 800;
  // The learning-rate schedule (optim/schedule.h): "inverse-sqrt", or "wsd" (warm-up, stable, then
  // a decay to 0 over the last decay_fraction of the budget: time with --minutes, else steps or
  // epochs). A resumed run may change both.
  std::string schedule = "inverse-sqrt";
  double decay_fraction = 0.15;
  double beta1 = 0.9, beta2 = 0.98, adam_eps = 1e-9;
  // The matrix products' precision as asked for: "fp32", "bf16" (bfloat16 operands, float32
  // accumulation, float32 master weights: tensor/kernels/bf16.h), or "auto" (the command line's
  // default: bf16 where it pays, app/precision_choice.h). A resumed run may change it.
  // resolved_precision is what the run started with, "fp32" or "bf16" (the process-wide
  // kernels::precision() when training begins; "" in a config not yet trained from, or older).
  std::string precision = "fp32";
  std::string resolved_precision;
  int64_t average_last = 0;  // > 1: keep the last K epochs' weights and write their mean (train/loop/average.h)
  // ---- budget and run ----
  int64_t epochs = 0, steps = 0;  // 0 = no limit of that kind
  double minutes = 0;
  uint64_t seed = 1;
  int64_t log_every = 100;  // steps between plain progress lines (non-terminal output)
  // > 0: end the run after this many validation evaluations (epochs) in a row without a new best
  // validation loss (train/loop/early_stop.h). A resumed run may change it.
  int64_t patience = 0;

  bool builtin() const { return data.empty(); }
  std::string data_description() const;
  nn::Seq2SeqOptions model_options(int64_t src_vocab, int64_t tgt_vocab) const;
  optim::LrSchedule lr_schedule() const { return {schedule, warmup, decay_fraction}; }
  std::string to_json() const;
  // Reads this format and the earlier one (model fields flat at the top level). Throws
  // std::runtime_error "<where>: ..." naming the field for bad JSON, a field of the wrong type or
  // range, and the first bad setting (validate()).
  static RunConfig from_json(const std::string& text, const std::string& where);
  // from_json of the file at `path` (a run folder's config.json), which must be a regular file of
  // at most kMaxConfigBytes: std::runtime_error naming it otherwise.
  static RunConfig read(const std::string& path);
  static constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;
  // Throws std::invalid_argument naming the first bad setting.
  void validate() const;
};

}  // namespace gf::train

#pragma once
// The translator's network, whichever architecture the run config names, behind what training,
// evaluation and decoding need of it:
//   "encoder-decoder": nn::Seq2SeqTransformer, teacher forcing tgt[:, :-1] -> tgt[:, 1:];
//   "decoder-only":    nn::DecoderOnlyTransformer over one sequence "source <sep> target <eos>",
//                      with the loss on the target part only (the source positions are PAD-labelled).
#include <memory>
#include <utility>
#include <vector>

#include "nn/decoder_only.h"
#include "nn/seq2seq.h"
#include "train/data/batching.h"
#include "train/decode/decode.h"
#include "train/run/run_config.h"
#include "train/data/vocab.h"

namespace gf::train {

class TranslationModel {
 public:
  virtual ~TranslationModel() = default;
  virtual nn::Module& module() = 0;
  const nn::Module& module() const { return const_cast<TranslationModel*>(this)->module(); }
  // Label-smoothed cross-entropy over the batch's target tokens (PAD ignored), mean per token.
  virtual Variable loss(const Batch& batch, double label_smoothing) const = 0;
  // Decodes (B, S) PAD-padded sources; options as decode_options() gives them.
  virtual std::vector<std::vector<int64_t>> translate(const Tensor& src, const DecodeOptions& opt, DecodeStats* stats) const = 0;
  virtual DecodeOptions decode_options() const = 0;  // the right bos (or <sep>), eos and pad
  // The encoder-decoder itself (attention maps need it); nullptr for another architecture.
  virtual const nn::Seq2SeqTransformer* seq2seq() const { return nullptr; }
  nn::Seq2SeqTransformer* seq2seq() { return const_cast<nn::Seq2SeqTransformer*>(std::as_const(*this).seq2seq()); }
};

// `net` as a TranslationModel, without owning it (a model made elsewhere, e.g. by a lab).
std::unique_ptr<TranslationModel> view_translation_model(nn::Seq2SeqTransformer& net);

// A new model for the config's architecture; the decoder-only model needs <sep> in the (joint)
// vocabulary. init_seed draws the initial weights.
std::unique_ptr<TranslationModel> make_translation_model(const RunConfig& config, const Vocab& src, const Vocab& tgt, uint64_t init_seed);

// The vocabularies of a new run: separate ones for the encoder-decoder, one joint vocabulary (with
// <sep>) used for both sides by the decoder-only model.
std::pair<Vocab, Vocab> build_vocabularies(const RunConfig& config, const std::vector<TokenPair>& train);

// Mean NLL per target token over every batch of a plan (no smoothing, eval mode, no graph); the
// model is left in the mode it was in.
double evaluate_loss(TranslationModel& model, const BatchPlan& plan);
// The same as a sum, over the batches b with b % parts == part (a data-parallel run's share).
struct LossSum {
  double total = 0;  // NLL summed over the target tokens
  int64_t tokens = 0;
};
LossSum evaluate_loss_sum(TranslationModel& model, const BatchPlan& plan, size_t part = 0, size_t parts = 1);

// The decoder-only model's batch: input "source <sep> target" (B, L) and labels (B*L): PAD on the
// source positions, then target <eos>.
struct SequenceTensors {
  Tensor input, labels;
};
SequenceTensors to_sequence_tensors(const Batch& b, int64_t sep);

}  // namespace gf::train

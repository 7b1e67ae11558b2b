#include "train/run/model.h"

#include <stdexcept>

#include "autograd/grad_mode.h"
#include "tensor/check.h"
#include "train/run/batch_loss.h"

namespace gf::train {
namespace {

class EncoderDecoder : public TranslationModel {
 public:
  EncoderDecoder(const RunConfig& c, const Vocab& src, const Vocab& tgt, uint64_t seed) : net_(c.model_options(src.size(), tgt.size()), seed) {}
  nn::Module& module() override { return net_; }
  Variable loss(const Batch& b, double ls) const override { return batch_loss(net_, to_tensors(b), ls); }
  std::vector<std::vector<int64_t>> translate(const Tensor& src, const DecodeOptions& opt, DecodeStats* st) const override {
    return translate_batch(net_, src, opt, st);
  }
  DecodeOptions decode_options() const override { return DecodeOptions{}; }  // <bos> 2, <eos> 3, <pad> 0
  const nn::Seq2SeqTransformer* seq2seq() const override { return &net_; }

 private:
  nn::Seq2SeqTransformer net_;
};

class EncoderDecoderView : public TranslationModel {
 public:
  explicit EncoderDecoderView(nn::Seq2SeqTransformer& net) : net_(net) {}
  nn::Module& module() override { return net_; }
  Variable loss(const Batch& b, double ls) const override { return batch_loss(net_, to_tensors(b), ls); }
  std::vector<std::vector<int64_t>> translate(const Tensor& src, const DecodeOptions& opt, DecodeStats* st) const override {
    return translate_batch(net_, src, opt, st);
  }
  DecodeOptions decode_options() const override { return DecodeOptions{}; }
  const nn::Seq2SeqTransformer* seq2seq() const override { return &net_; }

 private:
  nn::Seq2SeqTransformer& net_;
};

nn::DecoderOnlyOptions decoder_only_options(const RunConfig& c, const Vocab& vocab) {
  nn::DecoderOnlyOptions o;
  o.vocab = vocab.size();
  o.layer = c.layer;
  o.num_layers = c.layers;
  o.tie_output = c.tie;
  o.pad = Vocab::kPad;
  return o;
}

class DecoderOnly : public TranslationModel {
 public:
  DecoderOnly(const RunConfig& c, const Vocab& src, const Vocab& tgt, uint64_t seed)
      : net_(decoder_only_options(c, src), seed), sep_(src.id(Vocab::kSep)) {
    GF_CHECK(src.tokens() == tgt.tokens() && sep_ != Vocab::kUnk,
             "decoder-only model: needs one joint vocabulary with {} for source and target (Vocab::build_joint)", Vocab::kSep);
  }
  nn::Module& module() override { return net_; }
  Variable loss(const Batch& b, double ls) const override {
    SequenceTensors t = to_sequence_tensors(b, sep_);
    return projected_loss(net_.hidden_states(t.input), *net_.out, t.labels, ls);  // states (B, L, D)
  }
  std::vector<std::vector<int64_t>> translate(const Tensor& src, const DecodeOptions& opt, DecodeStats* st) const override {
    return translate_batch(net_, src, opt, st);
  }
  DecodeOptions decode_options() const override {
    DecodeOptions o;
    o.bos = sep_;  // the prompt is the source and <sep>; the output follows
    return o;
  }

 private:
  nn::DecoderOnlyTransformer net_;
  int64_t sep_;
};

}  // namespace

std::unique_ptr<TranslationModel> view_translation_model(nn::Seq2SeqTransformer& net) { return std::make_unique<EncoderDecoderView>(net); }

std::unique_ptr<TranslationModel> make_translation_model(const RunConfig& c, const Vocab& src, const Vocab& tgt, uint64_t seed) {
  if (c.arch == "decoder-only") return std::make_unique<DecoderOnly>(c, src, tgt, seed);
  return std::make_unique<EncoderDecoder>(c, src, tgt, seed);
}

std::pair<Vocab, Vocab> build_vocabularies(const RunConfig& c, const std::vector<TokenPair>& train) {
  if (c.arch == "decoder-only") {
    Vocab joint = Vocab::build_joint(train, c.min_freq);
    return {joint, joint};
  }
  return {Vocab::build_source(train, c.min_freq), Vocab::build_target(train, c.min_freq)};
}

LossSum evaluate_loss_sum(TranslationModel& model, const BatchPlan& plan, size_t part, size_t parts) {
  NoGradGuard ng;
  nn::Module& m = model.module();
  const bool was_training = m.is_training();
  m.eval();
  LossSum sum;
  for (size_t i = part; i < plan.size(); i += parts) {
    Batch b = plan.batch(i);
    sum.total += model.loss(b, 0.0).item() * static_cast<double>(b.tgt_tokens);
    sum.tokens += b.tgt_tokens;
  }
  m.train(was_training);
  return sum;
}

double evaluate_loss(TranslationModel& model, const BatchPlan& plan) {
  const LossSum s = evaluate_loss_sum(model, plan);
  return s.tokens ? s.total / static_cast<double>(s.tokens) : 0.0;
}

SequenceTensors to_sequence_tensors(const Batch& b, int64_t sep) {
  // Row r: source (its non-PAD prefix), <sep>, target, <eos>; the input drops the last token and
  // the labels are the input shifted by one, PAD where the next token is still source.
  std::vector<std::vector<int64_t>> in(static_cast<size_t>(b.rows)), lab(static_cast<size_t>(b.rows));
  int64_t L = 0;
  for (int64_t r = 0; r < b.rows; ++r) {
    std::vector<int64_t> seq;
    for (int64_t s = 0; s < b.src_len && b.src[r * b.src_len + s] != Vocab::kPad; ++s) seq.push_back(b.src[r * b.src_len + s]);
    const size_t n_src = seq.size();
    seq.push_back(sep);
    for (int64_t t = 1; t < b.tgt_len && b.tgt[r * b.tgt_len + t] != Vocab::kPad; ++t) seq.push_back(b.tgt[r * b.tgt_len + t]);  // target, <eos>
    in[r].assign(seq.begin(), seq.end() - 1);
    lab[r].assign(n_src, Vocab::kPad);
    lab[r].insert(lab[r].end(), seq.begin() + static_cast<std::ptrdiff_t>(n_src) + 1, seq.end());
    L = std::max<int64_t>(L, static_cast<int64_t>(in[r].size()));
  }
  std::vector<int64_t> input(static_cast<size_t>(b.rows * L), Vocab::kPad), labels(static_cast<size_t>(b.rows * L), Vocab::kPad);
  for (int64_t r = 0; r < b.rows; ++r) {
    std::copy(in[r].begin(), in[r].end(), input.begin() + r * L);
    std::copy(lab[r].begin(), lab[r].end(), labels.begin() + r * L);
  }
  return {Tensor::from_vector(input, {b.rows, L}), Tensor::from_vector(labels, {b.rows * L})};  // (B, L), (B*L)
}

}  // namespace gf::train

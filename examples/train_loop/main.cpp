// A training loop written by hand on gradflow's public API, for someone who does not want the
// trainer: the built-in English->Korean corpus as tokens, vocabularies, length-bucketed batches,
// the Transformer, Adam with warmup then inverse-square-root decay, the label-smoothed
// cross-entropy with padding masked out, gradient clipping; then greedy translations of held-out
// sentences and their exact-match rate.
//
//   train_loop [--steps N]     (default 1200)
#include <gradflow/gradflow.h>
#include <gradflow/korean/builtin_corpus.h>

#include <cstdlib>
#include <cstring>

using namespace gf;

int main(int argc, char** argv) {
  int64_t steps = 1200;
  if (argc == 3 && !std::strcmp(argv[1], "--steps")) steps = std::atoll(argv[2]);
  else if (argc != 1) return fmt::print(stderr, "usage: train_loop [--steps N]\n"), 2;
  const double base_lr = 2e-3, label_smoothing = 0.1, clip = 1.0;
  const int64_t warmup = 400, max_tokens = 4096;

  // Data: token pairs, one vocabulary per side, pairs as ids, batches of <= max_tokens padded tokens.
  const train::RunData corpus = train::korean_run_data(/*seed=*/1, /*total=*/24000);
  const std::vector<train::TokenPair>& train_pairs = corpus.train, &test_pairs = corpus.test;
  const train::Vocab src_vocab = train::Vocab::build_source(train_pairs, 1), tgt_vocab = train::Vocab::build_target(train_pairs, 1);
  const std::vector<train::EncodedPair> train_ids = train::encode_pairs(train_pairs, src_vocab, tgt_vocab);
  const train::BatchPlan plan(train_ids, max_tokens);
  fmt::print("{} training pairs in {} batches; vocabularies {} (en) and {} (ko)\n", plan.pairs_used(), plan.size(), src_vocab.size(),
             tgt_vocab.size());

  nn::Seq2SeqOptions o;
  o.src_vocab = src_vocab.size(), o.tgt_vocab = tgt_vocab.size(), o.num_layers = 2;
  o.layer.d_model = 128, o.layer.nhead = 4, o.layer.dim_feedforward = 512, o.layer.dropout = 0.1;
  nn::Seq2SeqTransformer model(o, /*init_seed=*/1);
  optim::Adam adam(model.named_parameters(), {.lr = base_lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  const std::vector<Variable> params = model.parameters();
  fmt::print("model: {} parameters\n", model.num_parameters());

  model.train();
  int64_t step = 0;
  for (uint64_t epoch = 0; step < steps; ++epoch) {
    for (size_t b : plan.epoch_order(/*seed=*/1, epoch)) {
      if (step == steps) break;
      // Teacher forcing: the decoder reads <bos> y1 .. yn and predicts y1 .. yn <eos>.
      const train::BatchTensors t = train::to_tensors(plan.batch(b));  // src (B, S), tgt_in (B, T), labels (B*T)
      Variable logits = model.forward(t.src, t.tgt_in);                // (B, T, V)
      // Labels that are PAD (after a sentence's <eos>) are masked out of the mean.
      Variable loss = cross_entropy(reshape(logits, {-1, tgt_vocab.size()}), t.labels, train::Vocab::kPad, label_smoothing);  // ()
      adam.zero_grad();
      loss.backward();
      const double norm = optim::clip_grad_norm(params, clip);
      adam.set_lr(optim::warmup_inverse_sqrt(base_lr, step, warmup));
      adam.step();
      if (++step % 100 == 0 || step == 1)
        fmt::print("step {:5d}  epoch {}  loss {:.4f}  grad norm {:6.3f}  lr {:.2e}\n", step, epoch + 1, loss.item(), norm, adam.lr());
    }
  }

  // Greedy decoding of the first 200 held-out sentences, in one padded batch.
  model.eval();
  const std::vector<train::TokenPair> sample(test_pairs.begin(), test_pairs.begin() + 200);
  const std::vector<train::EncodedPair> sample_ids = train::encode_pairs(sample, src_vocab, tgt_vocab);
  std::vector<size_t> rows(sample.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  const train::Batch batch = train::collate(sample_ids, rows);
  const Tensor src = Tensor::from_vector(batch.src, {batch.rows, batch.src_len});  // (B, S)
  const auto outputs = train::translate_batch(model, src, train::DecodeOptions{});
  size_t exact = 0;
  for (size_t i = 0; i < sample.size(); ++i) exact += tgt_vocab.decode(outputs[i]) == sample[i].second;
  for (size_t i = 0; i < 3; ++i)
    fmt::print("\n  src: {}\n  ref: {}\n  out: {}\n", train::join_tokens(sample[i].first), train::join_tokens(sample[i].second),
               tgt_vocab.decode_text(outputs[i]));
  fmt::print("\nexact match on {} held-out sentences: {:.1f}% ({})\n", sample.size(), 100.0 * exact / sample.size(), exact);
  return 0;
}

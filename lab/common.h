#pragma once
// What several labs share: small statistics, synthetic tasks, the built-in corpus as id pairs,
// small models, a short in-memory training loop, and accuracy measures. Built only from the
// public API of autograd/, nn/, optim/ and train/.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lab/fields.h"
#include "lab/lab.h"
#include "lab/stats.h"
#include "nn/seq2seq.h"
#include "tensor/kernels/softmax.h"
#include "train/data/batching.h"
#include "train/loop/grad_stats.h"
#include "train/plot/svg_chart.h"
#include "train/data/vocab.h"

namespace gf::lab {

// ---------------------------------------------------------------- numbers

double l2_norm(const Tensor& t);  // sqrt of the sum of squares (0 for an undefined tensor)
double max_abs(const Tensor& t);  // largest |x| (NaN if any is NaN)
int64_t count_nonfinite(const Tensor& t);

// A chart series of the means with a shaded band from min to max (the spread over seeds).
ChartSeries band_series(const std::string& name, const std::vector<double>& x, const std::vector<Spread>& s, const std::string& color = "",
                        bool dashed = false);

// A flag's list of positive integers separated by commas, strictly increasing (the depths of a
// sweep), at least two. Throws std::invalid_argument naming `what` ("lab depth: --depths").
std::vector<int64_t> parse_increasing_ints(const std::string& text, const std::string& what);
// The same for numbers ("0,0.05,0.1,0.2": the levels of a dose-response).
std::vector<double> parse_increasing_reals(const std::string& text, const std::string& what);

// The double-precision softmax of one row and log p of one entry (tensor/kernels/softmax.h).
using kernels::log_softmax_at;
using kernels::softmax_exact;

// ---------------------------------------------------------------- data

// A parallel data set as ids (train::Vocab's specials: PAD 0, UNK 1, BOS 2, EOS 3).
struct IdData {
  int64_t src_vocab = 0, tgt_vocab = 0;
  std::vector<train::EncodedPair> train, valid, test;  // valid: the built-in corpus's validation split (synthetic tasks: none)
  train::Vocab src_words, tgt_words;  // for the built-in corpus; synthetic tasks name ids "s4", "s5", ...
};

// Synthetic sequence tasks over `symbols` symbols (ids 4 .. 4+symbols-1), lengths uniform in
// [min_len, max_len]. copy: the target is the source; reverse: the source backwards; sort: the
// source sorted ascending. The same seed gives the same data; test sequences differ from train ones.
IdData synthetic_task(const std::string& kind, int64_t symbols, int64_t min_len, int64_t max_len, int64_t n_train, int64_t n_test,
                      uint64_t seed);

// The synthetic task's options, one source for the defaults the labs that train on it share:
// --task reverse, --symbols 10, --min-len 4, --max-len 8, --train 2000, --eval 200. `note` comes
// before each help text ("(3) " in a lab of numbered parts). A lab appends its own options after.
std::vector<Option> task_options(const std::string& note = "");
// The same as a member of a lab's settings (lab/fields.h); a lab sets its own defaults where they differ.
struct TaskSettings {
  std::string task = "reverse";
  int64_t symbols = 10, min_len = 4, max_len = 8, train = 2000, eval = 200;
  IdData make(uint64_t seed) const { return synthetic_task(task, symbols, min_len, max_len, train, eval, seed); }
};
Fields<TaskSettings> task_fields(const std::string& note = "");

// The built-in English -> Korean corpus (korean/corpus_ko.h) of `total` pairs as ids, vocabularies
// built on its training split; test is its test split.
IdData builtin_corpus(int64_t total, uint64_t seed = 1);

// ---------------------------------------------------------------- models

// A small translator: d_model, heads, layers (encoder and decoder each), ff, Pre-LN or Post-LN,
// no dropout unless given.
nn::Seq2SeqOptions small_model(const IdData& data, int64_t d_model, int64_t heads, int64_t layers, int64_t ff, bool pre_ln,
                               double dropout = 0.0);

// Every attention module of a model, in registration order (for a translator: each encoder layer's
// self_attn, then each decoder layer's self_attn and multihead_attn, the order forward calls them):
// to flip a switch on all of them (naive_softmax, score_scale) or observe their weights.
std::vector<nn::MultiheadAttention*> attention_modules(const nn::Module& model);

// The spectral norm (largest singular value) of a matrix w (rows, cols), by `iterations` steps of
// power iteration in double from a vector of ones: a statistic, not training (σReparam's own
// estimate takes one step per forward, nn/linear.h).
double spectral_norm(const Tensor& w, int iterations = 100);

// ---------------------------------------------------------------- training

// Training until the held-out loss stops improving, instead of for a fixed number of steps: every
// `every` steps the teacher-forced NLL per token on `valid` is measured (eval mode, no graph);
// training stops after `patience` measurements in a row that do not beat the best by a factor
// (1 - min_improvement), or at FitOptions::steps, and the weights of the best measurement are
// restored: the lowest NLL, or with `select_free_running` the highest free-running (greedy) token
// accuracy on the first `select_limit` held-out pairs. Teacher-forced NLL never sees the model's own
// prefix, so it scores a model trained on its own predictions (scheduled sampling) by the wrong test;
// free-running accuracy is the score a translator is used by.
struct Convergence {
  const std::vector<train::EncodedPair>* valid = nullptr;  // null: no early stop, train for `steps`
  int64_t every = 50;
  int64_t patience = 4;
  double min_improvement = 0.01;
  bool select_free_running = false;
  size_t select_limit = 200;
};

// Scheduled sampling (Bengio et al. 2015, arXiv:1506.03099): each decoder input after <bos> whose
// position has a label is the true previous token with probability eps(step) = k / (k + exp(step /
// k)) (the paper's inverse-sigmoid decay), else a token sampled from the model's own distribution
// for that position (<pad> and <bos> excluded). A Transformer's decoder predicts every position at
// once, so those distributions come from a first teacher-forced pass without a graph, and the loss
// is that of a second pass on the mixed inputs, against the true labels (the two-pass form of
// Mihaylova and Martins 2019 and Duckworth et al. 2019; Bengio et al.'s RNN fed each sample at
// the next step). No gradient flows through the sampling, as in the paper.
struct ScheduledSampling {
  double k = 0;  // 0: off (teacher forcing)
  double gold_probability(int64_t step) const;  // eps(step); 1 when off
};

struct FitOptions {
  int64_t steps = 200;        // the most steps (all of them without `until`)
  double lr = 1e-3;
  int64_t warmup = 0;       // linear warm-up steps (0: none)
  // The rate after the warm-up (optim/schedule.h): "constant" (the labs' default), "inverse-sqrt" or
  // "wsd" (the budget's progress is the share of `steps` taken).
  std::string schedule = "constant";
  double decay_fraction = 0.15;
  double clip = 1.0;        // global gradient-norm clip (0: none)
  double label_smoothing = 0;
  // A loss above this many times the first one, after 20 steps, counts as diverged and stops the
  // run (0: only a non-finite loss does). A run that starts from a trained model starts at a loss
  // so low that noise alone can triple it: it passes 0.
  double divergence_factor = 3;
  int64_t max_tokens = 2048;  // tokens per batch (length-bucketed, as the trainer)
  uint64_t seed = 1;          // batch order, dropout and scheduled sampling's draws
  Convergence until;
  ScheduledSampling sampling;
  train::GradStatsRecorder* grad_stats = nullptr;  // records the steps it is due at (train/loop/grad_stats.h)
};

struct FitResult {
  std::vector<double> losses;  // one per step run (the last may be non-finite when diverged)
  bool diverged = false;       // a non-finite loss, or a loss above divergence_factor x the first one after 20 steps
  int64_t diverged_at = -1;    // 1-based step
  // With FitOptions::until: the held-out NLL at each measurement, and which one was kept.
  std::vector<int64_t> valid_steps;
  std::vector<double> valid_nll;
  std::vector<double> valid_free_running;  // with Convergence::select_free_running: the token accuracy at each measurement
  int64_t best_step = -1;      // the step whose weights the model has at the end (-1: the last)
  bool converged = false;      // stopped by the rule, not by the step limit
  std::vector<double> sampled_share;  // scheduled sampling: share of labelled inputs replaced, per step
};

// Adam (0.9, 0.98, eps 1e-9) on teacher-forced cross-entropy (PAD ignored), the trainer's recipe in
// miniature. on_step(step, loss) runs after each update (read gradients there: they are kept until
// the next step). Stops early when diverged, or when converged (FitOptions::until).
FitResult fit(nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& data, const FitOptions& options,
              const std::function<void(int64_t step, double loss)>& on_step = {});

// The batches fit() draws from, in its order for `seed`: useful to reproduce one step's batch.
std::vector<train::Batch> batches(const std::vector<train::EncodedPair>& data, int64_t max_tokens, uint64_t seed);

// ---------------------------------------------------------------- evaluation
// (These run the model as it is: call model.eval() first if it has dropout.)

struct Accuracy {
  double exact = 0;   // share of sequences reproduced exactly
  double tokens = 0;  // share of reference positions predicted right (a shorter output counts as wrong there)
};

// Greedy free-running decoding that recomputes the prefix with model.forward() each step, so it
// applies whatever model.masks says (unlike the KV-cached train::translate_batch, always causal).
std::vector<std::vector<int64_t>> greedy_recompute(const nn::Seq2SeqTransformer& model, const train::Batch& batch, int64_t max_len);
// Accuracy of greedy_recompute over pairs (at most `limit` of them; 0 = all).
Accuracy free_running_accuracy(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t limit = 0);
// Teacher-forced next-token accuracy and mean NLL over pairs (no graph, eval mode).
struct TeacherForced {
  double accuracy = 0, nll = 0;
};
TeacherForced teacher_forced(const nn::Seq2SeqTransformer& model, const std::vector<train::EncodedPair>& pairs, size_t limit = 0);

}  // namespace gf::lab

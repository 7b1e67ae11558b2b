#include "train/loop/trainer.h"

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/shape.h"
#include "optim/adam.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"
#include "tensor/kernels/random.h"
#include "train/loop/batch_loss.h"
#include "train/data/batching.h"
#include "train/eval/bleu.h"
#include "train/loop/checkpoint.h"
#include "train/loop/grad_stats.h"
#include "train/loop/model.h"
#include "train/loop/progress.h"
#include "train/data/run_data.h"
#include "train/plot/svg_plot.h"
#include "train/decode/translator.h"

namespace gf::train {
namespace fs = std::filesystem;

namespace {

double now_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A well-mixed 64-bit seed for (run seed, step): dropout masks depend only on these two.
uint64_t step_seed(uint64_t seed, int64_t step) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// For the crash test: GRADFLOW_TEST_KILL_IN_SAVE=N kills the process during the N-th checkpoint,
// after the new weights are written and before state.json names them.
void maybe_die_in_save(int save_index) {
  const char* k = std::getenv("GRADFLOW_TEST_KILL_IN_SAVE");
  if (k && std::atoi(k) == save_index) std::raise(SIGKILL);
}

}  // namespace

TrainResult train_translator(const RunConfig& config_in, const TrainOptions& opt) {
  if (opt.out.empty()) throw std::invalid_argument("train: --out DIR is required");
  RunConfig config = config_in;
  config.validate();
  fs::create_directories(opt.out);
  std::FILE* log = stdout;

  // ---- data and vocabularies ----
  RunData data = load_run_data(config);
  if (data.train.empty()) throw std::runtime_error("train: the training split is empty");
  if (data.valid.empty()) throw std::runtime_error("train: the validation split is empty");
  Vocab src_vocab, tgt_vocab;
  if (opt.resume) {
    src_vocab = Vocab::load(run_file(opt.out, "vocab.src.txt"));
    tgt_vocab = Vocab::load(run_file(opt.out, "vocab.tgt.txt"));
  } else {
    std::tie(src_vocab, tgt_vocab) = build_vocabularies(config, data.train);
    src_vocab.save(run_file(opt.out, "vocab.src.txt"));
    tgt_vocab.save(run_file(opt.out, "vocab.tgt.txt"));
    write_file_atomic(run_file(opt.out, "config.json"), config.to_json());
  }
  std::vector<EncodedPair> train_pairs = encode_pairs(data.train, src_vocab, tgt_vocab);
  std::vector<EncodedPair> valid_pairs = encode_pairs(data.valid, src_vocab, tgt_vocab);
  BatchPlan plan(train_pairs, config.max_tokens, config.max_len);
  BatchPlan valid_plan(valid_pairs, config.max_tokens, config.max_len);

  // ---- model and optimizer ----
  std::unique_ptr<TranslationModel> net = make_translation_model(config, src_vocab, tgt_vocab, config.seed);
  nn::Module& model = net->module();
  model.train();
  optim::Adam adam(model.named_parameters(), {.lr = config.lr, .beta1 = config.beta1, .beta2 = config.beta2, .eps = config.adam_eps});
  const std::vector<Variable> params = model.parameters();
  RunState state;
  if (opt.resume) {
    state = load_state(opt.out);
    model.load_state_dict(load_safetensors(run_file(opt.out, state.model_file)).tensors, true);
    adam.load_state_dict(load_safetensors(run_file(opt.out, state.optim_file)).tensors);
    if (adam.steps() != state.step)
      throw std::runtime_error(opt.out + ": optimizer state is at step " + std::to_string(adam.steps()) + " but the run state says " +
                               std::to_string(state.step));
  } else {
    state.epoch = 1;
  }

  std::unique_ptr<GradStatsRecorder> grad_stats;
  if (opt.grad_stats > 0) grad_stats = std::make_unique<GradStatsRecorder>(*net, opt.out, opt.grad_stats, opt.resume ? state.step : 0);

  fmt::print(log, "data: {}\n", config.data_description());
  fmt::print(log, "  train {} pairs ({} batches of <= {} tokens; {} skipped over --max-len {}), valid {}, test {}{}\n", plan.pairs_used(),
             plan.size(), config.max_tokens, plan.skipped_too_long(), config.max_len, valid_plan.pairs_used(), data.test.size(),
             data.skipped_empty ? fmt::format(" ({} empty lines skipped)", data.skipped_empty) : "");
  fmt::print(log, "  vocab: source {}, target {} (min freq {})\n", src_vocab.size(), tgt_vocab.size(), config.min_freq);
  const nn::TransformerLayerOptions& l = config.layer;
  fmt::print(log, "model: d_model {}, heads {} (kv {}), layers {}+{}, ff {}, {}, {} {}, dropout {}, {} parameters\n", l.d_model, l.nhead,
             l.key_value_heads(), config.layers, config.layers, l.dim_feedforward, l.activation, l.norm_first ? "pre" : "post", l.norm,
             l.dropout, model.num_parameters());
  std::string budget;
  if (config.epochs) budget += fmt::format(" {} epochs", config.epochs);
  if (config.steps) budget += fmt::format(" {} steps", config.steps);
  if (config.minutes > 0) budget += fmt::format(" {} minutes", config.minutes);
  fmt::print(log, "train: lr {} warmup {} label smoothing {} clip {}, budget:{}{}\n", config.lr, config.warmup, config.label_smoothing,
             config.clip, budget.empty() ? " 1 epoch" : budget,
             opt.resume ? fmt::format(" (resuming at step {}, epoch {})", state.step, state.epoch) : "");
  std::fflush(log);

  const int64_t max_epochs = config.epochs > 0 ? config.epochs : (config.steps == 0 && config.minutes <= 0 ? 1 : INT64_MAX);
  const double budget_seconds = config.minutes > 0 ? config.minutes * 60.0 : INFINITY;
  Progress progress(stderr, config.log_every);
  TrainResult result;
  const double start = now_seconds();
  const double seconds_before = state.train_seconds;
  auto elapsed = [&] { return seconds_before + now_seconds() - start; };
  int64_t tokens_this_call = 0;
  int saves = 0;
  double recent_loss = 0;
  int64_t recent_n = 0;
  constexpr int kCurveEvery = 20;  // steps averaged into one point of the training curve
  double curve_sum = 0;
  int curve_n = 0;
  const std::map<std::string, std::string> file_meta = {{"format", "gradflow"}, {"config", config.to_json()}};

  auto write_curve = [&] {
    std::vector<std::pair<double, double>> tr, va;
    for (auto& p : state.train_curve) tr.emplace_back(p.step, p.loss);
    for (auto& p : state.valid_curve) va.emplace_back(p.step, p.loss);
    write_file_atomic(run_file(opt.out, "loss.svg"), loss_curve_svg(tr, va, "training loss (label-smoothed, 20-step means) and validation NLL"));
  };
  auto checkpoint = [&] {
    state.train_seconds = elapsed();
    ++saves;
    maybe_die_in_save(saves);
    save_checkpoint(opt.out, state, model.state_dict(), adam.state_dict(), file_meta);
    write_curve();
    if (grad_stats) grad_stats->write_svg();
  };
  auto out_of_budget = [&] {
    return (config.steps > 0 && state.step >= config.steps) || elapsed() >= budget_seconds || state.epoch > max_epochs;
  };

  bool stopped = false;
  while (!out_of_budget()) {
    std::vector<size_t> order = plan.epoch_order(config.seed, static_cast<uint64_t>(state.epoch));
    const double epoch_start = now_seconds();
    int64_t epoch_tokens = 0;
    for (size_t bi = static_cast<size_t>(state.batch_in_epoch); bi < order.size(); ++bi) {
      if ((config.steps > 0 && state.step >= config.steps) || elapsed() >= budget_seconds) {
        stopped = true;
        break;
      }
      Batch batch = plan.batch(order[bi]);
      default_generator().seed(step_seed(config.seed, state.step));
      if (grad_stats) grad_stats->begin_step(state.step + 1, batch);
      Variable loss = net->loss(batch, config.label_smoothing);
      adam.zero_grad();
      loss.backward();
      if (grad_stats) grad_stats->after_backward();
      if (config.clip > 0) optim::clip_grad_norm(params, config.clip);
      adam.set_lr(optim::warmup_inverse_sqrt(config.lr, state.step, config.warmup));
      adam.step();
      const double l = loss.item();
      if (grad_stats) grad_stats->after_update(l, adam.lr());
      if (!std::isfinite(l)) {
        if (grad_stats) grad_stats->write_svg();  // the diverging run's picture is the one wanted
        throw std::runtime_error(fmt::format("train: loss became {} at step {}; lower --lr?", l, state.step + 1));
      }
      state.step += 1;
      state.batch_in_epoch = static_cast<int64_t>(bi) + 1;
      result.step_losses.emplace_back(state.step, l);
      tokens_this_call += batch.tgt_tokens;
      epoch_tokens += batch.tgt_tokens;
      recent_loss += l;
      recent_n += 1;
      curve_sum += l;
      if (++curve_n == kCurveEvery) {
        state.train_curve.push_back({static_cast<double>(state.step), curve_sum / kCurveEvery});
        curve_sum = 0, curve_n = 0;
      }
      if (!opt.quiet) {
        ProgressInfo p;
        p.epoch = state.epoch;
        p.step = state.step;
        p.batch = static_cast<int64_t>(bi) + 1;
        p.batches = static_cast<int64_t>(order.size());
        p.loss = recent_loss / static_cast<double>(recent_n);
        double dt = now_seconds() - epoch_start;
        p.tokens_per_s = dt > 0 ? static_cast<double>(epoch_tokens) / dt : 0;
        p.lr = adam.lr();
        double per_step = dt / static_cast<double>(bi + 1 - static_cast<size_t>(0));
        double eta = INFINITY;
        if (config.minutes > 0) eta = budget_seconds - elapsed();
        if (config.steps > 0) eta = std::min(eta, per_step * static_cast<double>(config.steps - state.step));
        if (max_epochs != INT64_MAX)
          eta = std::min(eta, per_step * static_cast<double>((max_epochs - state.epoch) * static_cast<int64_t>(order.size()) +
                                                             static_cast<int64_t>(order.size() - bi - 1)));
        p.eta_seconds = std::isfinite(eta) ? eta : -1;
        progress.update(p);
      }
      if (state.step % config.log_every == 0) recent_loss = 0, recent_n = 0;
    }
    if (stopped) break;
    // ---- end of epoch: validate, keep the best, checkpoint ----
    progress.clear();
    double valid = evaluate_loss(*net, valid_plan);
    result.valid_loss = valid;
    state.valid_curve.push_back({static_cast<double>(state.step), valid});
    bool best = valid < state.best_valid_loss;
    if (best) {
      state.best_valid_loss = valid;
      save_safetensors(run_file(opt.out, "best.safetensors"), model.state_dict(), file_meta);
    }
    double dt = now_seconds() - epoch_start;
    fmt::print(log, "epoch {} done: step {}, valid loss {:.4f} (ppl {:.2f}){}, {:.0f} tgt tok/s, {} elapsed\n", state.epoch, state.step,
               valid, std::exp(valid), best ? " best" : "", dt > 0 ? static_cast<double>(epoch_tokens) / dt : 0.0,
               format_duration(elapsed()));
    std::fflush(log);
    state.epoch += 1;
    state.batch_in_epoch = 0;
    result.epochs_done += 1;
    checkpoint();
  }
  progress.clear();
  if (stopped) {
    checkpoint();  // mid-epoch: resume continues with the next batch of this epoch
    fmt::print(log, "stopped by the budget at step {} (epoch {}, batch {}); checkpoint saved\n", state.step, state.epoch, state.batch_in_epoch);
  }
  if (!fs::exists(run_file(opt.out, "best.safetensors")))
    save_safetensors(run_file(opt.out, "best.safetensors"), model.state_dict(), file_meta);
  result.steps = state.step;
  result.train_seconds = elapsed();
  double call_seconds = now_seconds() - start;
  result.tokens_per_second = call_seconds > 0 ? static_cast<double>(tokens_this_call) / call_seconds : 0;
  fmt::print(log, "trained {} steps in {} ({:.0f} target tokens/s); run folder {}\n", state.step, format_duration(result.train_seconds),
             result.tokens_per_second, opt.out);

  // ---- the result: sample translations and test scores with the best weights ----
  if (opt.final_eval && !data.test.empty()) {
    Translator tr = Translator::load(opt.out);
    std::vector<std::string> srcs, refs;
    for (const auto& p : data.test) {
      srcs.push_back(join_tokens(p.first));
      refs.push_back(join_tokens(p.second));
    }
    const double t0 = now_seconds();
    std::vector<std::string> hyps = tr.translate(srcs, tr.default_decode_options(), 64);
    const double decode_s = now_seconds() - t0;
    int64_t exact = 0;
    for (size_t i = 0; i < hyps.size(); ++i) exact += hyps[i] == refs[i];
    BleuResult bleu = corpus_bleu(hyps, refs, "none");
    result.test_bleu = bleu.score;
    result.test_exact = static_cast<double>(exact) / static_cast<double>(hyps.size());
    fmt::print(log, "\nsample translations ({}, greedy):\n", data.test_name);
    for (int64_t i = 0; i < std::min<int64_t>(opt.samples, static_cast<int64_t>(hyps.size())); ++i)
      fmt::print(log, "  src: {}\n  ref: {}\n  out: {}\n\n", srcs[i], refs[i], hyps[i]);
    fmt::print(log, "test ({} sentences, greedy, best checkpoint): BLEU {:.2f} (tokenize none), exact match {:.1f}% ({}/{}), decoded in {:.1f}s\n",
               hyps.size(), bleu.score, 100.0 * result.test_exact, exact, hyps.size(), decode_s);
    std::fflush(log);
  }
  return result;
}

}  // namespace gf::train

// gradflow bench: training and decoding throughput measured exactly as the PyTorch reference
// (../shared/reference/torch_translator.py, its `bench` and `decode` modes) measures them, printed
// as one JSON line with the reference's keys, so scripts/bench_vs_torch.sh can put the two side by
// side on the same machine.
#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "train/run/memory_estimate.h"
#include "app/recipe_flags.h"
#include "autograd/grad_mode.h"
#include "autograd/profile.h"
#include "nn/decode_layout.h"
#include "optim/adam.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/matmul.h"
#include "tensor/storage.h"
#include "tensor/kernels/random.h"
#include "tensor/parallel.h"
#include "tensor/runtime.h"
#include "train/run/batch_loss.h"
#include "train/data/batching.h"
#include "train/eval/bleu.h"
#include "train/decode/decode.h"
#include "train/data/parallel_text.h"
#include "train/run/run_config.h"
#include "train/data/vocab.h"

namespace gf::app {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, as the reference's dict

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Python's round(x, digits), near enough for printing.
double round_to(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

// The reference's resource.getrusage(RUSAGE_SELF).ru_maxrss / 1024 (Linux reports KiB).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return round_to(static_cast<double>(u.ru_maxrss) / 1024.0, 1);
}

// What both modes share: the training vocabularies and a freshly initialised model.
struct Setup {
  std::vector<train::TokenPair> train_pairs;
  train::Vocab src_vocab, tgt_vocab;
  std::unique_ptr<nn::Seq2SeqTransformer> model;
  Json info;
  size_t max_line_bytes = 0;  // --max-line-bytes, for every file bench reads
};

Setup make_setup(const train::RunConfig& c, size_t max_line_bytes) {
  Setup s;
  s.max_line_bytes = max_line_bytes;
  s.train_pairs = train::read_parallel_dir(c.data, "train", c.src, c.tgt, max_line_bytes).pairs;
  GF_CHECK_AS(std::runtime_error, !s.train_pairs.empty(), "bench: {}/train.{} has no sentence pairs", c.data, c.src);
  s.src_vocab = train::Vocab::build_source(s.train_pairs, c.min_freq);
  s.tgt_vocab = train::Vocab::build_target(s.train_pairs, c.min_freq);
  train::check_training_memory(c, s.src_vocab.size(), s.tgt_vocab.size(), 1);  // before building: a model too large is refused with its estimate
  s.model = std::make_unique<nn::Seq2SeqTransformer>(c.model_options(s.src_vocab.size(), s.tgt_vocab.size()), c.seed);
  s.info = Json{{"impl", "gradflow"},
                {"version", GRADFLOW_VERSION},
                {"params", s.model->num_parameters()},
                {"src_vocab", s.src_vocab.size()},
                {"tgt_vocab", s.tgt_vocab.size()},
                {"threads", max_threads()},
                {"blas_core", blas_core_in_use()},
                {"d_model", c.layer.d_model},
                {"heads", c.layer.nhead},
                {"kv_heads", c.layer.key_value_heads()},
                {"layers", c.layers},
                {"ff", c.layer.dim_feedforward},
                {"max_tokens", c.max_tokens},
                {"precision", precision_name(kernels::precision())},
                {"precision_requested", c.precision}};
  return s;
}

double sgemm_peak_gflops();
double bf16_peak_gflops();
Json profile_table(double seconds, double update_seconds, int64_t steps);

// The reference's bench: batches shuffled with the seed, 3 warm-up steps, then `steps` timed
// training steps (forward, backward, clip, Adam, schedule). Where the reference would run out of
// batches (a tiny data set) this continues with the next epoch's order instead.
Json bench_train(const train::RunConfig& c, int64_t steps, bool profile_ops, Setup& s) {
  constexpr int64_t kWarmup = 3;
  std::vector<train::EncodedPair> pairs = train::encode_pairs(s.train_pairs, s.src_vocab, s.tgt_vocab);
  train::BatchPlan plan(pairs, c.max_tokens);  // no --max-len cut: the reference keeps every pair
  GF_CHECK_AS(std::runtime_error, plan.size() != 0, "bench: no training batches (every source sentence is empty?)");
  nn::Seq2SeqTransformer& model = *s.model;
  model.train();
  optim::Adam adam(model.named_parameters(), {.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.adam_eps});
  const std::vector<Variable> params = model.parameters();
  default_generator().seed(c.seed);  // dropout masks

  std::vector<size_t> order;
  size_t next = 0;
  uint64_t epoch = 0;
  int64_t step = 0;
  double update_seconds = 0;  // clipping and Adam, for the profile
  auto train_step = [&](int64_t& tgt_tokens, int64_t& src_tokens) {
    if (next == order.size()) order = plan.epoch_order(c.seed, ++epoch), next = 0;
    train::Batch batch = plan.batch(order[next++]);
    train::BatchTensors t = train::to_tensors(batch);
    profile::mark();
    adam.zero_grad();  // before the forward, as the trainer: the last step's gradients are not held beside the activations
    Variable loss = train::batch_loss(model, t, c.label_smoothing);  // scalar
    loss.backward();
    const auto t_update = std::chrono::steady_clock::now();
    optim::clipped_update(adam, params, c.clip, optim::warmup_inverse_sqrt(c.lr, step, c.warmup));  // as the trainer
    update_seconds += seconds_since(t_update);
    ++step;
    const double l = loss.item();  // the reference's loss.item(): waits for the step, as here
    GF_CHECK_AS(std::runtime_error, std::isfinite(l), "bench: loss became {} at step {}", l, step);
    tgt_tokens += batch.tgt_tokens;
    src_tokens += batch.src_tokens;
  };

  int64_t ignored_tgt = 0, ignored_src = 0;
  for (int64_t i = 0; i < kWarmup; ++i) train_step(ignored_tgt, ignored_src);
  int64_t tgt_tokens = 0, src_tokens = 0;
  const uint64_t flops0 = kernels::gemm_flops();
  update_seconds = 0;
  if (profile_ops) profile::start();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) train_step(tgt_tokens, src_tokens);
  const double dt = seconds_since(t0);
  profile::stop();
  // The training's peak, taken before the peak products below allocate their own matrices.
  const double rss_mib = peak_rss_mib();
  const double model_gflops = static_cast<double>(kernels::gemm_flops() - flops0) / dt / 1e9;
  const double peak_gflops = sgemm_peak_gflops();
  Json info = s.info;
  info["steps"] = steps;
  info["seconds"] = round_to(dt, 6);  // microseconds: a tiny model's steps take less than a millisecond
  info["tgt_tokens_per_s"] = round_to(static_cast<double>(tgt_tokens) / dt, 1);
  info["src_tokens_per_s"] = round_to(static_cast<double>(src_tokens) / dt, 1);
  info["peak_rss_mib"] = rss_mib;
  // The tensors' share of it: the most bytes held by tensor storages at once (weights, Adam's
  // moments, gradients, activations); the rest is code, the data set, and the allocator's slack.
  info["tensor_peak_mib"] = round_to(static_cast<double>(memory_stats().peak_bytes) / (1 << 20), 1);
  info["model_gflops_per_s"] = round_to(model_gflops, 2);  // forward + backward GEMM FLOPs, from the shapes
  info["sgemm_peak_gflops_per_s"] = round_to(peak_gflops, 2);
  if (kernels::precision() == Precision::BFloat16) {
    // The products ran in bfloat16: mfu against bf16's own peak, measured the same way.
    const double bf16_peak = bf16_peak_gflops();
    info["bf16_peak_gflops_per_s"] = round_to(bf16_peak, 2);
    info["bf16_path"] = kernels::bf16_path_name(kernels::bf16_path());
    info["bf16_isa"] = kernels::bf16_path() == kernels::Bf16Path::Native ? kernels::bf16_isa() : "none (portable path)";
    info["mfu"] = round_to(model_gflops / bf16_peak, 3);
    info["mfu_vs_sgemm_peak"] = round_to(model_gflops / peak_gflops, 3);
  } else {
    info["mfu"] = round_to(model_gflops / peak_gflops, 3);
  }
  if (profile_ops) info["profile"] = profile_table(dt, update_seconds, steps);
  return info;
}

// An op's matrix-product FLOPs over its whole time (glue and other kernels included): how far its
// products are from the sgemm peak. 0 for an op without products.
double gflops_per_s(uint64_t flops, double seconds) { return seconds > 0 ? static_cast<double>(flops) / seconds / 1e9 : 0.0; }

// Per op, per step: forward and backward milliseconds, MiB written and GEMM GFLOP/s, largest total
// time first; then the optimizer and what no op accounts for. Also printed as a table on stderr.
Json profile_table(double seconds, double update_seconds, int64_t steps) {
  std::vector<std::pair<std::string, profile::OpStats>> rows;
  for (auto& [name, st] : profile::results()) rows.emplace_back(name, st);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.forward_seconds + a.second.backward_seconds > b.second.forward_seconds + b.second.backward_seconds;
  });
  const double per = 1000.0 / static_cast<double>(steps), mib = 1.0 / (1 << 20) / static_cast<double>(steps);
  Json table = Json::array();
  double accounted = update_seconds;
  fmt::print(stderr, "{:<28} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}\n", "op (per step)", "fwd ms", "bwd ms", "fwd MiB", "bwd MiB", "share",
             "fwd GF/s", "bwd GF/s");
  for (const auto& [name, st] : rows) {
    const double total = st.forward_seconds + st.backward_seconds;
    accounted += total;
    table.push_back(Json{{"op", name}, {"calls", st.forward_calls / steps}, {"forward_ms", round_to(st.forward_seconds * per, 3)},
                         {"backward_ms", round_to(st.backward_seconds * per, 3)}, {"forward_mib", round_to(st.forward_bytes * mib, 2)},
                         {"backward_mib", round_to(st.backward_bytes * mib, 2)},
                         {"forward_gemm_gflops_per_s", round_to(gflops_per_s(st.forward_flops, st.forward_seconds), 1)},
                         {"backward_gemm_gflops_per_s", round_to(gflops_per_s(st.backward_flops, st.backward_seconds), 1)}});
    fmt::print(stderr, "{:<28} {:>9.2f} {:>9.2f} {:>9.1f} {:>9.1f} {:>6.1f}% {:>9.1f} {:>9.1f}\n", name, st.forward_seconds * per,
               st.backward_seconds * per, st.forward_bytes * mib, st.backward_bytes * mib, 100 * total / seconds,
               gflops_per_s(st.forward_flops, st.forward_seconds), gflops_per_s(st.backward_flops, st.backward_seconds));
  }
  table.push_back(Json{{"op", "(clip + Adam)"}, {"forward_ms", round_to(update_seconds * per, 3)}});
  table.push_back(Json{{"op", "(not in an op: batching, engine, zero_grad)"}, {"forward_ms", round_to((seconds - accounted) * per, 3)}});
  fmt::print(stderr, "{:<28} {:>9.2f} {:>9} {:>9} {:>9} {:>6.1f}%\n", "(clip + Adam)", update_seconds * per, "", "", "", 100 * update_seconds / seconds);
  fmt::print(stderr, "{:<28} {:>9.2f} {:>9} {:>9} {:>9} {:>6.1f}%\n", "(rest)", (seconds - accounted) * per, "", "", "",
             100 * (seconds - accounted) / seconds);
  return table;
}

// The machine's matrix-product peak as this process sees it: the fastest of 7 float32 GEMMs of
// 2048 x 2048 x 2048 on the same threads and OpenBLAS kernel as the step (after one warm-up). The
// fastest, not the median: on a shared machine a GEMM can only be slowed down, never sped up.
double sgemm_peak_gflops() {
  constexpr int64_t n = 2048;
  Tensor a = Tensor::zeros({n, n}, DType::Float32), b = Tensor::zeros({n, n}, DType::Float32);  // (n, n)
  a.fill_(0.5), b.fill_(0.25);
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor c = kernels::matmul(a, b);  // (n, n)
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

// The same for bfloat16 products: the fastest of 7 bfloat16 GEMMs of 2048 x 2048 x 2048 through
// the kernel the step's products use (oneDNN, or sgemm on the portable path; cut across the threads
// as they are).
double bf16_peak_gflops() {
  constexpr int64_t n = 2048;
  const Tensor a = Tensor::full({n, n}, 0.5, DType::BFloat16), b = Tensor::full({n, n}, 0.25, DType::BFloat16);  // (n, n)
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor c = kernels::matmul_bf16(a, b);  // (n, n)
    if (rep > 0) best = std::max(best, 2.0 * n * n * n / seconds_since(t0) / 1e9);
  }
  return best;
}

// The reference's decode: random weights in eval mode, the test sources in batches of
// `decode_batch`, each batch decoded greedily for exactly (its longest source + 20) steps whatever
// the model picks (<eos> does not stop it). With the KV cache unless told otherwise (the reference
// has none: it reruns the decoder over the whole prefix every step). Beam search (beam > 1) is a
// real search instead: each sentence ends by the default stopping rule (BeamStop::Heuristic) or at
// its own source length + 20; with random weights <eos> is rare, so nearly every sentence runs to
// its limit under either rule.
Json bench_decode(const train::RunConfig& c, const std::string& test, int64_t decode_batch, bool use_cache, int64_t beam,
                  std::optional<DType> kv_cache, Setup& s) {
  constexpr int64_t kExtra = 20;
  const std::filesystem::path file = std::filesystem::path(c.data) / (test + "." + c.src);
  std::vector<train::Tokens> sources;
  // An empty line would be an all-padding row; Multi30k has none, so they are simply left out.
  for (const std::string& line : train::read_text_lines(file, "bench", s.max_line_bytes))
    if (train::Tokens t = split_whitespace(line); !t.empty()) sources.push_back(std::move(t));
  GF_CHECK_AS(std::runtime_error, !sources.empty(), "bench: {} has no sentences", file.string());
  nn::Seq2SeqTransformer& model = *s.model;
  model.eval();
  // As Translator::load does for translate and eval: under bf16 the weights are kept in bf16 alone.
  nn::lay_out_for_decoding(model, kernels::precision() == Precision::BFloat16 ? DType::BFloat16 : DType::Float32);
  train::DecodeOptions opt;
  opt.max_extra = kExtra;
  opt.stop_at_eos = beam > 1;  // beam search needs <eos>; random weights almost never pick it, so it runs to the limit too
  opt.beam = beam;
  opt.use_cache = use_cache;
  opt.kv_cache = kv_cache;
  int64_t sentences = 0, tokens = 0, steps = 0;
  train::DecodeStats stats;
  const uint64_t flops0 = kernels::gemm_flops();
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < sources.size(); i += static_cast<size_t>(decode_batch)) {
    const size_t end = std::min(sources.size(), i + static_cast<size_t>(decode_batch));
    const int64_t B = static_cast<int64_t>(end - i);
    std::vector<std::vector<int64_t>> ids;
    int64_t S = 0;
    for (size_t j = i; j < end; ++j) {
      ids.push_back(s.src_vocab.encode(sources[j]));
      S = std::max<int64_t>(S, static_cast<int64_t>(ids.back().size()));
    }
    std::vector<int64_t> flat(static_cast<size_t>(B * S), train::Vocab::kPad);
    for (int64_t b = 0; b < B; ++b) std::copy(ids[b].begin(), ids[b].end(), flat.begin() + b * S);
    Tensor src = Tensor::from_vector(flat, {B, S});  // (B, S)
    train::DecodeStats st;
    for (const auto& out : train::translate_batch(model, src, opt, &st)) tokens += static_cast<int64_t>(out.size());
    sentences += B;
    steps += st.steps;
    stats.cache_bytes_peak = std::max(stats.cache_bytes_peak, st.cache_bytes_peak);
    stats.self_bytes_per_token = st.self_bytes_per_token;
    stats.cross_bytes_per_src_token = st.cross_bytes_per_src_token;
  }
  const double dt = seconds_since(t0);
  Json info = s.info;
  info["test"] = test;
  info["decode_batch"] = decode_batch;
  info["kv_cache"] = use_cache;
  info["kv_cache_dtype"] = use_cache ? dtype_name(train::cache_dtype(opt, DType::Float32)) : "none";
  info["beam"] = beam;
  // What a sentence's decoding runs to, so that greedy and beam figures are read for what they are.
  info["stops"] = beam > 1 ? "beam search: a sentence stops by the default (heuristic) rule or at its own source length + 20 tokens; "
                             "with random weights <eos> is rare, so nearly every sentence runs to its limit"
                           : "greedy: every sentence runs exactly (longest source in its batch + 20) steps, <eos> ignored, as the reference";
  info["decode_steps"] = steps;  // model steps, summed over the batches
  info["seconds"] = round_to(dt, 6);
  info["sentences_per_s"] = round_to(static_cast<double>(sentences) / dt, 2);
  info["tokens_per_s"] = round_to(static_cast<double>(tokens) / dt, 1);
  // The work of the matrix products (linears, encoder attention; not attend_one's per-row dot
  // products), to compare greedy and beam search by what they must compute.
  info["gemm_gflop"] = static_cast<double>(kernels::gemm_flops() - flops0) / 1e9;
  info["peak_rss_mib"] = peak_rss_mib();
  if (use_cache) {
    info["kv_cache_bytes_per_target_token"] = stats.self_bytes_per_token;  // 2 x layers x kv_heads x head_dim x bytes
    info["kv_cache_bytes_per_source_token"] = stats.cross_bytes_per_src_token;
    info["kv_cache_peak_mib"] = round_to(static_cast<double>(stats.cache_bytes_peak) / (1 << 20), 2);
  }
  return info;
}

}  // namespace

Flags bench_flags() {
  train::RunConfig d;  // the reference's defaults
  Flags f("bench",
          "Measures gradflow as the PyTorch reference (../shared/reference/torch_translator.py) measures itself and prints\n"
          "one JSON line with the reference's keys. MODE train: 3 warm-up steps, then --steps timed training steps on\n"
          "length-bucketed batches shuffled with the seed (target tokens/s). MODE decode: random weights, the --test\n"
          "sources in batches of --decode-batch, each greedily decoded for exactly (longest source + 20) steps, ignoring\n"
          "<eos>, with the KV cache unless --no-cache (sentences/s). Both report the peak resident memory (getrusage).\n"
          "scripts/bench_vs_torch.sh runs both programs side by side.");
  f.add_positional("MODE", "train or decode");
  f.add_string("data", "", "folder with train.SRC/train.TGT and the --test split (required)");
  add_recipe_flags(f, d);
  f.add_string("test", "test_2016_flickr", "decode: the split whose sources are decoded");
  f.add_int("threads", 2, "threads for oneTBB and OpenBLAS (the reference also defaults to 2)");
  f.add_int("steps", 30, "train: timed steps (after 3 warm-up steps)");
  f.add_int("seed", 1, "random seed (batch order, initial weights, dropout)");
  f.add_int("decode-batch", 64, "decode: sentences decoded together");
  f.add_bool("profile", "train: time and bytes by op, forward and backward, per step (stderr table, and \"profile\" in the JSON)");
  f.add_int("beam", 1, "decode: beam size (1: greedy, fixed length as the reference; K > 1: beam search, each sentence to <eos> by the default stopping rule or its own source length + 20)");
  f.add_bool("no-cache", "decode: recompute the whole prefix every step, as the reference does (default: KV cache)");
  add_kv_cache_flag(f);
  add_max_line_bytes_flag(f);
  return f;
}

// The run config the flags describe (UsageError for a bad one).
train::RunConfig bench_config(const Flags& f) {
  train::RunConfig c;
  c.data = f.str("data");
  read_recipe_flags(f, c);
  c.seed = static_cast<uint64_t>(f.integer("seed"));
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    GF_FAIL_AS(UsageError, "bench: {}", e.what());
  }
  return c;
}

void check_bench_flags(const Flags& f) {
  const std::string mode = f.positional(0);
  GF_CHECK_AS(UsageError, mode == "train" || mode == "decode", "bench: MODE must be train or decode, got '{}'", mode);
  GF_CHECK_AS(UsageError, !f.str("data").empty(), "bench: --data DIR is required");
  for (const char* flag : {"threads", "steps", "decode-batch", "beam"})
    GF_CHECK_AS(UsageError, f.integer(flag) >= 1, "bench: --{} must be at least 1, got {}", flag, f.integer(flag));
  (void)max_line_bytes(f);
  (void)kv_cache_dtype(f);
  (void)bench_config(f);
}

int cmd_bench(int argc, char** argv) {
  Flags f = bench_flags();
  if (!f.parse(argc, argv)) return 0;
  check_bench_flags(f);
  const std::string mode = f.positional(0);
  GF_CHECK_AS(UsageError, std::filesystem::is_directory(f.str("data")), "bench: --data '{}' is not a folder", f.str("data"));
  const train::RunConfig c = bench_config(f);
  set_num_threads(static_cast<int>(f.integer("threads")));
  apply_precision(c.precision, "bench", stderr);  // stdout holds the JSON line alone

  Setup s = make_setup(c, max_line_bytes(f));
  Json out = mode == "train" ? bench_train(c, f.integer("steps"), f.on("profile"), s) : bench_decode(c, f.str("test"), f.integer("decode-batch"), !f.on("no-cache"), f.integer("beam"), kv_cache_dtype(f), s);
  fmt::print("{}\n", out.dump());
  return 0;
}

}  // namespace gf::app

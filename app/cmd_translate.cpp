// gradflow translate / eval / bleu: using and scoring a trained translator.
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <exception>
#include <memory>
#include <optional>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "app/recipe_flags.h"
#include "tensor/check.h"
#include "tensor/kernels/bf16.h"
#include "tensor/parallel.h"
#include "train/eval/bleu.h"
#include "train/run/checkpoint.h"
#include "train/run/memory_estimate.h"
#include "train/data/line_reader.h"
#include "train/data/parallel_text.h"
#include "korean/builtin_corpus.h"
#include "train/run/run_data.h"
#include "train/eval/translator.h"
#include "train/eval/score.h"
#include "tensor/io/atomic_file.h"

namespace gf::app {

namespace {

void add_decode_flags(Flags& f) {
  f.add_int("beam", 1, "beam size (1 = greedy; at most 256 and the output vocabulary; --batch-size x --beam rows are in the memory check)");
  f.add_double("length-penalty", 1.0, "beam search: a hypothesis scores log p / (tokens + 1)^this; 0 = raw log p, favouring short outputs; above 1 favours ever longer ones");
  f.add_string("beam-stop", "heuristic",
               "beam search: when a sentence stops. heuristic: also once K hypotheses are finished and no live one scores, at its present "
               "length, above the K-th best of them (Hugging Face's default); exact: only once no live one can still finish above the best "
               "(slower, may find a higher score)");
  f.add_int("batch-size", 64, "sentences decoded together");
  f.add_int("threads", 0, "threads (default: the hardware's)");
  add_kv_cache_flag(f);
  add_precision_flag(f, " (whatever the run trained in: a bf16 run's weights are float32, and decode in either)");
}

// The decoding flags alone, checked before a model is loaded or a line read.
void check_decode_flags(const Flags& f) {
  const std::string stop = f.str("beam-stop");
  GF_CHECK_AS(UsageError, stop == "heuristic" || stop == "exact", "{}: --beam-stop must be heuristic or exact, got '{}'", f.command(), stop);
  GF_CHECK_AS(UsageError, f.integer("beam") >= 1 && f.integer("beam") <= train::kMaxBeam, "{}: --beam must be 1 to {}, got {}", f.command(),
              train::kMaxBeam, f.integer("beam"));
  GF_CHECK_AS(UsageError, f.integer("batch-size") >= 1, "{}: --batch-size must be at least 1, got {}", f.command(), f.integer("batch-size"));
  check_precision_flag(f);
  (void)kv_cache_dtype(f);
}

// The decoding options for the model `t`: --beam at most its output vocabulary's size, and the
// weights with --batch-size x --beam rows' KV caches and scores within the memory.
train::DecodeOptions decode_options(const Flags& f, const train::Translator& t) {
  check_decode_flags(f);
  const int64_t vocab = t.tgt_vocab.size();
  GF_CHECK_AS(UsageError, f.integer("beam") <= vocab, "{}: --beam {} is more than the model's {} output tokens", f.command(),
              f.integer("beam"), vocab);
  train::check_decoding_rows_memory(t.config, t.src_vocab.size(), vocab, f.integer("batch-size"), f.integer("beam"));
  train::DecodeOptions o = t.default_decode_options();
  o.beam = f.integer("beam");
  o.length_penalty = f.real("length-penalty");
  o.beam_stop = f.str("beam-stop") == "exact" ? train::BeamStop::Exact : train::BeamStop::Heuristic;
  o.kv_cache = kv_cache_dtype(f);
  return o;
}

// The model reads at most max_len source tokens; translate() cut longer lines to their head.
// number[i] is the input line number of pieces' sentence i.
void warn_long_lines(const train::Translator& t, const train::Translator::Pieces& pieces, const std::vector<size_t>& number) {
  for (size_t i = 0; i < pieces.source_length.size(); ++i)
    if (static_cast<int64_t>(pieces.source_length[i]) > t.config.max_len)
      fmt::print(stderr, "translate: warning: input line {} has {} tokens; the model reads at most {} (--max-len of its run), so only its first {} are translated\n",
                 number[i], pieces.source_length[i], t.config.max_len, t.config.max_len);
}

// The input, stdin or --input: stdin must be a pipe or a file, not a terminal.
struct Input {
  int fd = 0;
  bool owned = false;
  std::unique_ptr<train::LineReader> lines;
  Input(const std::string& path, size_t max_line_bytes) {
    if (path.empty() || path == "-") {
      GF_CHECK_AS(UsageError, !::isatty(0),
                  "translate: no input on stdin (it is a terminal): pipe sentences in, one a line (echo \"...\" | gradflow translate ...), "
                  "or name a file with --input FILE");
      lines = std::make_unique<train::LineReader>(0, "stdin", max_line_bytes);
    } else {
      fd = train::open_text_file(path, "translate");
      owned = true;
      lines = std::make_unique<train::LineReader>(fd, path, max_line_bytes);
    }
  }
  ~Input() {
    if (owned) ::close(fd);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;
};

// An input line: its text, or nothing for a bad line skipped under --skip-bad-lines (its output
// line is left empty, so that output line i still answers input line i).
using InputLine = std::optional<std::string>;

// The next line into `out`; false at the end. A bad line (invalid UTF-8, too long) throws, or
// with `skip_bad` gives nothing and a warning naming it.
bool next_line(train::LineReader& in, bool skip_bad, InputLine& out) {
  std::string line;
  try {
    if (!in.next(line)) return false;
    out = std::move(line);
  } catch (const std::invalid_argument& e) {
    if (!skip_bad) throw;
    fmt::print(stderr, "translate: warning: {}; its output line is left empty (--skip-bad-lines)\n", e.what());
    out.reset();
  }
  return true;
}

// The next lines to translate: at least one (waiting for it), then whatever else has already
// arrived, up to `most`. Empty at the end of the input. A bad line after the first ends the group
// and is kept in `error`, so the lines before it are still translated first.
std::vector<InputLine> arrived_lines(train::LineReader& in, size_t most, bool skip_bad, std::exception_ptr& error) {
  std::vector<InputLine> lines;
  InputLine line;
  if (!next_line(in, skip_bad, line)) return lines;
  lines.push_back(std::move(line));
  try {
    while (lines.size() < most && in.ready() && next_line(in, skip_bad, line)) lines.push_back(std::move(line));
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  return lines;
}

// Translates a group of lines and writes one output line for each, empty for a skipped one, then
// flushes stdout. `first` is the input line number of lines[0].
void translate_group(const train::Translator& t, const std::vector<InputLine>& lines, size_t first, const Flags& f,
                     const train::DecodeOptions& options, train::DecodeStats& stats) {
  std::vector<std::string> text;
  std::vector<size_t> number;  // the input line number of each of `text`
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i]) text.push_back(*lines[i]), number.push_back(first + i);
  train::Translator::Pieces pieces;
  std::vector<std::string> out;
  if (!text.empty()) out = t.translate(text, options, f.integer("batch-size"), &stats, &pieces);
  warn_long_lines(t, pieces, number);
  for (size_t i = 0, k = 0; i < lines.size(); ++i) fmt::print("{}\n", lines[i] ? out[k++] : std::string());
  std::fflush(stdout);
  if (f.on("verbose"))
    for (size_t k = 0; k < text.size(); ++k)
      fmt::print(stderr, "{}: source pieces: {}\n{}: output pieces: {}\n", number[k], train::join_tokens(pieces.source[k]), number[k],
                 train::join_tokens(pieces.output[k]));
}

// eval --compare-precision: the same sources decoded again with the products in `other`; how many
// outputs change is what choosing one precision over the other does to the translations.
void compare_precision(const train::Translator& t, const train::TestScore& s, const train::DecodeOptions& o, int64_t batch_size,
                       const std::string& tok, const std::string& other) {
  std::vector<std::string> hyps;
  {
    const kernels::PrecisionScope scope(parse_precision(other, "--compare-precision"));
    hyps = t.translate(s.sources, o, batch_size);
  }
  const int64_t differ = train::count_differing(s.hypotheses, hyps);
  fmt::print("compared with {} decoding: {} of {} outputs differ ({:.2f}%); {}'s {}\n", other, differ, hyps.size(),
             100.0 * static_cast<double>(differ) / static_cast<double>(hyps.size()), other,
             corpus_bleu(hyps, s.references, tok).format());
}

// What a decoding-only process keeps its linear weights in: bfloat16 under bf16 products (half the
// bytes, and no float32 copy beside the bf16 one), else float32.
DType decoding_weights(Precision p) { return p == Precision::BFloat16 ? DType::BFloat16 : DType::Float32; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Flags translate_flags() {
  Flags f("translate",
          "Translates sentences (one a line) from stdin or --input with a trained model, one output line per input line: raw\n"
          "text in and detokenised text out for a run trained with --subwords, whitespace-tokenised text otherwise.\n"
          "Lines are translated as they arrive (a pipe's lines together as far as they have arrived), each output line\n"
          "written at once. A line that is not valid UTF-8 or is longer than --max-line-bytes stops it with an error\n"
          "naming the line, or with --skip-bad-lines gets an empty output line and a warning.\n"
          "--model is a run folder (its best checkpoint) or one of its .safetensors files.");
  f.add_string("model", "", "run folder or weights file");
  f.add_string("input", "", "input file (default: stdin)");
  add_decode_flags(f);
  add_max_line_bytes_flag(f);
  f.add_bool("skip-bad-lines",
             "an input line that is not valid UTF-8 or is longer than --max-line-bytes gets an empty output line and a warning naming "
             "it, and translation goes on (default: stop with the error)");
  f.add_bool("verbose", "report each sentence's source and output pieces, speed and KV-cache memory on stderr");
  return f;
}

// Everything about the command is checked before a model is loaded or a line is read.
void check_translate_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, !f.str("model").empty(), "translate: --model DIR is required");
  check_decode_flags(f);
  (void)max_line_bytes(f);
}

int cmd_translate(int argc, char** argv) {
  Flags f = translate_flags();
  if (!f.parse(argc, argv)) return 0;
  check_translate_flags(f);
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  const ResolvedPrecision p = apply_precision(f.str("precision"), "translate", stderr);  // stdout holds the translations alone
  Input input(f.str("input"), max_line_bytes(f));
  train::Translator t = train::Translator::load(f.str("model"), decoding_weights(p.precision));
  const train::DecodeOptions options = decode_options(f, t);
  // Line by line as the input arrives: each group of lines that have arrived (up to 16 batches,
  // which translate() sorts by length and decodes batch by batch) is translated and written, and
  // stdout flushed, before the next is read. A file arrives whole, so it goes in full groups.
  const size_t group = static_cast<size_t>(f.integer("batch-size")) * 16;
  train::DecodeStats stats;
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::exception_ptr bad_line;
  for (std::vector<InputLine> lines; !bad_line && !(lines = arrived_lines(*input.lines, group, f.on("skip-bad-lines"), bad_line)).empty();
       done += lines.size())
    translate_group(t, lines, done + 1, f, options, stats);
  if (bad_line) std::rethrow_exception(bad_line);
  GF_CHECK_AS(UsageError, done > 0 || !f.str("input").empty(),
              "translate: no input on stdin (it was empty): pipe sentences in, one a line, or name a file with --input FILE");
  const double dt = seconds_since(t0);
  if (f.on("verbose")) {
    fmt::print(stderr, "translated {} sentences in {:.2f}s ({:.1f} sentences/s), weights {}\n", done, dt,
               dt > 0 ? static_cast<double>(done) / dt : 0.0, t.weights_file);
    if (stats.self_bytes_per_token > 0) {
      const nn::TransformerLayerOptions& l = t.config.layer;
      fmt::print(stderr,
                 "KV cache: 2 (K and V) x {} layers x {} kv heads x {} head dim x {} bytes = {} bytes per token "
                 "(self-attention; {} heads share {} K/V heads); {}; peak {:.2f} MiB allocated for a batch\n",
                 t.config.layers, l.key_value_heads(), l.d_model / l.nhead, stats.self_bytes_per_token / (2 * t.config.layers * l.key_value_heads() * (l.d_model / l.nhead)), stats.self_bytes_per_token, l.nhead, l.key_value_heads(),
                 t.config.arch == "decoder-only" ? std::string("decoder-only: the prompt's source tokens are cached at the same cost")
                                                 : fmt::format("{} bytes per source token (cross-attention, projected once)", stats.cross_bytes_per_src_token),
                 static_cast<double>(stats.cache_bytes_peak) / (1 << 20));
    }
  }
  return 0;
}

Flags eval_flags() {
  Flags f("eval",
          "Scores a trained model on a test split of its own data (or --data/--split): loss, perplexity, BLEU and exact match.");
  f.add_string("model", "", "run folder or weights file");
  f.add_string("data", "", "data folder (default: the run's own data)");
  f.add_string("split", "", "split to score (default: the run's test split)");
  f.add_string("tokenize", "", "BLEU tokenizer: 13a (sacreBLEU's default, for detokenised text) or none (pre-tokenised text); default: 13a for a run with --subwords, none otherwise");
  f.add_string("output", "", "also write the translations to this file");
  f.add_string("compare-precision", "",
               "also decode the split with the products in this precision (fp32 or bf16) and report how many outputs differ from "
               "--precision's, and that decoding's BLEU");
  add_decode_flags(f);
  add_max_line_bytes_flag(f);
  return f;
}

void check_eval_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, !f.str("model").empty(), "eval: --model DIR is required");
  const std::string tok_flag = f.str("tokenize");
  GF_CHECK_AS(UsageError, tok_flag.empty() || tok_flag == "13a" || tok_flag == "none", "eval: --tokenize must be 13a or none, got '{}'", tok_flag);
  const std::string other = f.str("compare-precision");
  GF_CHECK_AS(UsageError, other.empty() || other == "fp32" || other == "bf16", "eval: --compare-precision must be fp32 or bf16, got '{}'", other);
  check_decode_flags(f);
  (void)max_line_bytes(f);
}

int cmd_eval(int argc, char** argv) {
  Flags f = eval_flags();
  if (!f.parse(argc, argv)) return 0;
  check_eval_flags(f);
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  const ResolvedPrecision p = apply_precision(f.str("precision"), "eval", stdout);
  const std::string tok_flag = f.str("tokenize");
  // --compare-precision decodes again in the other precision, which needs the float32 weights.
  train::Translator t = train::Translator::load(f.str("model"), f.str("compare-precision").empty() ? decoding_weights(p.precision) : DType::Float32);
  train::RunConfig c = t.config;
  if (!f.str("data").empty()) c.data = f.str("data");
  if (!f.str("split").empty()) c.test_split = f.str("split");
  train::RunData data = train::load_run_data(c, false, max_line_bytes(f), train::korean_run_data);
  GF_CHECK_AS(std::runtime_error, !data.test.empty(), "eval: no test split found for {}; name one with --split", c.data_description());
  const std::string tok = tok_flag.empty() ? t.bleu_tokenize() : tok_flag;
  train::DecodeOptions o = decode_options(f, t);
  const train::TestScore s = train::score_test_split(t, data.test, o, f.integer("batch-size"), tok, true);
  if (!f.str("output").empty()) {
    std::string text;
    for (const auto& h : s.hypotheses) text += h + "\n";
    write_file_atomic(f.str("output"), text);
  }
  const double n = static_cast<double>(s.hypotheses.size());
  fmt::print("model: {}\n", t.weights_file);
  fmt::print("test: {} ({} sentences)\n", data.test_name, s.hypotheses.size());
  fmt::print("loss {:.4f} per target token, perplexity {:.2f}\n", s.nll, std::exp(s.nll));
  fmt::print("{} ({}{})\n", s.bleu.format(true), o.beam == 1 ? "greedy" : fmt::format("beam {}, length penalty {}, {} stop", o.beam, o.length_penalty, f.str("beam-stop")),
             t.segmenters.tgt.subwords() ? ", detokenised subword output" : "");
  fmt::print("exact match {:.1f}% ({}/{}); decoded in {:.1f}s ({:.1f} sentences/s)\n", 100.0 * s.exact_share, s.exact, s.hypotheses.size(),
             s.decode_seconds, n / std::max(s.decode_seconds, 1e-9));
  if (!f.str("compare-precision").empty()) compare_precision(t, s, o, f.integer("batch-size"), tok, f.str("compare-precision"));
  return 0;
}

Flags bleu_flags() {
  Flags f("bleu", "Corpus BLEU of HYP against REF (one sentence a line), computed as sacreBLEU's default.");
  f.add_positional("HYP", "hypotheses file");
  f.add_positional("REF", "references file");
  f.add_string("tokenize", "13a", "13a (sacreBLEU's default) or none (whitespace only)");
  add_max_line_bytes_flag(f);
  return f;
}

void check_bleu_flags(const Flags& f) {
  const std::string tok = f.str("tokenize");
  GF_CHECK_AS(UsageError, tok == "13a" || tok == "none", "bleu: --tokenize must be 13a or none, got '{}'", tok);
  (void)max_line_bytes(f);
}

int cmd_bleu(int argc, char** argv) {
  Flags f = bleu_flags();
  if (!f.parse(argc, argv)) return 0;
  std::string tok = f.str("tokenize");
  check_bleu_flags(f);
  std::vector<std::string> hyps = train::read_text_lines(f.positional(0), "bleu", max_line_bytes(f));
  std::vector<std::string> refs = train::read_text_lines(f.positional(1), "bleu", max_line_bytes(f));
  GF_CHECK_AS(std::runtime_error, hyps.size() == refs.size(), "bleu: {} has {} lines but {} has {}", f.positional(0), hyps.size(),
              f.positional(1), refs.size());
  BleuResult r = corpus_bleu(hyps, refs, tok);
  fmt::print("{}\n{}\n", r.format(), r.signature);
  return 0;
}

}  // namespace gf::app

// gradflow translate / eval / bleu: using and scoring a trained translator.
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>

#include "app/commands.h"
#include "app/flags.h"
#include "app/recipe_flags.h"
#include "tensor/check.h"
#include "tensor/parallel.h"
#include "train/eval/bleu.h"
#include "train/loop/checkpoint.h"
#include "train/data/parallel_text.h"
#include "train/data/run_data.h"
#include "train/decode/translator.h"
#include "train/eval/score.h"
#include "tensor/io/atomic_file.h"

namespace gf::app {

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  if (path.empty() || path == "-") {
    std::vector<std::string> lines;
    for (std::string line; std::getline(std::cin, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
    }
    return lines;
  }
  return train::read_text_lines(path, "translate");
}

void add_decode_flags(Flags& f) {
  f.add_int("beam", 1, "beam size (1 = greedy)");
  f.add_double("length-penalty", 1.0, "beam search: a hypothesis scores log p / (tokens + 1)^this; 0 = raw log p, favouring short outputs; above 1 favours ever longer ones");
  f.add_string("beam-stop", "heuristic",
               "beam search: when a sentence stops. heuristic: also once K hypotheses are finished and no live one scores, at its present "
               "length, above the K-th best of them (Hugging Face's default); exact: only once no live one can still finish above the best "
               "(slower, may find a higher score)");
  f.add_int("batch-size", 64, "sentences decoded together");
  f.add_int("threads", 0, "threads (default: the hardware's)");
  add_precision_flag(f, "fp32", " (default fp32 whatever the run trained in: a bf16 run's weights are float32)");
}

train::DecodeOptions decode_options(const Flags& f, const train::Translator& t) {
  train::DecodeOptions o = t.default_decode_options();
  o.beam = f.integer("beam");
  o.length_penalty = f.real("length-penalty");
  const std::string stop = f.str("beam-stop");
  GF_CHECK_AS(UsageError, stop == "heuristic" || stop == "exact", "{}: --beam-stop must be heuristic or exact, got '{}'", f.command(), stop);
  o.beam_stop = stop == "exact" ? train::BeamStop::Exact : train::BeamStop::Heuristic;
  GF_CHECK_AS(UsageError, o.beam >= 1, "{}: --beam must be at least 1, got {}", f.command(), o.beam);
  GF_CHECK_AS(UsageError, f.integer("batch-size") >= 1, "{}: --batch-size must be at least 1, got {}", f.command(), f.integer("batch-size"));
  return o;
}

// The model reads at most max_len source tokens; translate() cut longer lines to their head.
void warn_long_lines(const train::Translator& t, const train::Translator::Pieces& pieces) {
  for (size_t i = 0; i < pieces.source_length.size(); ++i)
    if (static_cast<int64_t>(pieces.source_length[i]) > t.config.max_len)
      fmt::print(stderr, "translate: warning: input line {} has {} tokens; the model reads at most {} (--max-len of its run), so only its first {} are translated\n",
                 i + 1, pieces.source_length[i], t.config.max_len, t.config.max_len);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_translate(int argc, char** argv) {
  Flags f("translate",
          "Translates sentences (one a line) from stdin or --input with a trained model, one output line per input line: raw\n"
          "text in and detokenised text out for a run trained with --subwords, whitespace-tokenised text otherwise.\n"
          "--model is a run folder (its best checkpoint) or one of its .safetensors files.");
  f.add_string("model", "", "run folder or weights file");
  f.add_string("input", "", "input file (default: stdin)");
  add_decode_flags(f);
  f.add_bool("verbose", "report each sentence's source and output pieces, speed and KV-cache memory on stderr");
  if (!f.parse(argc, argv)) return 0;
  GF_CHECK_AS(UsageError, !f.str("model").empty(), "translate: --model DIR is required");
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  apply_precision(f.str("precision"), "translate");
  train::Translator t = train::Translator::load(f.str("model"));
  std::vector<std::string> lines = read_lines(f.str("input"));
  train::DecodeStats stats;
  auto t0 = std::chrono::steady_clock::now();
  train::Translator::Pieces pieces;
  std::vector<std::string> out = t.translate(lines, decode_options(f, t), f.integer("batch-size"), &stats, &pieces);
  double dt = seconds_since(t0);
  warn_long_lines(t, pieces);
  for (const auto& s : out) fmt::print("{}\n", s);
  if (f.on("verbose")) {
    for (size_t i = 0; i < lines.size(); ++i)
      fmt::print(stderr, "{}: source pieces: {}\n{}: output pieces: {}\n", i + 1, train::join_tokens(pieces.source[i]), i + 1,
                 train::join_tokens(pieces.output[i]));
    fmt::print(stderr, "translated {} sentences in {:.2f}s ({:.1f} sentences/s), weights {}\n", lines.size(), dt,
               dt > 0 ? static_cast<double>(lines.size()) / dt : 0.0, t.weights_file);
    if (stats.self_bytes_per_token > 0) {
      const nn::TransformerLayerOptions& l = t.config.layer;
      fmt::print(stderr,
                 "KV cache: 2 (K and V) x {} layers x {} kv heads x {} head dim x {} bytes = {} bytes per token "
                 "(self-attention; {} heads share {} K/V heads); {}; peak {:.2f} MiB allocated for a batch\n",
                 t.config.layers, l.key_value_heads(), l.d_model / l.nhead, 4, stats.self_bytes_per_token, l.nhead, l.key_value_heads(),
                 t.config.arch == "decoder-only" ? std::string("decoder-only: the prompt's source tokens are cached at the same cost")
                                                 : fmt::format("{} bytes per source token (cross-attention, projected once)", stats.cross_bytes_per_src_token),
                 static_cast<double>(stats.cache_bytes_peak) / (1 << 20));
    }
  }
  return 0;
}

int cmd_eval(int argc, char** argv) {
  Flags f("eval",
          "Scores a trained model on a test split of its own data (or --data/--split): loss, perplexity, BLEU and exact match.");
  f.add_string("model", "", "run folder or weights file");
  f.add_string("data", "", "data folder (default: the run's own data)");
  f.add_string("split", "", "split to score (default: the run's test split)");
  f.add_string("tokenize", "", "BLEU tokenizer: 13a (sacreBLEU's default, for detokenised text) or none (pre-tokenised text); default: 13a for a run with --subwords, none otherwise");
  f.add_string("output", "", "also write the translations to this file");
  add_decode_flags(f);
  if (!f.parse(argc, argv)) return 0;
  GF_CHECK_AS(UsageError, !f.str("model").empty(), "eval: --model DIR is required");
  if (f.integer("threads") > 0) set_num_threads(static_cast<int>(f.integer("threads")));
  apply_precision(f.str("precision"), "eval");
  const std::string tok_flag = f.str("tokenize");
  GF_CHECK_AS(UsageError, tok_flag.empty() || tok_flag == "13a" || tok_flag == "none", "eval: --tokenize must be 13a or none, got '{}'", tok_flag);
  train::Translator t = train::Translator::load(f.str("model"));
  train::RunConfig c = t.config;
  if (!f.str("data").empty()) c.data = f.str("data");
  if (!f.str("split").empty()) c.test_split = f.str("split");
  train::RunData data = train::load_run_data(c, false);
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
  return 0;
}

int cmd_bleu(int argc, char** argv) {
  Flags f("bleu", "Corpus BLEU of HYP against REF (one sentence a line), computed as sacreBLEU's default.");
  f.add_positional("HYP", "hypotheses file");
  f.add_positional("REF", "references file");
  f.add_string("tokenize", "13a", "13a (sacreBLEU's default) or none (whitespace only)");
  if (!f.parse(argc, argv)) return 0;
  std::string tok = f.str("tokenize");
  GF_CHECK_AS(UsageError, tok == "13a" || tok == "none", "bleu: --tokenize must be 13a or none, got '{}'", tok);
  std::vector<std::string> hyps = train::read_text_lines(f.positional(0), "bleu");
  std::vector<std::string> refs = train::read_text_lines(f.positional(1), "bleu");
  GF_CHECK_AS(std::runtime_error, hyps.size() == refs.size(), "bleu: {} has {} lines but {} has {}", f.positional(0), hyps.size(),
              f.positional(1), refs.size());
  BleuResult r = corpus_bleu(hyps, refs, tok);
  fmt::print("{}\n{}\n", r.format(), r.signature);
  return 0;
}

}  // namespace gf::app

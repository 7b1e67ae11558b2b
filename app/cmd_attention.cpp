// gradflow attention: an SVG heatmap of the cross-attention weights of one translation, for every
// decoder layer and head, and their average.
#include <fmt/core.h>


#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "autograd/grad_mode.h"
#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "train/plot/svg_plot.h"
#include "train/eval/translator.h"
#include "train/data/utf8.h"
#include "train/inspect/attribution.h"

namespace gf::app {
namespace {

// Gradient-times-input of each output token (teacher-forced on the translation, <eos> last) to the
// source tokens, |g_ts| with each row divided by its sum so that it reads on the attention's scale.
Heatmap gradient_panel(const nn::Seq2SeqTransformer& model, const std::vector<int64_t>& src_ids, std::vector<int64_t> out_ids,
                       const std::vector<std::string>& rows, const std::vector<std::string>& cols) {
  out_ids.push_back(train::Vocab::kEos);
  const train::inspect::Map g = train::inspect::abs_map(train::inspect::attribution_maps(model, src_ids, out_ids).grad_dot);  // (T, S)
  Heatmap m{"gradient x input |dlog p/dx . x| (rows sum to 1)", {}, rows, cols};
  for (const auto& row : g) {
    double sum = 0;
    for (double v : row) sum += v;
    std::vector<float> w;
    for (double v : row) w.push_back(sum > 0 ? static_cast<float>(v / sum) : 0.f);
    m.weights.push_back(std::move(w));
  }
  return m;
}

}  // namespace

Flags attention_flags() {
  Flags f("attention",
          "Translates one sentence and draws the cross-attention weights (target rows x source columns) of every decoder\n"
          "layer and head, and their average, as an SVG to open in a browser. With --grad, also the gradient-times-input\n"
          "attribution of each output token to the source tokens (train/inspect/attribution.h), for comparison.");
  f.add_string("model", "", "run folder or weights file");
  f.add_string("src", "", "the source sentence (whitespace-tokenised, or raw text for a run with --subwords; the axes show its pieces)");
  f.add_string("out", "attention.svg", "SVG file to write");
  f.add_bool("grad", "add a panel: |d log p(y_t) / d x_s . x_s| per output token t and source token s, each row divided by its sum");
  return f;
}

void check_attention_flags(const Flags& f) {
  GF_CHECK_AS(UsageError, !f.str("model").empty(), "attention: --model DIR is required");
  if (size_t bad = train::utf8::find_invalid(f.str("src")); bad != std::string::npos)
    GF_FAIL_AS(UsageError, "attention: --src is not valid UTF-8 (byte {})", bad);
}

int cmd_attention(int argc, char** argv) {
  Flags f = attention_flags();
  if (!f.parse(argc, argv)) return 0;
  check_attention_flags(f);
  train::Translator t = train::Translator::load(f.str("model"));
  std::vector<std::string> src_tokens = t.segmenters.src.split(f.str("src"));  // words, or the run's subword pieces
  GF_CHECK_AS(UsageError, !src_tokens.empty(), "attention: --src \"...\" must hold at least one token");
  GF_CHECK_AS(UsageError, static_cast<int64_t>(src_tokens.size()) <= t.config.max_len, "attention: --src has {} tokens; the model takes at most {}",
              src_tokens.size(), t.config.max_len);

  NoGradGuard ng;
  std::vector<int64_t> src_ids = t.src_vocab.encode(src_tokens);
  Tensor src = Tensor::from_vector(src_ids, {1, static_cast<int64_t>(src_ids.size())});  // (1, S)
  const nn::Seq2SeqTransformer& model = t.seq2seq();
  std::vector<int64_t> out_ids = train::translate_batch(model, src, t.default_decode_options()).at(0);
  // Teacher-force the model's own output to read the weights behind each predicted token.
  std::vector<int64_t> tgt_in{train::Vocab::kBos};
  tgt_in.insert(tgt_in.end(), out_ids.begin(), out_ids.end());
  Tensor tgt = Tensor::from_vector(tgt_in, {1, static_cast<int64_t>(tgt_in.size())});  // (1, T)
  nn::DecoderOutput d = model.forward_with_attention(src, tgt);

  std::vector<std::string> rows;  // the token predicted at each position
  for (int64_t id : out_ids) rows.push_back(t.tgt_vocab.token(id));
  rows.push_back("<eos>");
  std::vector<std::string> cols;
  for (size_t i = 0; i < src_tokens.size(); ++i)
    cols.push_back(src_ids[i] == train::Vocab::kUnk ? src_tokens[i] + " (unk)" : src_tokens[i]);

  const int64_t H = d.cross_weights.at(0).size(1), T = tgt.size(1), S = src.size(1);
  std::vector<Heatmap> maps;
  std::vector<std::vector<float>> avg(static_cast<size_t>(T), std::vector<float>(static_cast<size_t>(S), 0.f));
  for (size_t l = 0; l < d.cross_weights.size(); ++l) {
    Tensor w = d.cross_weights[l].data().to(DType::Float32).contiguous();  // (1, H, T, S)
    for (int64_t h = 0; h < H; ++h) {
      Heatmap m;
      m.title = fmt::format("layer {} head {}", l, h);
      m.row_labels = rows;
      m.col_labels = cols;
      m.weights.assign(static_cast<size_t>(T), std::vector<float>(static_cast<size_t>(S)));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          float v = w.data<float>()[(h * T + i) * S + j];
          m.weights[i][j] = v;
          avg[i][j] += v / static_cast<float>(H * static_cast<int64_t>(d.cross_weights.size()));
        }
      maps.push_back(std::move(m));
    }
  }
  maps.push_back({"average of all layers and heads", avg, rows, cols});
  if (f.on("grad")) maps.push_back(gradient_panel(model, src_ids, out_ids, rows, cols));
  write_file_atomic(f.str("out"), attention_grid_svg(maps, static_cast<int>(H)));
  const std::string translation = t.segmenters.tgt.join(std::vector<std::string>(rows.begin(), rows.end() - 1));  // without <eos>
  fmt::print("{}\nwrote {} ({} layers x {} heads + average{})\n", translation, f.str("out"), d.cross_weights.size(), H,
             f.on("grad") ? " + gradient x input" : "");
  return 0;
}

}  // namespace gf::app

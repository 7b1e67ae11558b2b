#include "app/commands.h"

#include "app/command_flags.h"
#include "app/parity.h"

namespace gf::app {

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"train", "train the translator (built-in English->Korean corpus, or --data)", cmd_train},
      {"translate", "translate sentences with a trained model (greedy or beam search, KV cache)", cmd_translate},
      {"eval", "score a trained model on a test split: loss, perplexity, BLEU, exact match", cmd_eval},
      {"average", "the mean of several checkpoints' weights (a run's last epochs)", cmd_average},
      {"bleu", "corpus BLEU of a hypothesis file against a reference file (sacreBLEU's default)", cmd_bleu},
      {"attention", "draw a translation's cross-attention weights (every layer and head) as SVG", cmd_attention},
      {"report", "one self-contained HTML page for a run: settings, curves, gradient statistics, attention explorer", cmd_report},
      {"bench", "training and decoding throughput, measured as the PyTorch reference measures itself (JSON)", cmd_bench},
      {"parity", "compare modules with PyTorch reference cases, outputs and gradients", cmd_parity},
      {"lab", "the gradient-flow lab: experiments on gradients in attention, each checked against its paper", cmd_lab},
      {"corpus", "write the built-in corpus to files, tokenised or as raw text (for --subwords)", cmd_corpus},
      {"demo", "train a tiny network for a few steps and print its gradients", cmd_demo},
      {"info", "show the version, the OpenBLAS kernel in use and the thread count", cmd_info},
  };
  return list;
}

const std::vector<CommandFlags>& command_flags() {
  static const std::vector<CommandFlags> list = {
      {"train", train_flags, check_train_flags},         {"translate", translate_flags, check_translate_flags},
      {"eval", eval_flags, check_eval_flags},             {"average", average_flags, check_average_flags},
      {"bleu", bleu_flags, check_bleu_flags},             {"attention", attention_flags, check_attention_flags},
      {"bench", bench_flags, check_bench_flags},          {"parity", parity_flags, check_parity_flags},
      {"corpus", corpus_flags, check_corpus_flags},       {"demo", demo_flags, check_demo_flags},
      {"info", info_flags, check_info_flags},
  };
  return list;
}

}  // namespace gf::app

#include "app/commands.h"

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

}  // namespace gf::app

// The tables and figures of lab `padding` (lab/labs/padding.cpp), from its runs.
#include <fmt/format.h>

#include <algorithm>

#include "lab/padding.h"
#include "lab/report.h"

namespace gf::lab {

void to_json(nlohmann::json& j, const PaddingRun& m) {
  if (m.part == PaddingRun::Share)
    j = {{"labels", m.share.labels}, {"pad_labels", m.share.pad_labels}, {"loss_share", m.share.loss_share}, {"grad_share", m.share.grad_share},
         {"ignored", m.share.ignored_grad}, {"batches", m.batches}};
  else if (m.part == PaddingRun::Length)
    j = {{"log10_logits_difference", m.log_diff}};
  else
    j = {{"encoder_out", m.cmp.memory.rel}, {"logits", m.cmp.logits.rel}, {"attention", m.cmp.weights.rel}, {"gradients", m.cmp.grads.rel},
         {"pad_key_weight", m.cmp.pad_weight}, {"source_pad", m.pg.src_pad}, {"source_real", m.pg.src_real}, {"target_pad", m.pg.tgt_pad},
         {"target_real", m.pg.tgt_real}};
}

Comparison worst_comparison(const Grid<PaddingRun>& g, const std::string& arm) {
  Comparison w;
  for (const PaddingRun* m : g.of(arm)) {
    const Comparison& c = m->cmp;
    w.memory = worst(w.memory, c.memory), w.logits = worst(w.logits, c.logits), w.weights = worst(w.weights, c.weights);
    w.grads = worst(w.grads, c.grads), w.pad_weight = std::max(w.pad_weight, c.pad_weight);
  }
  return w;
}
PadGradient worst_gradient(const Grid<PaddingRun>& g, const std::string& arm) {
  PadGradient pg;
  for (const PaddingRun* m : g.of(arm)) {
    const PadGradient& x = m->pg;
    pg.src_pad = std::max(pg.src_pad, x.src_pad), pg.src_real = std::max(pg.src_real, x.src_real);
    pg.tgt_pad = std::max(pg.tgt_pad, x.tgt_pad), pg.tgt_real = std::max(pg.tgt_real, x.tgt_real);
  }
  return pg;
}

namespace {

void describe_masks(const Grid<PaddingRun>& g, Report& r) {
  r.section("1. one sentence alone and as row 0 of a batch with the 7 longest (float64): largest |difference| / largest |value|");
  Table t1("alone_vs_batch", {"seed", "masks", "src/tgt len", "batch src/tgt len", "encoder out", "logits", "attention", "gradients",
                              "weight on PAD keys"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const auto& ms : kPaddingMasks) {
      const PaddingRun& m = g.at(ms.name, 0, i);
      t1.row({static_cast<int64_t>(m.seed), ms.name, fmt::format("{}/{}", m.src_len, m.tgt_len), fmt::format("{}/{}", m.batch_src_len, m.batch_tgt_len),
              m.cmp.memory.rel, m.cmp.logits.rel, m.cmp.weights.rel, m.cmp.grads.rel, m.cmp.pad_weight});
    }
  r.print(t1);
  r.say("src/tgt len: source and decoder-input lengths; attention: every attention map (encoder self, decoder self and cross, every");
  r.say("layer), row 0's real queries and keys; gradients: every parameter's gradient of that sentence's loss (other rows' labels");
  r.say("ignored), relative to the largest entry; weight on PAD keys: the largest attention weight a real query of row 0 gives a PAD key.");

  r.section("2. gradient of a batch's loss (8 random pairs) at PAD positions of the encoder and decoder input (largest |entry|, worst seed)");
  Table t2("pad_gradient", {"masks", "source PAD", "source real", "target PAD", "target real"});
  for (const auto& ms : kPaddingMasks) {
    const PadGradient pg = worst_gradient(g, ms.name);
    t2.row({ms.name, pg.src_pad, pg.src_real, pg.tgt_pad, pg.tgt_real});
  }
  r.print(t2);
  r.say("Target PAD inputs come after the sentence: the causal mask already hides them from every real position, and their");
  r.say("own labels are PAD (ignored), so they get no gradient even without the target padding mask.");

  // Short captions: the colour bar's caption would run over long tick labels such as 1.52e-08.
  ValueMap diffs{"alone vs in a batch: relative difference, log (grey: 0)", "what is compared", "masks", {},
                 {"encoder out", "logits", "attention", "gradients"}, {}, true, ""};
  for (const auto& ms : kPaddingMasks) {
    const Comparison c = worst_comparison(g, ms.name);
    diffs.row_labels.push_back(ms.name);
    diffs.values.push_back({c.memory.rel, c.logits.rel, c.weights.rel, c.grads.rel});
  }
  r.add_panel(diffs);
}

}  // namespace

void describe_padding(const std::vector<int64_t>& lengths, const Grid<PaddingRun>& g, Report& r) {
  describe_masks(g, r);
  r.section("3. ignore_index off: the share PAD labels carry, random against length-bucketed batches (float32)");
  Table t3("pad_share", {"seed", "model", "batching", "batches", "PAD labels", "PAD share of loss", "PAD share of gradient", "PAD part, ignore_index on"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* x : kPadShareArms) {
      const PaddingRun& m = g.at(x, 0, i);
      const std::string name = x;
      t3.row({static_cast<int64_t>(m.seed), name.substr(0, name.find(' ')), name.substr(name.find(' ') + 1), m.batches,
              static_cast<double>(m.share.pad_labels) / m.share.labels, m.share.loss_share, m.share.grad_share, m.share.ignored_grad});
    }
  r.print(t3);
  r.say("PAD labels: their share of the label positions; share of the gradient: |g_PAD| / (|g_PAD| + |g_real|), g_PAD the gradient");
  r.say("of the PAD labels' loss terms, g_real of the real labels' terms, summed over batches; trained: after the steps above with");
  r.say("ignore_index = PAD (as the trainer does), so the model has learnt never to predict PAD. Last column: with ignore_index = PAD,");
  r.say("how far loss and gradient are from those of the real labels alone.");
  const PaddingRun& first = g.at(kPadShareArms[0], 0, 0);
  ValueMap shares{fmt::format("PAD labels without ignore_index (seed {})", first.seed), "share", "model, batching", {}, {"of labels", "of loss", "of gradient"},
                  {}, false, "share"};
  for (const char* x : kPadShareArms) {
    const PadShare& ps = g.at(x, 0, 0).share;
    std::string label = x;
    shares.row_labels.push_back(label.replace(label.find(' '), 1, ", "));
    shares.values.push_back({static_cast<double>(ps.pad_labels) / ps.labels, ps.loss_share, ps.grad_share});
  }
  r.add_panel(shares);
  for (int k : {0, 3})
    r.add_panel(ValueMap{fmt::format("{}: |d loss / d encoder input|, log (grey: 0)", k ? "no masks" : "masks"), "source position",
                         "batch row (8 random pairs)", {}, {}, g.at(kPaddingMasks[k].name, 0, 0).pg.src_map, true, ""});
  r.section(fmt::format("4. the padded length: each seed's sentence of part 1 alone and padded with PAD to {} source tokens, {} (float64)",
                        fmt::join(lengths, ", "), r.ablate() ? "both padding masks on (ablation)" : "no padding masks"));
  r.say(fmt::format("the statistic: log10 of the logits' largest |difference| / largest |value|, padded against alone (floored at {:g}: none).",
                    kDiffFloor));
}

}  // namespace gf::lab

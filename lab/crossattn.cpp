// Lab `crossattn`: cross-attention is the encoder's only gradient path.
//
// The loss is computed from the decoder's output; the encoder's parameters (and the source
// embedding) reach it only through the memory, which every decoder layer reads in its
// cross-attention (Vaswani et al. 2017, Section 3.2.3: "the memory keys and values come from the
// output of the encoder"). So d loss / d memory is the sum of what each decoder layer's
// cross-attention sends back (an exact check), and everything the encoder learns it learns from
// that sum. Cut it -- the decoder reads memory.detach(), the same forward -- and the encoder gets
// no gradient at all.
//
// Here, per seed (the seed draws the synthetic task's data, the weights and the batch order): the
// gradient reaching each encoder layer against each decoder layer's, at initialisation and during
// training; how far training moves the encoder's weights; and what the encoder learnt: the trained
// model's held-out accuracy against the same model with its encoder (and source embedding) put
// back to their initial weights.
// With --data DIR (lab/real_data.h) the task is that real translation task (the same data for every
// seed), and BLEU on its validation split is reported beside the accuracies.
// The control trains with the memory detached (Seq2SeqTransformer::encoder_gradient = false).
#include "lab/crossattn.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "autograd/ops/arith.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/real_data.h"
#include "lab/report.h"
#include "nn/masks.h"
#include "tensor/check.h"
#include "train/data/vocab.h"

namespace gf::lab {

MemoryPaths memory_gradient_paths(nn::Seq2SeqTransformer& model, const train::BatchTensors& t) {
  const auto& m = model.masks;
  const Tensor src_pad = m.source_padding ? nn::make_pad_mask(t.src, train::Vocab::kPad) : Tensor();     // (B, S)
  const Tensor tgt_pad = m.target_padding ? nn::make_pad_mask(t.tgt_in, train::Vocab::kPad) : Tensor();  // (B, T)
  const Tensor causal = m.causal ? nn::make_causal_mask(t.tgt_in.size(1)) : Tensor();                   // (T, T)
  Variable memory = model.encode(t.src, src_pad);  // (B, S, D)
  memory.retain_grad();
  const auto& decoder = *model.transformer->decoder;
  Variable x = model.embed_tgt(t.tgt_in);  // (B, T, D)
  std::vector<Variable> copies;            // one (B, S, D) per decoder layer: memory * 1, its own node
  for (const auto& layer : *decoder.layers) {
    copies.push_back(memory * 1.0);
    copies.back().retain_grad();
    x = layer->forward(x, copies.back(), causal, tgt_pad, src_pad).output;  // (B, T, D)
  }
  if (decoder.norm) x = decoder.norm->forward(x);
  model.zero_grad();
  Variable loss = train::projected_loss(x, *model.out, t.labels, 0.0);
  loss.backward();
  MemoryPaths r;
  r.loss = loss.item();
  const Tensor total = memory.grad().to(DType::Float64).contiguous();  // (B, S, D)
  Tensor sum = Tensor::zeros(total.shape(), DType::Float64);
  for (const auto& c : copies) {
    const Tensor g = c.grad().to(DType::Float64).contiguous();  // (B, S, D)
    r.per_layer.push_back(l2_norm(g));
    for (int64_t i = 0; i < g.numel(); ++i) sum.data<double>()[i] += g.data<double>()[i];
  }
  r.total = l2_norm(total);
  double diff = 0;
  for (int64_t i = 0; i < total.numel(); ++i) diff += std::pow(total.data<double>()[i] - sum.data<double>()[i], 2);
  r.sum_difference = std::sqrt(diff) / r.total;
  model.zero_grad();
  return r;
}

bool is_encoder_parameter(const std::string& name) {
  return name.rfind("transformer.encoder.", 0) == 0 || name.rfind("src_emb.", 0) == 0;
}

LayerGradNorms layer_grad_norms(const nn::Seq2SeqTransformer& model) {
  LayerGradNorms n;
  const int64_t L = model.options().num_layers;
  std::vector<double> enc(static_cast<size_t>(L), 0.0), dec(static_cast<size_t>(L), 0.0);
  double emb = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const double g = p.grad().defined() ? l2_norm(p.grad()) : 0.0;
    for (int side = 0; side < 2; ++side) {
      const std::string prefix = side ? "transformer.decoder.layers." : "transformer.encoder.layers.";
      if (name.rfind(prefix, 0) != 0) continue;
      const size_t l = std::stoul(name.substr(prefix.size()));
      (side ? dec : enc)[l] += g * g;
    }
    if (name == "src_emb.weight") emb = g * g;
  }
  for (double& v : enc) n.encoder.push_back(std::sqrt(v));
  for (double& v : dec) n.decoder.push_back(std::sqrt(v));
  n.source_embedding = std::sqrt(emb);
  return n;
}

namespace {

constexpr const char* kEncoderColor = "#2ca02c";
constexpr const char* kDecoderColor = "#1f77b4";

struct Settings {
  std::string task;
  int64_t symbols, min_len, max_len, n_train, n_eval, d_model, heads, layers, steps, max_tokens, probe_every;
  double lr;
  const RealData* real = nullptr;  // --data: the real task in place of the synthetic one (lab/real_data.h)
};

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x / static_cast<double>(v.size());
  return s;
}

// Relative distance |theta - theta0| / |theta0| over the encoder's parameters, or over all the others
// (the target embedding, the decoder and the output layer).
double moved(const nn::Seq2SeqTransformer& model, const std::map<std::string, Tensor>& start, bool encoder) {
  double d = 0, base = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    if (is_encoder_parameter(name) != encoder) continue;
    const Tensor a = p.data().to(DType::Float64).contiguous(), b = start.at(name).to(DType::Float64).contiguous();
    for (int64_t i = 0; i < a.numel(); ++i) d += std::pow(a.data<double>()[i] - b.data<double>()[i], 2), base += std::pow(b.data<double>()[i], 2);
  }
  return std::sqrt(d / base);
}

struct Run {
  MemoryPaths paths;                  // at initialisation, float64, encoder_gradient on
  double detached_encoder_grad = 0;   // largest encoder parameter gradient with encoder_gradient off, float64
  LayerGradNorms init;                // at initialisation, as the run trains (the control detached)
  std::vector<LayerGradNorms> probes; // during training, every probe_every steps
  std::vector<double> probe_steps;
  FitResult fit;
  double moved_encoder = 0, moved_decoder = 0;
  TeacherForced tf, tf_reset;
  Accuracy fr, fr_reset;
  double bleu = NAN, bleu_reset = NAN;  // --data: greedy BLEU on the first --eval validation pairs, trained and encoder put back
};

std::unique_ptr<nn::Seq2SeqTransformer> float64_copy(const nn::Seq2SeqTransformer& m) {
  auto c = std::make_unique<nn::Seq2SeqTransformer>(m.options(), 1);
  c->to(DType::Float64);
  c->load_state_dict(m.state_dict());
  return c;
}

Run run_seed(const Settings& s, const IdData& data, bool control, uint64_t seed) {
  Run r;
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false), seed);
  const train::BatchTensors first = train::to_tensors(batches(data.train, s.max_tokens, seed).front());
  {  // The exact checks, on a float64 copy at initialisation: the same in the lab and its control.
    auto f64 = float64_copy(model);
    r.paths = memory_gradient_paths(*f64, first);
    f64->encoder_gradient = false;
    f64->zero_grad();
    train::batch_loss(*f64, first, 0.0).backward();
    for (const auto& [name, p] : f64->named_parameters())
      if (is_encoder_parameter(name) && p.grad().defined()) r.detached_encoder_grad = std::max(r.detached_encoder_grad, l2_norm(p.grad()));
  }
  model.encoder_gradient = !control;
  model.zero_grad();
  train::batch_loss(model, first, 0.0).backward();
  r.init = layer_grad_norms(model);
  model.zero_grad();
  std::map<std::string, Tensor> start;
  for (const auto& [name, t] : model.state_dict()) start[name] = t.clone();
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = s.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = seed;
  r.fit = fit(model, data.train, fo, [&](int64_t step, double) {
    if (step % s.probe_every != 0 && step != 1) return;
    r.probe_steps.push_back(static_cast<double>(step));
    r.probes.push_back(layer_grad_norms(model));  // after clipping: one scale for every layer, so their ratios stand
  });
  model.eval();
  r.moved_encoder = moved(model, start, true);
  r.moved_decoder = moved(model, start, false);
  r.tf = teacher_forced(model, data.test);
  r.fr = free_running_accuracy(model, data.test);
  const size_t n_bleu = static_cast<size_t>(s.n_eval);
  if (s.real) r.bleu = greedy_bleu(model, *s.real, s.real->ids.valid, s.real->valid_refs, n_bleu).score;
  // The trained decoder with the encoder it started from.
  std::map<std::string, Tensor> reset;
  for (const auto& [name, t] : start)
    if (is_encoder_parameter(name)) reset[name] = t;
  model.load_state_dict(reset, /*strict=*/false);
  r.tf_reset = teacher_forced(model, data.test);
  r.fr_reset = free_running_accuracy(model, data.test);
  if (s.real) r.bleu_reset = greedy_bleu(model, *s.real, s.real->ids.valid, s.real->valid_refs, n_bleu).score;
  return r;
}

// Mean over a run's training probes of (mean encoder layer norm) / (mean decoder layer norm).
double training_share(const Run& r) {
  double s = 0;
  for (const auto& p : r.probes) s += mean_of(p.encoder) / mean_of(p.decoder) / static_cast<double>(r.probes.size());
  return s;
}

std::string with_interval(const std::vector<double>& v, const char* format = "{:.3f}") {
  if (v.size() < 2) return fmt::format(fmt::runtime(format), v.empty() ? NAN : v[0]);
  const Interval i = t_interval(v);
  return fmt::format(fmt::runtime(std::string(format) + " [" + format + ", " + format + "]"), i.mean, i.lo, i.hi);
}

std::vector<double> column(const std::vector<Run>& runs, double (*f)(const Run&)) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(f(r));
  return v;
}

void report(Report& r, const Settings& s, const std::vector<Run>& runs) {
  r.section("the gradient reaching each layer (Frobenius over its parameters; mean [t 95% interval] over seeds)");
  Table t("layers", {"stack", "layer", "at initialisation", "mean over training"});
  for (int side = 0; side < 2; ++side)
    for (int64_t l = 0; l < s.layers; ++l) {
      std::vector<double> init, during;
      for (const auto& x : runs) {
        init.push_back((side ? x.init.decoder : x.init.encoder)[l]);
        double m = 0;
        for (const auto& p : x.probes) m += (side ? p.decoder : p.encoder)[l] / static_cast<double>(x.probes.size());
        during.push_back(m);
      }
      t.row({side ? "decoder" : "encoder", l + 1, with_interval(init, "{:.3g}"), with_interval(during, "{:.3g}")});
    }
  r.print(t);
  r.say("Training values are read after the gradient-norm clip (one factor for every layer, so ratios between layers stand).");

  r.section("d loss / d memory by decoder layer (the cross-attention paths), at initialisation, float64");
  std::vector<std::string> cols{"seed", "|d loss / d memory|"};
  for (int64_t l = 0; l < s.layers; ++l) cols.push_back(fmt::format("through decoder layer {}", l + 1));
  cols.push_back("|total - sum of paths| / |total|");
  Table p("paths", cols);
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<Cell> row{static_cast<int64_t>(r.seed(static_cast<int>(i))), runs[i].paths.total};
    for (double v : runs[i].paths.per_layer) row.push_back(v);
    row.push_back(runs[i].paths.sum_difference);
    p.row(row);
  }
  r.print(p);

  r.section("what training did to the encoder (mean [t 95% interval] over seeds)");
  Table w("encoder", {"quantity", "value"});
  w.row({"encoder / decoder gradient, mean over training", with_interval(column(runs, training_share))});
  w.row({"encoder weights moved |theta - theta0| / |theta0|", with_interval(column(runs, [](const Run& x) { return x.moved_encoder; }))});
  w.row({"decoder weights moved", with_interval(column(runs, [](const Run& x) { return x.moved_decoder; }))});
  w.row({"held-out teacher-forced token accuracy", with_interval(column(runs, [](const Run& x) { return x.tf.accuracy; }))});
  w.row({"... with the encoder put back to its initial weights", with_interval(column(runs, [](const Run& x) { return x.tf_reset.accuracy; }))});
  w.row({"held-out free-running token accuracy", with_interval(column(runs, [](const Run& x) { return x.fr.tokens; }))});
  w.row({"... with the encoder put back", with_interval(column(runs, [](const Run& x) { return x.fr_reset.tokens; }))});
  w.row({"held-out free-running exact match", with_interval(column(runs, [](const Run& x) { return x.fr.exact; }))});
  w.row({"... with the encoder put back", with_interval(column(runs, [](const Run& x) { return x.fr_reset.exact; }))});
  if (s.real) {
    const std::string which = fmt::format("greedy BLEU, first {} validation pairs", std::min<size_t>(static_cast<size_t>(s.n_eval), s.real->ids.valid.size()));
    w.row({which, with_interval(column(runs, [](const Run& x) { return x.bleu; }), "{:.2f}")});
    w.row({"... with the encoder put back", with_interval(column(runs, [](const Run& x) { return x.bleu_reset; }), "{:.2f}")});
  }
  r.print(w);
  if (s.real)
    r.say("Token accuracy is position by position against the reference, a strict measure for real sentences; BLEU (sacreBLEU 13a) is reported, "
          "not claimed.");
  else
    r.say(fmt::format("A model that ignores the source can guess a symbol right about 1 time in {}.", s.symbols));
}

void add_figure(Report& r, const Settings& s, const std::vector<Run>& runs) {
  std::vector<double> x;
  for (int64_t l = 1; l <= s.layers; ++l) x.push_back(static_cast<double>(l));
  auto per_layer = [&](bool decoder, bool training) {
    std::vector<std::vector<double>> rows;
    for (const auto& run : runs) {
      std::vector<double> v(static_cast<size_t>(s.layers), 0.0);
      if (!training) v = decoder ? run.init.decoder : run.init.encoder;
      else
        for (const auto& p : run.probes)
          for (int64_t l = 0; l < s.layers; ++l) v[l] += (decoder ? p.decoder : p.encoder)[l] / static_cast<double>(run.probes.size());
      rows.push_back(v);
    }
    return spread_per_column(rows);
  };
  for (int training = 0; training < 2; ++training)
    r.add_panel(Chart{training ? "gradient per layer, mean over training (band: seeds)" : "gradient per layer at initialisation (band: seeds)",
                      "layer", "|grad|", false, true,
                      {band_series("encoder", x, per_layer(false, training), kEncoderColor), band_series("decoder", x, per_layer(true, training), kDecoderColor)},
                      x, Chart::Corner::BottomLeft});
  // The encoder/decoder ratio during training, per probe, band over seeds.
  std::vector<std::vector<double>> ratio;
  for (const auto& run : runs) {
    ratio.push_back({});
    for (const auto& p : run.probes) ratio.back().push_back(mean_of(p.encoder) / mean_of(p.decoder));
  }
  std::vector<double> ticks;
  for (int64_t k = 0; k <= s.steps; k += std::max<int64_t>(1, s.steps / 4)) ticks.push_back(static_cast<double>(k));
  r.add_panel(Chart{"encoder / decoder gradient during training (band: seeds)", "step", "ratio of mean layer norms", false, true,
                    {band_series("encoder / decoder", runs[0].probe_steps, spread_per_column(ratio), "#9467bd")}, ticks, Chart::Corner::BottomRight});
  std::vector<double> seeds;
  for (size_t i = 0; i < runs.size(); ++i) seeds.push_back(static_cast<double>(r.seed(static_cast<int>(i))));
  r.add_panel(Chart{"held-out teacher-forced accuracy per seed", "seed", "token accuracy", false, false,
                    {ChartSeries{"trained", seeds, column(runs, [](const Run& x) { return x.tf.accuracy; }), {}, {}, false, kDecoderColor},
                     ChartSeries{"encoder put back to its initial weights", seeds, column(runs, [](const Run& x) { return x.tf_reset.accuracy; }), {}, {}, true,
                                 kEncoderColor}},
                    seeds, Chart::Corner::BottomRight});
}

void check_claims(Report& r, const std::vector<Run>& runs) {
  const std::vector<double> share = column(runs, training_share);
  std::vector<double> drop, acc;
  double sum_worst = 0, detached = 0;
  for (const auto& x : runs) {
    drop.push_back(x.tf.accuracy - x.tf_reset.accuracy);
    acc.push_back(x.fr.tokens);
    sum_worst = std::max(sum_worst, x.paths.sum_difference);
    detached = std::max(detached, x.detached_encoder_grad);
  }
  r.paper("encoder_gradient_share", share, fmt::format("mean encoder / decoder layer gradient over training, per seed: {:.3f}", fmt::join(share, ", ")));
  r.paper("encoder_learns", drop, fmt::format("teacher-forced accuracy, trained minus encoder put back, per seed: {:+.3f}", fmt::join(drop, ", ")));
  r.paper("translates", acc, fmt::format("held-out free-running token accuracy per seed: {:.3f}", fmt::join(acc, ", ")));
  r.check("memory_paths_sum", sum_worst, fmt::format("largest |d loss/d memory - sum over decoder layers| / |d loss/d memory| {:.3g}", sum_worst));
  r.check("detached_encoder_zero", detached, fmt::format("largest encoder parameter gradient with the memory detached: {:g}", detached));
}

void run(Report& r) {
  Settings s{r.text("task"),      r.integer("symbols"),    r.integer("min-len"), r.integer("max-len"), r.integer("train"),
             r.integer("eval"),   r.integer("d-model"),    r.integer("heads"),   r.integer("layers"),  r.integer("steps"),
             r.integer("max-tokens"), r.integer("probe-every"), r.real("lr")};
  GF_CHECK(s.probe_every >= 1, "lab crossattn: --probe-every must be positive, got {}", s.probe_every);
  std::optional<RealData> real;
  if (uses_real_data(r)) {
    real = real_data(r), s.real = &*real;
    if (real->ids.test.size() > static_cast<size_t>(s.n_eval)) real->ids.test.resize(static_cast<size_t>(s.n_eval));
    r.say(fmt::format("the real task above: {} held-out test pairs; Post-LN, d_model {}, {} heads, {}+{} layers;", real->ids.test.size(), s.d_model,
                      s.heads, s.layers, s.layers));
  } else {
    r.say(fmt::format("task {} over {} symbols, lengths {}-{}, {} training and {} held-out sequences; Post-LN, d_model {}, {} heads, {}+{} layers;",
                      s.task, s.symbols, s.min_len, s.max_len, s.n_train, s.n_eval, s.d_model, s.heads, s.layers, s.layers));
  }
  r.say(fmt::format("{} steps of Adam at lr {} (warm-up {}), {} tokens a batch.", s.steps, s.lr, s.steps / 10, s.max_tokens));
  if (r.control()) r.say("Here training reads the memory detached (encoder_gradient = false): the same forward, no gradient into the encoder.");
  std::vector<Run> runs;
  for (int i = 0; i < r.seeds(); ++i) {
    if (real) {
      runs.push_back(run_seed(s, real->ids, r.control(), r.seed(i)));
      continue;
    }
    const IdData data = synthetic_task(s.task, s.symbols, s.min_len, s.max_len, s.n_train, s.n_eval, r.seed(i));
    runs.push_back(run_seed(s, data, r.control(), r.seed(i)));
  }
  report(r, s, runs);
  add_figure(r, s, runs);
  auto& d = r.data();
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& x = runs[i];
    nlohmann::json probes = nlohmann::json::array();
    for (const auto& p : x.probes) probes.push_back({{"encoder", p.encoder}, {"decoder", p.decoder}, {"source_embedding", p.source_embedding}});
    d["runs"].push_back({{"seed", r.seed(static_cast<int>(i))},
                         {"losses", x.fit.losses},
                         {"init_encoder", x.init.encoder},
                         {"init_decoder", x.init.decoder},
                         {"probe_steps", x.probe_steps},
                         {"probes", probes},
                         {"memory_paths", x.paths.per_layer},
                         {"memory_total", x.paths.total},
                         {"moved_encoder", x.moved_encoder},
                         {"moved_decoder", x.moved_decoder},
                         {"tf_accuracy", x.tf.accuracy},
                         {"tf_accuracy_encoder_reset", x.tf_reset.accuracy},
                         {"free_running_tokens", x.fr.tokens},
                         {"free_running_tokens_encoder_reset", x.fr_reset.tokens},
                         {"free_running_exact", x.fr.exact}});
    if (real) d["runs"].back()["bleu_valid"] = x.bleu, d["runs"].back()["bleu_valid_encoder_reset"] = x.bleu_reset;
  }
  check_claims(r, runs);
}

}  // namespace

Lab crossattn_lab() {
  Lab l;
  l.name = "crossattn";
  l.title = "cross-attention: the encoder's only gradient path";
  l.reference = "Vaswani et al. 2017, arXiv:1706.03762 (Section 3.2.3, encoder-decoder attention)";
  l.question = "How much gradient reaches each encoder layer, all of it through the decoder's cross-attention, against the decoder's own "
               "layers; and what does the encoder learn from it -- what is left of translation when the trained encoder is put back to its start?";
  l.control = "the memory detached in training (the same forward; no gradient reaches the encoder)";
  l.default_seeds = 5;
  l.options = task_options();
  l.options.insert(l.options.end(), {{"d-model", Option::Int, "32", "model width (FFN 4x)"},
                                     {"heads", Option::Int, "4", "attention heads"},
                                     {"layers", Option::Int, "3", "encoder and decoder layers each"},
                                     {"steps", Option::Int, "400", "training steps"},
                                     {"lr", Option::Real, "0.002", "Adam learning rate (10% linear warm-up)"},
                                     {"max-tokens", Option::Int, "1024", "padded tokens per batch"},
                                     {"probe-every", Option::Int, "10", "steps between reads of the per-layer gradients"}});
  add_real_data_options(l.options);  // --data: a real translation task in place of the synthetic one (lab/real_data.h)
  l.run = run;
  return l;
}

}  // namespace gf::lab

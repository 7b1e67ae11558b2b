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
// Here, per seed (the seed draws the synthetic task's data, the weights and the batch order), one
// arm: the gradient reaching each encoder layer against each decoder layer's, at initialisation and
// during training; how far training moves the encoder's weights; and what the encoder learnt: the
// trained model's held-out accuracy against the same model with its encoder (and source embedding)
// put back to their initial weights (lab/crossattn.h).
// With --data DIR (lab/real_data.h) the task is that real translation task (the same data for every
// seed), and BLEU on its validation split is reported beside the accuracies.
// The control, an ablation, trains with the memory detached (Seq2SeqTransformer::encoder_gradient = false).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "lab/common.h"
#include "lab/crossattn.h"
#include "lab/real_data.h"
#include "lab/runner.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

constexpr const char* kEncoderColor = "#2ca02c";
constexpr const char* kDecoderColor = "#1f77b4";

struct Settings {
  TaskSettings task;
  int64_t d_model = 32, heads = 4, layers = 3, steps = 400;
  double lr = 0.002;
  int64_t max_tokens = 1024, probe_every = 10;
  RealDataSettings real;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = Fields<S>::nest(&S::task, task_fields());
  f.add({{"d-model", &S::d_model, "model width (FFN 4x)"},
         {"heads", &S::heads, "attention heads"},
         {"layers", &S::layers, "encoder and decoder layers each"},
         {"steps", &S::steps, "training steps"},
         {"lr", &S::lr, "Adam learning rate (10% linear warm-up)"},
         {"max-tokens", &S::max_tokens, "padded tokens per batch"},
         {"probe-every", &S::probe_every, "steps between reads of the per-layer gradients"}});
  return f.add(Fields<S>::nest(&S::real, real_data_fields()));  // --data: a real translation task in place of the synthetic one
}

void validate(const Settings& s) { GF_CHECK(s.probe_every >= 1, "lab crossattn: --probe-every must be positive, got {}", s.probe_every); }

// One seed's run.
struct Run {
  MemoryPaths paths;                  // at initialisation, float64, encoder_gradient on
  double detached_encoder_grad = 0;   // largest encoder parameter gradient with encoder_gradient off, float64
  StackGradNorms init;                // at initialisation, as the run trains (the ablation detached)
  std::vector<StackGradNorms> probes; // during training, every probe_every steps
  std::vector<double> probe_steps;
  FitResult fit;
  double moved_encoder = 0, moved_decoder = 0;
  TeacherForced tf, tf_reset;
  Accuracy fr, fr_reset;
  double bleu = NAN, bleu_reset = NAN;  // --data: greedy BLEU on the first --eval validation pairs, trained and encoder put back
};

void to_json(nlohmann::json& j, const Run& x) {
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& p : x.probes) probes.push_back({{"encoder", p.encoder}, {"decoder", p.decoder}, {"source_embedding", p.source_embedding}});
  j = {{"losses", x.fit.losses},     {"init_encoder", x.init.encoder},     {"init_decoder", x.init.decoder},
       {"probe_steps", x.probe_steps}, {"probes", probes},                   {"memory_paths", x.paths.per_layer},
       {"memory_total", x.paths.total}, {"moved_encoder", x.moved_encoder}, {"moved_decoder", x.moved_decoder},
       {"tf_accuracy", x.tf.accuracy}, {"tf_accuracy_encoder_reset", x.tf_reset.accuracy}, {"free_running_tokens", x.fr.tokens},
       {"free_running_tokens_encoder_reset", x.fr_reset.tokens}, {"free_running_exact", x.fr.exact}};
  if (!std::isnan(x.bleu)) j["bleu_valid"] = x.bleu, j["bleu_valid_encoder_reset"] = x.bleu_reset;
}

struct Context {
  std::optional<RealData> real;  // --data: its test split cut to --eval pairs
};

Context prepare(const Settings& s, Report& r) {
  Context c;
  if (s.real.given()) {
    c.real = real_data(s.real, r);
    if (c.real->ids.test.size() > static_cast<size_t>(s.task.eval)) c.real->ids.test.resize(static_cast<size_t>(s.task.eval));
    r.say(fmt::format("the real task above: {} held-out test pairs; Post-LN, d_model {}, {} heads, {}+{} layers;", c.real->ids.test.size(), s.d_model,
                      s.heads, s.layers, s.layers));
  } else {
    const TaskSettings& t = s.task;
    r.say(fmt::format("task {} over {} symbols, lengths {}-{}, {} training and {} held-out sequences; Post-LN, d_model {}, {} heads, {}+{} layers;",
                      t.task, t.symbols, t.min_len, t.max_len, t.train, t.eval, s.d_model, s.heads, s.layers, s.layers));
  }
  r.say(fmt::format("{} steps of Adam at lr {} (warm-up {}), {} tokens a batch.", s.steps, s.lr, s.steps / 10, s.max_tokens));
  if (r.ablation_mode()) r.say("Here training reads the memory detached (encoder_gradient = false): the same forward, no gradient into the encoder.");
  return c;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x / static_cast<double>(v.size());
  return s;
}

// The exact checks, on a float64 copy at initialisation: the same in the lab and its ablation.
void exact_checks(const nn::Seq2SeqTransformer& model, const train::BatchTensors& first, Run& r) {
  auto f64 = float64_copy(model);
  r.paths = memory_gradient_paths(*f64, first);
  f64->encoder_gradient = false;
  f64->zero_grad();
  train::batch_loss(*f64, first, 0.0).backward();
  for (const auto& [name, p] : f64->named_parameters())
    if (is_encoder_parameter(name) && p.grad().defined()) r.detached_encoder_grad = std::max(r.detached_encoder_grad, l2_norm(p.grad()));
}

// Held-out accuracies of the model as it stands (and BLEU with --data).
void evaluate(const nn::Seq2SeqTransformer& model, const IdData& data, const Settings& s, const RealData* real, TeacherForced& tf, Accuracy& fr,
              double& bleu) {
  tf = teacher_forced(model, data.test);
  fr = free_running_accuracy(model, data.test);
  if (real) bleu = greedy_bleu(model, *real, real->ids.valid, real->valid_refs, static_cast<size_t>(s.task.eval)).score;
}

Run measure(const Settings& s, Context& c, const RunKey& k) {
  const RealData* real = c.real ? &*c.real : nullptr;
  const IdData data = real ? real->ids : s.task.make(k.seed);
  Run r;
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, /*pre_ln=*/false), k.seed);
  const train::BatchTensors first = train::to_tensors(batches(data.train, s.max_tokens, k.seed).front());
  exact_checks(model, first, r);
  model.encoder_gradient = !k.ablate;
  model.zero_grad();
  train::batch_loss(model, first, 0.0).backward();
  r.init = layer_grad_norms(model);
  model.zero_grad();
  std::map<std::string, Tensor> start;
  for (const auto& [name, t] : model.state_dict()) start[name] = t.clone();
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = s.steps / 10, fo.max_tokens = s.max_tokens, fo.seed = k.seed;
  r.fit = fit(model, data.train, fo, [&](int64_t step, double) {
    if (step % s.probe_every != 0 && step != 1) return;
    r.probe_steps.push_back(static_cast<double>(step));
    r.probes.push_back(layer_grad_norms(model));  // after clipping: one scale for every layer, so their ratios stand
  });
  model.eval();
  r.moved_encoder = relative_change(model, start, true);
  r.moved_decoder = relative_change(model, start, false);
  evaluate(model, data, s, real, r.tf, r.fr, r.bleu);
  // The trained decoder with the encoder it started from: after every measurement of the trained model.
  std::map<std::string, Tensor> reset;
  for (const auto& [name, t] : start)
    if (is_encoder_parameter(name)) reset[name] = t;
  model.load_state_dict(reset, /*strict=*/false);
  evaluate(model, data, s, real, r.tf_reset, r.fr_reset, r.bleu_reset);
  return r;
}

// ---------------------------------------------------------------- tables and figures

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

std::vector<double> column(const std::vector<const Run*>& runs, double (*f)(const Run&)) {
  std::vector<double> v;
  for (const Run* r : runs) v.push_back(f(*r));
  return v;
}

// A layer's gradient norm per run, at initialisation or its mean over training's probes: [run][layer].
std::vector<std::vector<double>> per_layer(const std::vector<const Run*>& runs, int64_t layers, bool decoder, bool training) {
  std::vector<std::vector<double>> rows;
  for (const Run* run : runs) {
    std::vector<double> v(static_cast<size_t>(layers), 0.0);
    if (!training) v = decoder ? run->init.decoder : run->init.encoder;
    else
      for (const auto& p : run->probes)
        for (int64_t l = 0; l < layers; ++l) v[l] += (decoder ? p.decoder : p.encoder)[l] / static_cast<double>(run->probes.size());
    rows.push_back(v);
  }
  return rows;
}

void print_tables(Report& r, const Settings& s, const Context& c, const std::vector<const Run*>& runs) {
  r.section("the gradient reaching each layer (Frobenius over its parameters; mean [t 95% interval] over seeds)");
  Table t("layers", {"stack", "layer", "at initialisation", "mean over training"});
  for (int side = 0; side < 2; ++side) {
    const auto init = per_layer(runs, s.layers, side, false), during = per_layer(runs, s.layers, side, true);
    for (int64_t l = 0; l < s.layers; ++l) {
      std::vector<double> a, b;
      for (size_t i = 0; i < runs.size(); ++i) a.push_back(init[i][l]), b.push_back(during[i][l]);
      t.row({side ? "decoder" : "encoder", l + 1, with_interval(a, "{:.3g}"), with_interval(b, "{:.3g}")});
    }
  }
  r.print(t);
  r.say("Training values are read after the gradient-norm clip (one factor for every layer, so ratios between layers stand).");

  r.section("d loss / d memory by decoder layer (the cross-attention paths), at initialisation, float64");
  std::vector<std::string> cols{"seed", "|d loss / d memory|"};
  for (int64_t l = 0; l < s.layers; ++l) cols.push_back(fmt::format("through decoder layer {}", l + 1));
  cols.push_back("|total - sum of paths| / |total|");
  Table p("paths", cols);
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<Cell> row{static_cast<int64_t>(r.seed(static_cast<int>(i))), runs[i]->paths.total};
    for (double v : runs[i]->paths.per_layer) row.push_back(v);
    row.push_back(runs[i]->paths.sum_difference);
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
  if (c.real) {
    const std::string which = fmt::format("greedy BLEU, first {} validation pairs", std::min<size_t>(static_cast<size_t>(s.task.eval), c.real->ids.valid.size()));
    w.row({which, with_interval(column(runs, [](const Run& x) { return x.bleu; }), "{:.2f}")});
    w.row({"... with the encoder put back", with_interval(column(runs, [](const Run& x) { return x.bleu_reset; }), "{:.2f}")});
  }
  r.print(w);
  if (c.real)
    r.say("Token accuracy is position by position against the reference, a strict measure for real sentences; BLEU (sacreBLEU 13a) is reported, "
          "not claimed.");
  else
    r.say(fmt::format("A model that ignores the source can guess a symbol right about 1 time in {}.", s.task.symbols));
}

void add_figure(Report& r, const Settings& s, const std::vector<const Run*>& runs) {
  std::vector<double> x;
  for (int64_t l = 1; l <= s.layers; ++l) x.push_back(static_cast<double>(l));
  for (int training = 0; training < 2; ++training)
    r.add_panel(Chart{training ? "gradient per layer, mean over training (band: seeds)" : "gradient per layer at initialisation (band: seeds)",
                      "layer", "|grad|", false, true,
                      {band_series("encoder", x, spread_per_column(per_layer(runs, s.layers, false, training)), kEncoderColor),
                       band_series("decoder", x, spread_per_column(per_layer(runs, s.layers, true, training)), kDecoderColor)},
                      x, Chart::Corner::BottomLeft});
  // The encoder/decoder ratio during training, per probe, band over seeds.
  std::vector<std::vector<double>> ratio;
  for (const Run* run : runs) {
    ratio.push_back({});
    for (const auto& p : run->probes) ratio.back().push_back(mean_of(p.encoder) / mean_of(p.decoder));
  }
  std::vector<double> ticks;
  for (int64_t k = 0; k <= s.steps; k += std::max<int64_t>(1, s.steps / 4)) ticks.push_back(static_cast<double>(k));
  r.add_panel(Chart{"encoder / decoder gradient during training (band: seeds)", "step", "ratio of mean layer norms", false, true,
                    {band_series("encoder / decoder", runs[0]->probe_steps, spread_per_column(ratio), "#9467bd")}, ticks, Chart::Corner::BottomRight});
  std::vector<double> seeds;
  for (size_t i = 0; i < runs.size(); ++i) seeds.push_back(static_cast<double>(r.seed(static_cast<int>(i))));
  r.add_panel(Chart{"held-out teacher-forced accuracy per seed", "seed", "token accuracy", false, false,
                    {ChartSeries{"trained", seeds, column(runs, [](const Run& x) { return x.tf.accuracy; }), {}, {}, false, kDecoderColor},
                     ChartSeries{"encoder put back to its initial weights", seeds, column(runs, [](const Run& x) { return x.tf_reset.accuracy; }), {}, {}, true,
                                 kEncoderColor}},
                    seeds, Chart::Corner::BottomRight});
}

void describe(const Settings& s, const Context& c, const Grid<Run>& g, Report& r) {
  const std::vector<const Run*> runs = g.of("trained");
  print_tables(r, s, c, runs);
  add_figure(r, s, runs);
}

// ---------------------------------------------------------------- claims

// The largest value over every seed's run (an exact check holds on each of them).
double worst(const Grid<Run>& g, double (*f)(const Run&)) {
  double w = 0;
  for (const Run* r : g.of("trained")) w = std::max(w, f(*r));
  return w;
}
double sum_difference(const Run& r) { return r.paths.sum_difference; }
double detached_grad(const Run& r) { return r.detached_encoder_grad; }

std::vector<ClaimDef<Run>> claims(const Settings&) {
  using V = SeedView<Run>;
  return {
      {.spec = {.id = "encoder_gradient_share", .kind = ClaimKind::Paper,
                .statement = "the encoder's layers get gradient of the same order as the decoder's, all of it through cross-attention: the mean "
                             "encoder layer's gradient norm over the mean decoder layer's, averaged over training",
                .side = Compare::Above, .threshold = 0.1,
                .source = "Vaswani et al. 2017, Section 3.2.3: every decoder layer's cross-attention reads the encoder's output, so the loss's "
                          "gradient reaches the encoder through all of them and the two stacks train as one network; 0.1 is an order of magnitude "
                          "below parity",
                .control_targets = true, .min_effect = 0.05, .min_effect_reason = "half the threshold's distance from no gradient (0)",
                .pilot_sd = 0.0352, .pilot_n = 5},
       .per_seed = [](const V& v) { return training_share(v("trained")); },
       .evidence = [](const Grid<Run>&, const std::vector<double>& x) {
         return fmt::format("mean encoder / decoder layer gradient over training, per seed: {:.3f}", fmt::join(x, ", "));
       }},
      {.spec = {.id = "encoder_learns", .kind = ClaimKind::Paper,
                .statement = "what the encoder learns carries the translation: the trained model's held-out teacher-forced token accuracy minus "
                             "that of the same model with its encoder and source embedding put back to their initial weights",
                .side = Compare::Above, .threshold = 0.2,
                .source = "the decoder is trained on the representations the encoder learns; put back to its start, the encoder gives the "
                          "decoder representations it never saw. 0.2: a fifth of all tokens",
                .control_targets = true, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.1,
                .min_effect_reason = "half the threshold's distance from no difference (0)", .pilot_sd = 0.0476, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("trained").tf.accuracy - v("trained").tf_reset.accuracy; },
       .evidence = [](const Grid<Run>&, const std::vector<double>& x) {
         return fmt::format("teacher-forced accuracy, trained minus encoder put back, per seed: {:+.3f}", fmt::join(x, ", "));
       }},
      {.spec = {.id = "translates", .kind = ClaimKind::Paper,
                .statement = "the trained model translates held-out sentences: its free-running greedy token accuracy",
                .side = Compare::Above, .threshold = 0.5,
                .source = "a model that ignores the source guesses a symbol about 1 time in 10 (the default alphabet); 0.5 is far above that and "
                          "below a model that has learnt the task",
                .control_targets = false, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.2,
                .min_effect_reason = "half the threshold's distance from chance (about 0.1): a token accuracy of 0.7", .pilot_sd = 0.0239, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("trained").fr.tokens; },
       .evidence = [](const Grid<Run>&, const std::vector<double>& x) {
         return fmt::format("held-out free-running token accuracy per seed: {:.3f}", fmt::join(x, ", "));
       }},
      {.spec = {.id = "memory_paths_sum", .kind = ClaimKind::Check,
                .statement = "d loss / d memory is the sum of what each decoder layer's cross-attention sends back (each layer reading its own "
                             "copy of the memory): the relative difference, float64, at initialisation",
                .side = Compare::Below, .threshold = 1e-10,
                .source = "the memory feeds the decoder only through cross-attention: the chain rule sums those paths exactly, up to float64 "
                          "rounding",
                .control_targets = false},
       .joint = [](const Grid<Run>& g) { return worst(g, sum_difference); },
       .evidence = [](const Grid<Run>& g, const std::vector<double>&) {
         return fmt::format("largest |d loss/d memory - sum over decoder layers| / |d loss/d memory| {:.3g}", worst(g, sum_difference));
       }},
      {.spec = {.id = "detached_encoder_zero", .kind = ClaimKind::Check,
                .statement = "with the memory detached (encoder_gradient = false) no encoder parameter gets any gradient: the largest one's norm, "
                             "float64",
                .side = Compare::Below, .threshold = 1e-300,
                .source = "detach() cuts the only path from the loss to the encoder, so backward never reaches it (its gradients stay undefined, "
                          "read as 0)",
                .control_targets = false},
       .joint = [](const Grid<Run>& g) { return worst(g, detached_grad); },
       .evidence = [](const Grid<Run>& g, const std::vector<double>&) {
         return fmt::format("largest encoder parameter gradient with the memory detached: {:g}", worst(g, detached_grad));
       }},
  };
}

}  // namespace

Lab crossattn_lab() {
  return make_lab(Experiment<Settings, Context, Run>{
      .info = {.name = "crossattn",
               .title = "cross-attention: the encoder's only gradient path",
               .reference = "Vaswani et al. 2017, arXiv:1706.03762 (Section 3.2.3, encoder-decoder attention)",
               .question = "How much gradient reaches each encoder layer, all of it through the decoder's cross-attention, against the decoder's "
                           "own layers; and what does the encoder learn from it -- what is left of translation when the trained encoder is put "
                           "back to its start?",
               .default_seeds = 5,
               .ablation = "the memory detached in training (the same forward; no gradient reaches the encoder)",
               .control_is_ablation = true},
      .settings = fields(),
      .validate = validate,
      .arms = [](const Settings&) { return std::vector<ArmSpec>{{"trained", {}}}; },
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

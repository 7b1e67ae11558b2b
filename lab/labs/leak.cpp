// Lab `leak`: what the causal mask is for (the course's "without the mask the decoder copies the
// answer").
//
// In teacher forcing the decoder reads tgt[0 .. T-1] and predicts tgt[1 .. T]: the label at
// position t is the input at position t+1. Without the causal mask position t may attend to
// position t+1, so the decoder can read the answer off its own input instead of learning the task.
// Its teacher-forced loss falls fast; at inference, where the later tokens do not exist yet, it has
// learnt nothing it can use.
//
// Here: one synthetic task per seed, the same initial weights and the same batches, trained with
// (arm "causal") and without (arm "none") the causal mask; teacher-forced loss and accuracy against
// free-running greedy accuracy (the prefix recomputed with model.forward, so the switch applies at
// inference too); and the Jacobian test (lab/leak.h), by backward: || d logit_t / d input_t' || for
// every pair of positions, which the mask makes exactly 0 for every t' > t.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "lab/common.h"
#include "lab/leak.h"
#include "lab/runner.h"

namespace gf::lab {
namespace {

struct Settings {
  TaskSettings task;
  int64_t jacobian_sentences = 8, d_model = 32, heads = 2, layers = 2, steps = 400, eval_every = 50;
  double lr = 0.002;
  int64_t max_tokens = 1024;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = Fields<S>::nest(&S::task, task_fields());
  return f.add({{"jacobian-sentences", &S::jacobian_sentences, "held-out sequences of the longest length whose Jacobian is taken"},
                {"d-model", &S::d_model, "model width (feed-forward 4x)"},
                {"heads", &S::heads, "attention heads"},
                {"layers", &S::layers, "encoder and decoder layers each"},
                {"steps", &S::steps, "training steps per arm"},
                {"eval-every", &S::eval_every, "steps between accuracy probes on 50 held-out sequences"},
                {"lr", &S::lr, "Adam learning rate (10% linear warm-up)"},
                {"max-tokens", &S::max_tokens, "padded tokens per batch"}});
}

void validate(const Settings& s) {
  GF_CHECK(s.task.eval >= 1, "lab leak: --eval must be at least 1 (the held-out sequences measured), got {}", s.task.eval);
  GF_CHECK(s.jacobian_sentences >= 1, "lab leak: --jacobian-sentences must be at least 1, got {}", s.jacobian_sentences);
  GF_CHECK(s.eval_every >= 1, "lab leak: --eval-every must be at least 1, got {}", s.eval_every);
}

// One model (masked or not) for one seed, trained and measured.
struct Measured {
  uint64_t seed = 0;
  std::vector<double> losses;                           // per training step
  std::vector<double> probe_steps, probe_tf, probe_fr;  // held-out token accuracy during training
  TeacherForced tf;
  Accuracy fr;
  JacobianGrid J;  // the mean over the sentences
  JacobianStats js;
  int64_t sentences = 0;
};
void to_json(nlohmann::json& j, const Measured& m) {
  j = {{"losses", m.losses}, {"tf_nll", m.tf.nll}, {"tf_accuracy", m.tf.accuracy}, {"free_running_tokens", m.fr.tokens},
       {"free_running_exact", m.fr.exact}, {"probe_steps", m.probe_steps}, {"probe_tf_accuracy", m.probe_tf},
       {"probe_free_running_accuracy", m.probe_fr}, {"jacobian", m.J}};
}

// Each seed's data set, which both arms (and nothing else) train on.
struct Context {
  std::map<uint64_t, IdData> data;
};

Context prepare(const Settings& s, Report& r) {
  r.say(fmt::format("task {} over {} symbols, lengths {}-{}; Pre-LN, d_model {}, {} heads, {} layers; {} steps of Adam at lr {} "
                    "(warm-up {}), {} tokens a batch; {} seeds",
                    s.task.task, s.task.symbols, s.task.min_len, s.task.max_len, s.d_model, s.heads, s.layers, s.steps, s.lr, s.steps / 10,
                    s.max_tokens, r.seeds()));
  r.say("Each seed: one data set, one initialisation, one batch order, trained twice: with the causal mask and without it.");
  return {};
}

std::vector<ArmSpec> arms(const Settings&) { return {{"causal", {}}, {"none", {}}}; }

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  if (!c.data.count(k.seed)) c.data = {{k.seed, s.task.make(k.seed)}};  // seeds come one after another
  const IdData& data = c.data.at(k.seed);
  nn::Seq2SeqTransformer model(small_model(data, s.d_model, s.heads, s.layers, 4 * s.d_model, true), k.seed);
  model.masks.causal = k.cond.arm == "causal";
  FitOptions fo;
  fo.steps = s.steps, fo.lr = s.lr, fo.warmup = fo.steps / 10, fo.max_tokens = s.max_tokens;
  fo.seed = k.seed;  // the same batches in the same order for both arms
  Measured m;
  m.seed = k.seed;
  // Every --eval-every steps: teacher-forced and free-running token accuracy on the first 50
  // held-out sequences (dropout is 0, so train mode computes what eval mode would).
  const std::vector<train::EncodedPair> probe(data.test.begin(), data.test.begin() + std::min<size_t>(50, data.test.size()));
  m.losses = fit(model, data.train, fo, [&](int64_t step, double) {
               if (step % s.eval_every != 0 && step != 1) return;
               m.probe_steps.push_back(static_cast<double>(step));
               m.probe_tf.push_back(teacher_forced(model, probe).accuracy);
               m.probe_fr.push_back(free_running_accuracy(model, probe).tokens);
             }).losses;
  model.eval();
  const size_t n = static_cast<size_t>(s.task.eval);
  m.tf = teacher_forced(model, data.test, n);
  m.fr = free_running_accuracy(model, data.test, n);
  // The Jacobian of the first held-out sentences of the longest length (the largest grid).
  size_t longest = 0;
  for (const auto& p : data.test) longest = std::max(longest, p.tgt.size());
  std::vector<JacobianGrid> grids;
  for (const auto& p : data.test)
    if (p.tgt.size() == longest && static_cast<int64_t>(grids.size()) < s.jacobian_sentences) grids.push_back(decoder_jacobian(model, p));
  m.J = mean_grid(grids);
  m.js = jacobian_stats(grids);
  m.sentences = static_cast<int64_t>(grids.size());
  return m;
}

// ---------------------------------------------------------------- tables and figures

double tail_mean(const std::vector<double>& v) {
  const size_t k = std::min<size_t>(20, v.size());
  double s = 0;
  for (size_t i = v.size() - k; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(k);
}

void print_tables(const Grid<Measured>& g, Report& r) {
  r.section("teacher-forced against free-running, on held-out sequences");
  Table t("leak", {"seed", "mask", "train loss (last 20)", "TF nll", "TF acc", "free-running token acc", "free-running exact"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* arm : {"causal", "none"}) {
      const Measured& a = g.at(arm, 0, i);
      t.row({static_cast<int64_t>(a.seed), arm, tail_mean(a.losses), a.tf.nll, a.tf.accuracy, a.fr.tokens, a.fr.exact});
    }
  r.print(t);
  r.say("TF: teacher-forced (the true prefix is the input); free-running: greedy, each step fed the model's own previous output.");

  r.section(fmt::format("Jacobian of the logits with respect to the decoder input, {} held-out sequences of the longest length",
                        g.at("causal", 0, 0).sentences));
  Table tj("jacobian", {"seed", "mask", "positions", "entries above diagonal", "non-zero above", "largest above", "share above", "rows peaking at t+1",
                        "zero on/below"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* arm : {"causal", "none"}) {
      const Measured& a = g.at(arm, 0, i);
      tj.row({static_cast<int64_t>(a.seed), arm, static_cast<int64_t>(a.J.size()), a.js.above, a.js.above_nonzero, a.js.above_max, a.js.above_share,
              a.js.next_argmax, a.js.lower_zero});
    }
  r.print(tj);
  r.say("Entry (t, t'): || d logit_t / d input_t' ||_F by one backward per logit, for each sequence; entries above the diagonal: the t' > t");
  r.say("(later inputs) of every sequence; largest above: over them; the map in the figure is the mean over the sequences;");
  r.say("share above: their part of the sum of all entries; rows peaking at t+1: share of rows t whose largest entry apart from t' = t");
  r.say("(its own input, large through the residual path) is the next input, the one that holds logit_t's label in teacher forcing.");
}

ValueMap jacobian_map(const JacobianGrid& J, const std::string& title) {
  ValueMap m{title, "input position t' (decoder input)", "logit position t", {}, {}, J, true, "|d logit_t / d input_t'| (grey: exactly 0)"};
  for (size_t i = 0; i < J.size(); ++i) m.row_labels.push_back(std::to_string(i)), m.col_labels.push_back(std::to_string(i));
  return m;
}

// The training loss of one arm, a 10-step running mean per seed, with the seeds' spread as a band.
ChartSeries loss_band(const std::vector<const Measured*>& arms, const std::string& name, const std::string& color) {
  ChartSeries s{name, {}, {}, {}, {}, false, color};
  size_t n = arms[0]->losses.size();
  for (const Measured* a : arms) n = std::min(n, a->losses.size());
  for (size_t k = 0; k < n; ++k) {
    std::vector<double> v;  // per seed: the mean of the last 10 steps' losses (the raw curve is noisy)
    for (const Measured* a : arms) {
      const size_t from = k >= 9 ? k - 9 : 0;
      double m = 0;
      for (size_t j = from; j <= k; ++j) m += a->losses[j] / static_cast<double>(k - from + 1);
      v.push_back(m);
    }
    const Spread sp = spread(v);
    s.x.push_back(static_cast<double>(k + 1)), s.y.push_back(sp.mean), s.lo.push_back(sp.min), s.hi.push_back(sp.max);
  }
  return s;
}

ChartSeries probe_curve(const std::vector<const Measured*>& arms, bool free_running, const std::string& name, const std::string& color) {
  ChartSeries s{name, arms[0]->probe_steps, {}, {}, {}, free_running, color};
  for (size_t k = 0; k < s.x.size(); ++k) {
    std::vector<double> v;
    for (const Measured* a : arms) v.push_back((free_running ? a->probe_fr : a->probe_tf).at(k));
    const Spread sp = spread(v);
    s.y.push_back(sp.mean), s.lo.push_back(sp.min), s.hi.push_back(sp.max);
  }
  return s;
}

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  print_tables(g, r);
  const std::vector<const Measured*> masked = g.of("causal"), open = g.of("none");
  std::vector<double> step_ticks;  // explicit ticks keep the step axis from 0
  for (int64_t k = 0; k <= s.steps; k += std::max<int64_t>(1, s.steps / 4)) step_ticks.push_back(static_cast<double>(k));
  r.add_panel(Chart{"training loss, mean of 10 steps (band: seeds)", "step", "cross-entropy", false, true,
                    {loss_band(masked, "causal mask", "#1f77b4"), loss_band(open, "no mask", "#d62728")}, step_ticks});
  r.add_panel(Chart{"held-out token accuracy during training (band: seeds)", "step", "accuracy", false, false,
                    {probe_curve(masked, false, "causal, teacher-forced", "#1f77b4"), probe_curve(masked, true, "causal, free-running", "#1f77b4"),
                     probe_curve(open, false, "no mask, teacher-forced", "#d62728"), probe_curve(open, true, "no mask, free-running", "#d62728")},
                    step_ticks});
  r.add_panel(jacobian_map(masked[0]->J, fmt::format("causal mask, seed {}: mean |d logit_t / d input_t'|", masked[0]->seed)));
  r.add_panel(jacobian_map(open[0]->J, fmt::format("no mask, seed {}: mean |d logit_t / d input_t'|", open[0]->seed)));
}

// ---------------------------------------------------------------- claims

// One arm's number per seed, as the evidence prints it.
std::string per_seed_text(const Grid<Measured>& g, const std::string& arm, double (*get)(const Measured&)) {
  std::vector<std::string> v;
  for (const Measured* m : g.of(arm)) v.push_back(fmt::format("{:.3f}", get(*m)));
  return fmt::format("{}", fmt::join(v, ", "));
}

std::vector<ClaimDef<Measured>> claims(const Settings&) {
  using V = SeedView<Measured>;
  using G = Grid<Measured>;
  return {
      {.spec = {.id = "masked_future_zero", .kind = ClaimKind::Check,
                .statement = "with the causal mask d logit_t / d input_t' is exactly 0 for every t' > t and non-zero for t' <= t (count of entries, "
                             "over every seed and sequence, that break this)",
                .side = Compare::Below, .threshold = 0.5,
                .source = "the mask sets the scores of later keys to -inf: their weight, and every path from a later input, is exactly 0",
                .control_targets = false},
       .joint = [](const G& g) {
         double broken = 0;
         for (const Measured* m : g.of("causal")) broken += static_cast<double>(m->js.above_nonzero + m->js.lower_zero);
         return broken;
       },
       .evidence = [](const G& g, const auto&) {
         std::string ev;
         for (const Measured* m : g.of("causal"))
           ev += fmt::format("{}seed {}: {} of {} above non-zero (largest {:g}), {} zero on/below", ev.empty() ? "" : "; ", m->seed, m->js.above_nonzero,
                             m->js.above, m->js.above_max, m->js.lower_zero);
         return ev;
       }},
      {.spec = {.id = "open_future_nonzero", .kind = ClaimKind::Check,
                .statement = "without the mask every entry above the diagonal is non-zero (count of exact zeros, every seed)",
                .side = Compare::Below, .threshold = 0.5,
                .source = "softmax weights are always > 0, so every later input reaches every logit: a property of softmax, not evidence",
                .control_targets = false},
       .joint = [](const G& g) {
         double zero = 0;
         for (const Measured* m : g.of("none")) zero += static_cast<double>(m->js.above - m->js.above_nonzero);
         return zero;
       },
       .evidence = [](const G& g, const auto&) {
         std::string ev;
         for (const Measured* m : g.of("none"))
           ev += fmt::format("{}seed {}: {} of {} non-zero, {:.0f}% of the mass", ev.empty() ? "" : "; ", m->seed, m->js.above_nonzero, m->js.above,
                             100 * m->js.above_share);
         return ev;
       }},
      {.spec = {.id = "reads_answer", .kind = ClaimKind::Paper,
                .statement = "without the mask the decoder reads the answer: the share of rows t whose largest dependence apart from their own "
                             "input is on input t+1 (which holds logit_t's label) is above 0.5",
                .side = Compare::Above, .threshold = 0.5,
                .source = "the course (without the mask the decoder copies the answer from the next position); 0.5: 'most rows' (by chance a "
                          "row peaks at t+1 about 1/(T-1) of the time)",
                .control_targets = true, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.2,
                .min_effect_reason = "half the threshold's distance from chance (a row peaks at t+1 about 1/(T-1) of the time, near 0.1): a "
                                     "share of 0.7, clearly most rows",
                .pilot_sd = 0.059, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("none").js.next_argmax; },
       .evidence = [](const G& g, const auto&) {
         auto f = [](const Measured& m) { return m.js.next_argmax; };
         return fmt::format("share of rows peaking at t+1 without the mask: {}; with it: {}", per_seed_text(g, "none", f), per_seed_text(g, "causal", f));
       },
       .no_placebo = "one arm's share against 0.5, no contrast between arms"},
      {.spec = {.id = "tf_lower", .kind = ClaimKind::Paper,
                .statement = "without the mask the teacher-forced held-out NLL is lower: NLL with the mask minus NLL without it is above 0.02 nats",
                .side = Compare::Above, .threshold = 0.02,
                .source = "the course (the leak makes teacher forcing easy); 0.02 nats: the smallest effect the lab cares about. It was 0, the "
                          "sign of the paired difference, until the placebo (issue 35) showed that a claim at the null's own value is called "
                          "supported in 2.5-5% of placebo splits by chance alone (change log)",
                .control_targets = true, .min_effect = 0.01, .min_effect_reason = "half the threshold's distance from no difference (0 nats)",
                .pilot_sd = 0.0818, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("causal").tf.nll - v("none").tf.nll; },
       .evidence = [](const G& g, const auto&) {
         auto f = [](const Measured& m) { return m.tf.nll; };
         return fmt::format("held-out NLL without the mask {}; with it {}", per_seed_text(g, "none", f), per_seed_text(g, "causal", f));
       }},
      {.spec = {.id = "fr_collapses", .kind = ClaimKind::Paper,
                .statement = "without the mask free-running greedy accuracy is far lower: its token accuracy over the masked model's is below 0.5",
                .side = Compare::Below, .threshold = 0.5,
                .source = "the course (at inference the later tokens do not exist yet, so what the model learnt is of no use); 0.5: 'at most "
                          "half', the lab's threshold since its first version",
                .control_targets = true, .min_effect = 0.25,
                .min_effect_reason = "half the threshold's distance from no collapse (a ratio of 1): a quarter of the masked model's accuracy",
                .pilot_sd = 0.109, .pilot_n = 5},
       .per_seed = [](const V& v) { return v("causal").fr.tokens > 0 ? v("none").fr.tokens / v("causal").fr.tokens : NAN; },
       .evidence = [](const G& g, const auto&) {
         auto f = [](const Measured& m) { return m.fr.tokens; };
         return fmt::format("free-running token accuracy without the mask {}; with it {}", per_seed_text(g, "none", f), per_seed_text(g, "causal", f));
       }},
  };
}

}  // namespace

Lab leak_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "leak",
               .title = "the causal mask: without it the decoder copies the answer",
               .reference = "the course: the decoder's self-attention must not see later positions",
               .question = "Trained without the causal mask, does the decoder look better teacher-forced and fail free-running, and is the "
                           "masked decoder's dependence on later inputs exactly zero?",
               .default_seeds = 5,
               .null = {"causal", 0},
               .null_description = "the model trained with the causal mask"},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

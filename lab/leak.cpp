// Lab `leak`: what the causal mask is for (the course's "without the mask the decoder copies the
// answer").
//
// In teacher forcing the decoder reads tgt[0 .. T-1] and predicts tgt[1 .. T]: the label at
// position t is the input at position t+1. Without the causal mask position t may attend to
// position t+1, so the decoder can read the answer off its own input instead of learning the task.
// Its teacher-forced loss falls fast; at inference, where the later tokens do not exist yet, it has
// learnt nothing it can use.
//
// Here: one synthetic task, the same initial weights and the same batches, trained with and
// without the causal mask; teacher-forced loss and accuracy against free-running greedy accuracy
// (the prefix recomputed with model.forward, so the switch applies at inference too); and the
// Jacobian test, by backward: || d logit_t / d input_t' || for every pair of positions, which the
// mask makes exactly 0 for every t' > t.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops/shape.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "nn/masks.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

// J[t][t'] = || d logits[t, :] / d input[t', :] ||_F, the input being the decoder's input
// embeddings (token embedding * sqrt(D) + position), for one sentence (no padding).
using Grid = std::vector<std::vector<double>>;

Grid decoder_jacobian(const nn::Seq2SeqTransformer& model, const train::EncodedPair& pair) {
  train::Batch b = train::collate({pair}, std::vector<size_t>{0});
  train::BatchTensors t = train::to_tensors(b);
  const int64_t T = t.tgt_in.size(1);
  Variable emb = model.embed_tgt(t.tgt_in);  // (1, T, D)
  emb.retain_grad();
  Tensor causal = model.masks.causal ? nn::make_causal_mask(T) : Tensor();                                      // (T, T)
  Variable memory = model.encode(t.src, Tensor());                                                              // (1, S, D)
  Variable logits = model.project(model.transformer->decoder->forward(emb, memory, causal, Tensor(), Tensor()).output);  // (1, T, V)
  const int64_t V = logits.size(2), D = emb.size(2);
  Grid J(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(T), 0.0));
  // One backward per output entry (t, v): row v of the block d logit_t / d input is emb.grad.
  for (int64_t row = 0; row < T; ++row)
    for (int64_t v = 0; v < V; ++v) {
      Tensor up = Tensor::zeros({1, T, V}, logits.dtype());  // (1, T, V): one-hot at (row, v)
      up.flat_set(row * V + v, 1.0);
      emb.zero_grad();
      logits.backward(up, /*retain_graph=*/true);
      const Tensor g = emb.grad().contiguous();  // (1, T, D)
      for (int64_t col = 0; col < T; ++col)
        for (int64_t d = 0; d < D; ++d) J[row][col] += g.flat_get(col * D + d) * g.flat_get(col * D + d);
    }
  for (auto& r : J)
    for (auto& x : r) x = std::sqrt(x);
  return J;
}

struct JacobianStats {
  int64_t above = 0, above_nonzero = 0;  // entries t' > t, and how many are not exactly 0
  int64_t lower_zero = 0;                // entries t' <= t that are exactly 0
  double above_max = 0;                  // largest entry above the diagonal
  double above_share = 0;                // share of the sum of all entries that lies above the diagonal
  double next_argmax = 0;                // share of rows t < T-1 whose largest entry off the diagonal is at t' = t+1
};

// Over several sentences of the same length: counts add up, shares are over all rows.
JacobianStats jacobian_stats(const std::vector<Grid>& grids) {
  JacobianStats s;
  double total = 0, above_sum = 0;
  int64_t next = 0, rows = 0;
  for (const Grid& J : grids) {
    const size_t T = J.size();
    for (size_t r = 0; r < T; ++r) {
      for (size_t c = 0; c < T; ++c) {
        total += J[r][c];
        if (c > r) {
          ++s.above;
          s.above_nonzero += J[r][c] != 0.0;
          s.above_max = std::max(s.above_max, J[r][c]);
          above_sum += J[r][c];
        } else {
          s.lower_zero += J[r][c] == 0.0;
        }
      }
      // Apart from its own input (the residual path makes that one large), which input does logit_r lean on most?
      if (r + 1 < T) {
        double best = 0;
        for (size_t c = 0; c < T; ++c)
          if (c != r) best = std::max(best, J[r][c]);
        next += J[r][r + 1] > 0 && J[r][r + 1] == best;
        ++rows;
      }
    }
  }
  s.above_share = total > 0 ? above_sum / total : 0;
  s.next_argmax = rows ? static_cast<double>(next) / static_cast<double>(rows) : 0;
  return s;
}

Grid mean_grid(const std::vector<Grid>& grids) {
  Grid m = grids.front();
  for (size_t k = 1; k < grids.size(); ++k)
    for (size_t r = 0; r < m.size(); ++r)
      for (size_t c = 0; c < m.size(); ++c) m[r][c] += grids[k][r][c];
  for (auto& row : m)
    for (auto& x : row) x /= static_cast<double>(grids.size());
  return m;
}

struct Arm {  // one model (masked or not) for one seed
  FitResult fit;
  std::vector<double> curve_steps, curve_tf, curve_fr;  // held-out token accuracy during training
  TeacherForced tf;
  Accuracy fr;
  Grid J;  // the mean over the sentences
  JacobianStats js;
  int64_t sentences = 0;
};

Arm train_arm(Report& r, const IdData& data, bool causal, uint64_t seed) {
  nn::Seq2SeqTransformer model(small_model(data, r.integer("d-model"), r.integer("heads"), r.integer("layers"), 4 * r.integer("d-model"), true),
                               seed);
  model.masks.causal = causal;
  FitOptions fo;
  fo.steps = r.integer("steps");
  fo.lr = r.real("lr");
  fo.warmup = fo.steps / 10;
  fo.max_tokens = r.integer("max-tokens");
  fo.seed = seed;  // the same batches in the same order for both arms
  Arm a;
  // Every `every` steps: teacher-forced and free-running token accuracy on the first 50 held-out
  // sequences (dropout is 0, so train mode computes what eval mode would).
  const int64_t every = r.integer("eval-every");
  const std::vector<train::EncodedPair> probe(data.test.begin(), data.test.begin() + std::min<size_t>(50, data.test.size()));
  a.fit = fit(model, data.train, fo, [&](int64_t step, double) {
    if (step % every != 0 && step != 1) return;
    a.curve_steps.push_back(static_cast<double>(step));
    a.curve_tf.push_back(teacher_forced(model, probe).accuracy);
    a.curve_fr.push_back(free_running_accuracy(model, probe).tokens);
  });
  model.eval();
  const size_t n = static_cast<size_t>(r.integer("eval"));
  a.tf = teacher_forced(model, data.test, n);
  a.fr = free_running_accuracy(model, data.test, n);
  // The Jacobian of the first held-out sentences of the longest length (the largest grid).
  size_t longest = 0;
  for (const auto& p : data.test) longest = std::max(longest, p.tgt.size());
  std::vector<Grid> grids;
  for (const auto& p : data.test)
    if (p.tgt.size() == longest && static_cast<int64_t>(grids.size()) < r.integer("jacobian-sentences")) grids.push_back(decoder_jacobian(model, p));
  a.J = mean_grid(grids);
  a.js = jacobian_stats(grids);
  a.sentences = static_cast<int64_t>(grids.size());
  return a;
}

ValueMap jacobian_map(const Grid& J, const std::string& title) {
  ValueMap m;
  m.title = title;
  m.x_label = "input position t' (decoder input)";
  m.y_label = "logit position t";
  m.values = J;
  m.log_scale = true;
  m.value_label = "|d logit_t / d input_t'| (grey: exactly 0)";
  for (size_t i = 0; i < J.size(); ++i) {
    m.row_labels.push_back(std::to_string(i));
    m.col_labels.push_back(std::to_string(i));
  }
  return m;
}

// The two tables: teacher-forced against free-running, and the Jacobian statistics.
void print_tables(Report& r, const std::vector<Arm>& masked, const std::vector<Arm>& open) {
  r.section("teacher-forced against free-running, on held-out sequences");
  Table t("leak", {"seed", "mask", "train loss (last 20)", "TF nll", "TF acc", "free-running token acc", "free-running exact"});
  auto tail_mean = [](const std::vector<double>& v) {
    const size_t k = std::min<size_t>(20, v.size());
    double s = 0;
    for (size_t i = v.size() - k; i < v.size(); ++i) s += v[i];
    return s / static_cast<double>(k);
  };
  for (int i = 0; i < r.seeds(); ++i)
    for (const Arm* a : {&masked[i], &open[i]})
      t.row({static_cast<int64_t>(r.seed(i)), a == &masked[i] ? "causal" : "none", tail_mean(a->fit.losses), a->tf.nll, a->tf.accuracy, a->fr.tokens,
             a->fr.exact});
  r.print(t);
  r.say("TF: teacher-forced (the true prefix is the input); free-running: greedy, each step fed the model's own previous output.");

  r.section(fmt::format("Jacobian of the logits with respect to the decoder input, {} held-out sequences of the longest length", masked[0].sentences));
  Table tj("jacobian", {"seed", "mask", "positions", "entries above diagonal", "non-zero above", "largest above", "share above", "rows peaking at t+1",
                        "zero on/below"});
  for (int i = 0; i < r.seeds(); ++i)
    for (const Arm* a : {&masked[i], &open[i]})
      tj.row({static_cast<int64_t>(r.seed(i)), a == &masked[i] ? "causal" : "none", static_cast<int64_t>(a->J.size()), a->js.above,
              a->js.above_nonzero, a->js.above_max, a->js.above_share, a->js.next_argmax, a->js.lower_zero});
  r.print(tj);
  r.say("Entry (t, t'): || d logit_t / d input_t' ||_F by one backward per logit, for each sequence; entries above the diagonal: the t' > t");
  r.say("(later inputs) of every sequence; largest above: over them; the map in the figure is the mean over the sequences;");
  r.say("share above: their part of the sum of all entries; rows peaking at t+1: share of rows t whose largest entry apart from t' = t");
  r.say("(its own input, large through the residual path) is the next input, the one that holds logit_t's label in teacher forcing.");
}

// Raw numbers into the JSON, and the figure.
void add_figure(Report& r, const std::vector<Arm>& masked, const std::vector<Arm>& open) {
  auto& d = r.data();
  for (int i = 0; i < r.seeds(); ++i)
    for (const Arm* a : {&masked[i], &open[i]}) {
      const std::string key = a == &masked[i] ? "causal" : "none";
      d["runs"].push_back({{"seed", r.seed(i)},
                           {"mask", key},
                           {"losses", a->fit.losses},
                           {"tf_nll", a->tf.nll},
                           {"tf_accuracy", a->tf.accuracy},
                           {"free_running_tokens", a->fr.tokens},
                           {"free_running_exact", a->fr.exact},
                           {"probe_steps", a->curve_steps},
                           {"probe_tf_accuracy", a->curve_tf},
                           {"probe_free_running_accuracy", a->curve_fr},
                           {"jacobian", a->J}});
    }
  auto band = [&](const std::vector<Arm>& arms, const std::string& name, const std::string& color) {
    ChartSeries s{name, {}, {}, {}, {}, false, color};
    size_t n = arms[0].fit.losses.size();
    for (const auto& a : arms) n = std::min(n, a.fit.losses.size());
    for (size_t k = 0; k < n; ++k) {
      std::vector<double> v;  // per seed: the mean of the last 10 steps' losses (the raw curve is noisy)
      for (const auto& a : arms) {
        const size_t from = k >= 9 ? k - 9 : 0;
        double m = 0;
        for (size_t j = from; j <= k; ++j) m += a.fit.losses[j] / static_cast<double>(k - from + 1);
        v.push_back(m);
      }
      const Spread sp = spread(v);
      s.x.push_back(static_cast<double>(k + 1)), s.y.push_back(sp.mean), s.lo.push_back(sp.min), s.hi.push_back(sp.max);
    }
    return s;
  };
  std::vector<double> step_ticks;  // explicit ticks keep the step axis from 0
  for (int64_t k = 0; k <= r.integer("steps"); k += std::max<int64_t>(1, r.integer("steps") / 4)) step_ticks.push_back(static_cast<double>(k));
  r.add_panel(Chart{"training loss, mean of 10 steps (band: seeds)", "step", "cross-entropy", false, true,
                    {band(masked, "causal mask", "#1f77b4"), band(open, "no mask", "#d62728")}, step_ticks});
  auto curve = [&](const std::vector<Arm>& arms, bool free_running, const std::string& name, const std::string& color) {
    ChartSeries s{name, arms[0].curve_steps, {}, {}, {}, free_running, color};
    for (size_t k = 0; k < s.x.size(); ++k) {
      std::vector<double> v;
      for (const auto& a : arms) v.push_back((free_running ? a.curve_fr : a.curve_tf).at(k));
      const Spread sp = spread(v);
      s.y.push_back(sp.mean), s.lo.push_back(sp.min), s.hi.push_back(sp.max);
    }
    return s;
  };
  r.add_panel(Chart{"held-out token accuracy during training (band: seeds)", "step", "accuracy", false, false,
                    {curve(masked, false, "causal, teacher-forced", "#1f77b4"), curve(masked, true, "causal, free-running", "#1f77b4"),
                     curve(open, false, "no mask, teacher-forced", "#d62728"), curve(open, true, "no mask, free-running", "#d62728")},
                    step_ticks});
  r.add_panel(jacobian_map(masked[0].J, fmt::format("causal mask, seed {}: mean |d logit_t / d input_t'|", r.seed(0))));
  r.add_panel(jacobian_map(open[0].J, fmt::format("no mask, seed {}: mean |d logit_t / d input_t'|", r.seed(0))));
}

// The claims, from the numbers above (lab/claims.cpp's rows for leak).
void check_claims(Report& r, const std::vector<Arm>& masked, const std::vector<Arm>& open) {
  double broken = 0, open_zero = 0;  // exact checks: entries that break the property
  std::vector<double> reads, tf_gap, fr_ratio;  // per seed
  std::string ev_zero, ev_open;
  for (int i = 0; i < r.seeds(); ++i) {
    const Arm &m = masked[i], &o = open[i];
    broken += static_cast<double>(m.js.above_nonzero + m.js.lower_zero);
    open_zero += static_cast<double>(o.js.above - o.js.above_nonzero);
    reads.push_back(o.js.next_argmax);
    tf_gap.push_back(m.tf.nll - o.tf.nll);
    fr_ratio.push_back(m.fr.tokens > 0 ? o.fr.tokens / m.fr.tokens : NAN);
    const std::string sep = i ? "; " : "";
    ev_zero += fmt::format("{}seed {}: {} of {} above non-zero (largest {:g}), {} zero on/below", sep, r.seed(i), m.js.above_nonzero, m.js.above,
                           m.js.above_max, m.js.lower_zero);
    ev_open += fmt::format("{}seed {}: {} of {} non-zero, {:.0f}% of the mass", sep, r.seed(i), o.js.above_nonzero, o.js.above, 100 * o.js.above_share);
  }
  auto per_seed = [&](const std::vector<Arm>& arms, auto get) {
    std::vector<std::string> v;
    for (const auto& a : arms) v.push_back(fmt::format("{:.3f}", get(a)));
    return fmt::format("{}", fmt::join(v, ", "));
  };
  r.check("masked_future_zero", broken, ev_zero);
  r.check("open_future_nonzero", open_zero, ev_open);
  r.paper("reads_answer", reads,
          fmt::format("share of rows peaking at t+1 without the mask: {}; with it: {}", per_seed(open, [](const Arm& a) { return a.js.next_argmax; }),
                      per_seed(masked, [](const Arm& a) { return a.js.next_argmax; })));
  r.paper("tf_lower", tf_gap,
          fmt::format("held-out NLL without the mask {}; with it {}", per_seed(open, [](const Arm& a) { return a.tf.nll; }),
                      per_seed(masked, [](const Arm& a) { return a.tf.nll; })));
  r.paper("fr_collapses", fr_ratio,
          fmt::format("free-running token accuracy without the mask {}; with it {}", per_seed(open, [](const Arm& a) { return a.fr.tokens; }),
                      per_seed(masked, [](const Arm& a) { return a.fr.tokens; })));
}

// --control: the placebo. A pool of masked models, each on its own seed; every claim's statistic
// between two groups of them (one group in the masked arm's place, the other in the open arm's).
void placebo(Report& r, const std::string& task) {
  r.say(fmt::format("PLACEBO: {} masked models on seeds {}-{}; each claim compares two groups of them, unpaired.", r.placebo_pool(), r.seed(0),
                    r.seed(r.placebo_pool() - 1)));
  std::vector<Arm> pool;
  for (int i = 0; i < r.placebo_pool(); ++i) {
    IdData data = synthetic_task(task, r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("train"),
                                 r.integer("eval"), r.seed(i));
    pool.push_back(train_arm(r, data, true, r.seed(i)));
  }
  Table t("the pool: masked models", {"seed", "rows peaking at t+1", "held-out NLL", "free-running token accuracy"});
  for (int i = 0; i < r.placebo_pool(); ++i) t.row({static_cast<int64_t>(r.seed(i)), pool[i].js.next_argmax, pool[i].tf.nll, pool[i].fr.tokens});
  r.print(t);
  r.no_placebo("reads_answer", "one arm's share against 0.5, no contrast between arms");
  r.placebo("tf_lower", [&](int a, int b) { return pool[a].tf.nll - pool[b].tf.nll; }, "masked model a as 'masked', b as 'no mask'");
  r.placebo("fr_collapses", [&](int a, int b) { return pool[a].fr.tokens > 0 ? pool[b].fr.tokens / pool[a].fr.tokens : NAN; },
            "masked model a as 'masked', b as 'no mask'");
}

void run(Report& r) {
  const std::string task = r.text("task");
  r.say(fmt::format("task {} over {} symbols, lengths {}-{}; Pre-LN, d_model {}, {} heads, {} layers; {} steps of Adam at lr {} "
                    "(warm-up {}), {} tokens a batch; {} seeds",
                    task, r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("d-model"), r.integer("heads"),
                    r.integer("layers"), r.integer("steps"), r.real("lr"), r.integer("steps") / 10, r.integer("max-tokens"), r.seeds()));
  r.say("Each seed: one data set, one initialisation, one batch order, trained twice: with the causal mask and without it.");
  if (r.placebo_mode()) return placebo(r, task);

  std::vector<Arm> masked, open;
  for (int i = 0; i < r.seeds(); ++i) {
    IdData data = synthetic_task(task, r.integer("symbols"), r.integer("min-len"), r.integer("max-len"), r.integer("train"),
                                 r.integer("eval"), r.seed(i));
    masked.push_back(train_arm(r, data, true, r.seed(i)));
    open.push_back(train_arm(r, data, false, r.seed(i)));
  }

  print_tables(r, masked, open);
  add_figure(r, masked, open);
  check_claims(r, masked, open);
}

}  // namespace

Lab leak_lab() {
  Lab l;
  l.name = "leak";
  l.title = "the causal mask: without it the decoder copies the answer";
  l.reference = "the course: the decoder's self-attention must not see later positions";
  l.question = "Trained without the causal mask, does the decoder look better teacher-forced and fail free-running, and is the "
               "masked decoder's dependence on later inputs exactly zero?";
  l.control = "placebo: two groups of seeds of the masked model";
  l.placebo = true;
  l.default_seeds = 5;
  l.options = task_options();
  l.options.insert(l.options.end(), {{"jacobian-sentences", Option::Int, "8", "held-out sequences of the longest length whose Jacobian is taken"},
                                     {"d-model", Option::Int, "32", "model width (feed-forward 4x)"},
                                     {"heads", Option::Int, "2", "attention heads"},
                                     {"layers", Option::Int, "2", "encoder and decoder layers each"},
                                     {"steps", Option::Int, "400", "training steps per arm"},
                                     {"eval-every", Option::Int, "50", "steps between accuracy probes on 50 held-out sequences"},
                                     {"lr", Option::Real, "0.002", "Adam learning rate (10% linear warm-up)"},
                                     {"max-tokens", Option::Int, "1024", "padded tokens per batch"}});
  l.run = run;
  return l;
}

}  // namespace gf::lab

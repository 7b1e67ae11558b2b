// Lab `nan`: a fully masked attention row.
//
// A source sentence that is empty in a batch is all PAD: with the source padding mask every key of
// its encoder self-attention rows and of its cross-attention rows is blocked, every score -inf. A
// softmax written as exp(s - max s) / sum computes (-inf) - (-inf) = NaN there; the NaN reaches
// the loss (a mean over the batch) and, through backward, the gradient of every weight the row
// passes through. No learning rate fixes that: the NaN is in the forward pass, before any update.
// gradflow's softmax gives a fully masked row zero weights with a zero gradient; the course's
// advice is to check the masks (find the row whose every key is masked) rather than the learning rate.
//
// Here: a small translator on the built-in corpus, one batch with an empty source added (lab/nan.h):
// the NaN count of every parameter's gradient with the naive softmax (arm "naive") and with
// gradflow's ("guarded"), anomaly mode's report of the first op that made a NaN ("anomaly"), all
// three on the seed's one model with its softmax switched between them; and a few training steps
// at lr, lr/10 and lr/100 (the levels) with the naive softmax ("train:naive"), against the same
// steps with the fully masked row dropped ("train:naive, drop masked rows") or the guarded softmax
// ("train:guarded"). Every claim is an exact check: the lab has no control.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "lab/nan.h"
#include "lab/runner.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

struct Settings {
  int64_t pairs = 2000, d_model = 32, layers = 2, batch = 8, steps = 6;
  double lr = 0.001;
};

Fields<Settings> fields() {
  using S = Settings;
  return {{"pairs", &S::pairs, "pairs of the built-in corpus (90% train)"},
          {"d-model", &S::d_model, "model width (feed-forward 2x)"},
          {"layers", &S::layers, "encoder and decoder layers each"},
          {"batch", &S::batch, "rows of the batch with the empty source (it included)"},
          {"steps", &S::steps, "training steps per run; the empty source is in step 2's batch"},
          {"lr", &S::lr, "the highest learning rate (then /10 and /100)"}};
}

void validate(const Settings& s) {
  GF_CHECK(s.batch >= 2, "lab nan: --batch must be at least 2 (a real row and the empty source), got {}", s.batch);
  GF_CHECK(s.steps >= 2, "lab nan: --steps must be at least 2 (the empty source is in step 2's batch), got {}", s.steps);
  GF_CHECK(s.lr > 0, "lab nan: --lr must be above 0, got {}", s.lr);
}

const char* const kTrained[] = {"train:naive", "train:naive, drop masked rows", "train:guarded"};

// The learning rates, lr / 100, lr / 10, lr (as the levels, increasing); tables list them from lr down.
std::vector<double> rates(const Settings& s) { return {s.lr * 0.01, s.lr * 0.1, s.lr * 1.0}; }

std::vector<ArmSpec> arms(const Settings& s) {
  std::vector<ArmSpec> a{{"naive", {}}, {"anomaly", {}}, {"guarded", {}}};
  for (const char* t : kTrained) a.push_back({t, rates(s)});
  return a;
}

// One run: one step of the batch (naive, guarded), anomaly mode's error (anomaly), or a few
// training steps (train:*).
struct Measured {
  uint64_t seed = 0;
  OneStep step;
  std::string anomaly;
  int64_t anomaly_row = -1;  // the batch row of the element anomaly mode names
  NanRun run;
};
void to_json(nlohmann::json& j, const Measured& m) {
  if (!m.step.nan_grads.empty()) {
    nlohmann::json g;
    for (const auto& [name, c] : m.step.nan_grads) g[name] = c;
    j = {{"loss", std::isfinite(m.step.loss) ? nlohmann::json(m.step.loss) : nlohmann::json(nullptr)}, {"nan_gradients", g},
         {"nan_logit_rows", m.step.nan_logit_rows}};
  } else if (!m.anomaly.empty()) {
    j = {{"anomaly", m.anomaly}, {"row", m.anomaly_row}};
  } else {
    nlohmann::json losses = nlohmann::json::array();  // JSON has no NaN: null
    for (double l : m.run.losses) losses.push_back(std::isfinite(l) ? nlohmann::json(l) : nlohmann::json(nullptr));
    j = {{"losses", losses}, {"nan_params_after", m.run.nan_params}};
  }
}

// The corpus with one pair of an empty source added, and the seed's one model of the batch arms.
struct Context {
  IdData data;
  std::vector<train::EncodedPair> pairs;
  std::shared_ptr<nn::Seq2SeqTransformer> model;
  uint64_t model_seed = 0;
};

nn::Seq2SeqOptions shape(const Settings& s, const IdData& data) { return small_model(data, s.d_model, 2, s.layers, 2 * s.d_model, false); }

Context prepare(const Settings& s, Report& r) {
  Context c;
  c.data = builtin_corpus(s.pairs);
  c.pairs = c.data.train;
  c.pairs.push_back({std::vector<int64_t>{}, c.data.train.front().tgt});  // an empty source sentence with a real target
  r.say(fmt::format("built-in corpus, {} training pairs plus one with an empty source; Post-LN, d_model {}, 2 heads, {} layers, float32; "
                    "{} seeds (initialisation and batches)",
                    c.data.train.size(), s.d_model, s.layers, r.seeds()));
  return c;
}

Measured measure(const Settings& s, Context& c, const RunKey& k) {
  Measured m{.seed = k.seed};
  if (k.cond.arm.starts_with("train:")) {
    const bool naive = k.cond.arm != "train:guarded", drop = k.cond.arm.ends_with("drop masked rows");
    m.run = train_steps(shape(s, c.data), c.pairs, step_batches(c.data.train.size(), s.steps, s.batch, k.seed), k.seed, naive, drop, k.cond.level);
    return m;
  }
  if (!c.model || c.model_seed != k.seed) c.model = std::make_shared<nn::Seq2SeqTransformer>(shape(s, c.data), k.seed), c.model_seed = k.seed;
  nn::Seq2SeqTransformer& model = *c.model;
  const train::Batch b = train::collate(c.pairs, step_batches(c.data.train.size(), 2, s.batch, k.seed)[1]);  // ends with the empty source
  set_naive_softmax(model, k.cond.arm != "guarded");
  if (k.cond.arm != "anomaly") {
    m.step = one_step(model, b, b.rows - 1);
    return m;
  }
  AnomalyGuard guard;
  try {
    train::batch_loss(model, train::to_tensors(b), 0.0).backward();
    m.anomaly = "(no error)";
  } catch (const std::runtime_error& e) {
    m.anomaly = e.what();
  }
  m.anomaly_row = element_row(m.anomaly, b);
  model.zero_grad();
  return m;
}

// ---------------------------------------------------------------- tables and figures

int64_t nan_params(const OneStep& o) {
  int64_t n = 0;
  for (const auto& [name, c] : o.nan_grads) n += c > 0;
  return n;
}

// The training runs of one seed, in the tables' order: each arm at lr, lr/10, lr/100.
struct RunRow {
  const char *softmax, *fix;
  double lr;
  const NanRun* run;
};
std::vector<RunRow> run_rows(const Settings& s, const Grid<Measured>& g, int seed) {
  std::vector<RunRow> out;
  const std::vector<double> lr = rates(s);
  for (const char* arm : kTrained)
    for (auto it = lr.rbegin(); it != lr.rend(); ++it)
      out.push_back({std::string(arm) == "train:guarded" ? "guarded" : "naive", std::string(arm).ends_with("rows") ? "drop masked rows" : "none", *it,
                     &g.at(arm, *it, seed).run});
  return out;
}

void describe_batch(const Settings& s, const Grid<Measured>& g, Report& r) {
  const OneStep &naive0 = g.at("naive", 0, 0).step, &guarded0 = g.at("guarded", 0, 0).step;
  r.section(fmt::format("1. one batch of {} rows, the last with an empty source: NaN entries of each parameter's gradient (seed {})", s.batch,
                        g.at("naive", 0, 0).seed));
  Table t1("nan_gradients", {"parameter", "entries", "NaN, naive softmax", "NaN, guarded softmax"});
  for (size_t k = 0; k < naive0.nan_grads.size(); ++k)
    t1.row({naive0.nan_grads[k].first, naive0.sizes[k], naive0.nan_grads[k].second, guarded0.nan_grads[k].second});
  r.print(t1);
  Table t1b("nan_summary", {"seed", "softmax", "loss", "rows with NaN logits", "parameters with NaN gradient", "NaN weights, empty row",
                            "largest weight, empty row", "other rows: |row sum - 1|"});
  for (int i = 0; i < g.seeds(); ++i)
    for (const char* arm : {"naive", "guarded"}) {
      const Measured& m = g.at(arm, 0, i);
      const OneStep& o = m.step;
      t1b.row({static_cast<int64_t>(m.seed), arm, o.loss, o.nan_logit_rows, fmt::format("{} of {}", nan_params(o), o.nan_grads.size()),
               o.empty_row_weights_nan, o.empty_row_weights_max, o.other_rows_weight_sum_err});
    }
  r.print(t1b);
  r.say("weights: encoder layer 0's self-attention map of the empty source's row (every key PAD), and of the other rows.");
  r.section("2. anomaly mode (AnomalyGuard) on the naive softmax: the error it raises");
  for (const Measured* m : g.of("anomaly")) r.say(fmt::format("seed {}: {}", m->seed, m->anomaly));
  // NaN share of the gradient, by module (the parameter name without its last part).
  ValueMap mods{fmt::format("share of NaN gradient entries by module (seed {})", g.at("naive", 0, 0).seed), "softmax", "module", {}, {"naive", "guarded"},
                {}, false, "NaN share"};
  std::vector<std::string> groups;
  std::map<std::string, std::array<double, 3>> acc;  // naive NaN, guarded NaN, entries
  for (size_t k = 0; k < naive0.nan_grads.size(); ++k) {
    std::string name = naive0.nan_grads[k].first;
    name = name.substr(0, name.rfind('.'));
    for (auto [from, to] : {std::pair<std::string, std::string>{"transformer.", ""}, {"encoder.layers.", "enc."}, {"decoder.layers.", "dec."},
                            {".out_proj", ""}, {"linear1", "ffn"}, {"linear2", "ffn"}, {"norm1", "norms"}, {"norm2", "norms"}, {"norm3", "norms"}})
      if (auto at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
    if (!acc.count(name)) groups.push_back(name);
    acc[name][0] += static_cast<double>(naive0.nan_grads[k].second);
    acc[name][1] += static_cast<double>(guarded0.nan_grads[k].second);
    acc[name][2] += static_cast<double>(naive0.sizes[k]);
  }
  for (const auto& name : groups) mods.row_labels.push_back(name), mods.values.push_back({acc[name][0] / acc[name][2], acc[name][1] / acc[name][2]});
  r.add_panel(mods);
}

void describe(const Settings& s, const Context&, const Grid<Measured>& g, Report& r) {
  describe_batch(s, g, r);
  r.section(fmt::format("3. {} Adam steps (the empty source in step 2's batch): loss per step, NaN parameter entries after", s.steps));
  std::vector<std::string> cols{"seed", "softmax", "fix", "lr"};
  for (int64_t k = 1; k <= s.steps; ++k) cols.push_back(fmt::format("loss {}", k));
  cols.push_back("NaN params after");
  Table t3("lr_vs_masks", cols);
  for (int i = 0; i < g.seeds(); ++i)
    for (const RunRow& x : run_rows(s, g, i)) {
      std::vector<Cell> row{static_cast<int64_t>(g.at("naive", 0, i).seed), x.softmax, x.fix, fmt::format("{:g}", x.lr)};
      for (double l : x.run->losses) row.push_back(l);
      row.push_back(x.run->nan_params);
      t3.row(row);
    }
  r.print(t3);
  r.say("naive: exp(s - max) / sum written from ops; guarded: gradflow's softmax (a fully masked row gets zeros); drop masked rows:");
  r.say("before each step, rows whose every source key is PAD (found from the padding mask) are left out of the batch.");
  ValueMap m{fmt::format("loss per step, seed {} (grey: NaN)", g.at("naive", 0, 0).seed), "step (the empty source in step 2)", "", {}, {}, {}, false, "loss"};
  for (const RunRow& x : run_rows(s, g, 0)) {
    m.row_labels.push_back(fmt::format("{}{}, lr {:g}", x.softmax, std::string(x.fix) == "none" ? "" : ", drop", x.lr));
    m.values.push_back(x.run->losses);
  }
  for (int64_t k = 1; k <= s.steps; ++k) m.col_labels.push_back(std::to_string(k));
  r.add_panel(m);
}

// ---------------------------------------------------------------- claims

// One seed's one-step numbers with the naive softmax: its weight matrices, and how many have NaN.
struct NanReach {
  int64_t matrices = 0, nan_matrices = 0, tensors_nan = 0, entries = 0, nan_entries = 0;
};
NanReach reach_of(const OneStep& n) {
  NanReach x;
  for (size_t k = 0; k < n.nan_grads.size(); ++k) {
    const std::string& name = n.nan_grads[k].first;
    const bool matrix = name.find("emb") == std::string::npos && name.size() > 7 && name.substr(name.size() - 7) == ".weight" &&
                        name.find("norm") == std::string::npos;  // in_proj, out_proj, linear1, linear2, out
    x.matrices += matrix, x.nan_matrices += matrix && n.nan_grads[k].second > 0, x.tensors_nan += n.nan_grads[k].second > 0;
    x.entries += n.sizes[k], x.nan_entries += n.nan_grads[k].second;
  }
  return x;
}

std::string spread_text(const Grid<Measured>& g) {
  std::string ev;
  for (const Measured* m : g.of("naive")) {
    const NanReach x = reach_of(m->step);
    ev += fmt::format("{}seed {}: loss {}, {} row(s) of logits NaN, {} of {} weight matrices and {} of {} tensors with NaN gradient", ev.empty() ? "" : "; ",
                      m->seed, m->step.loss, m->step.nan_logit_rows, x.nan_matrices, x.matrices, x.tensors_nan, m->step.nan_grads.size());
  }
  return ev;
}

bool guarded_ok(const OneStep& g) {
  int64_t g_nan = 0;
  for (const auto& [name, c] : g.nan_grads) g_nan += c;
  return std::isfinite(g.loss) && g_nan == 0 && g.nan_logit_rows == 0 && g.empty_row_weights_nan == 0 && g.empty_row_weights_max == 0.0 &&
         g.other_rows_weight_sum_err < 1e-5;
}

// NaN from the step with the empty source (step 2) on, whatever the learning rate.
bool nan_from_step_2(const NanRun& run) {
  bool nan = std::isfinite(run.losses[0]) && run.nan_params > 0;
  for (size_t j = 1; j < run.losses.size(); ++j) nan = nan && std::isnan(run.losses[j]);
  return nan;
}

std::vector<ClaimDef<Measured>> claims(const Settings& s) {
  using G = Grid<Measured>;
  auto check = [](const char* id, const char* statement, Compare side, double threshold, const char* source) {
    return ClaimSpec{.id = id, .kind = ClaimKind::Check, .statement = statement, .side = side, .threshold = threshold, .source = source, .control_targets = false};
  };
  return {
      {.spec = check("naive_nan_spreads",
                     "a naive softmax turns one fully masked row into NaN through the whole model: the share of parameter entries whose gradient "
                     "is NaN is above 0.5",
                     Compare::Above, 0.5,
                     "the course (NaN from a fully masked row reaches every weight); 0.5: most of the model. It can fail: backward need not carry "
                     "a NaN everywhere (a ReLU passes nothing where its input is NaN: linear1.bias stays finite). A check, not evidence: the "
                     "share is the same on every seed (0.656), fixed by which parameters the NaN reaches, not by chance (issue 35)"),
       .per_seed = [](const SeedView<Measured>& v) {
         const NanReach x = reach_of(v("naive").step);
         return static_cast<double>(x.nan_entries) / static_cast<double>(x.entries);
       },
       .evidence = [](const G& g, const std::vector<double>& share) { return fmt::format("share per seed: {:.3f}; {}", fmt::join(share, ", "), spread_text(g)); }},
      {.spec = check("naive_nan_every_matrix",
                     "with the naive softmax the loss is NaN, one batch row of logits is NaN, and every weight matrix's gradient has NaN (count "
                     "of seeds where not)",
                     Compare::Below, 0.5, "exp(-inf - (-inf)) is NaN, and NaN times anything is NaN along every path from that row"),
       .joint = [](const G& g) {
         double n = 0;
         for (const Measured* m : g.of("naive"))
           n += !(std::isnan(m->step.loss) && m->step.nan_logit_rows == 1 && reach_of(m->step).nan_matrices == reach_of(m->step).matrices);
         return n;
       },
       .evidence = [](const G& g, const auto&) { return spread_text(g); }},
      {.spec = check("anomaly_names_first_op",
                     "anomaly mode stops at the first op that made a NaN: in the forward pass, in the first encoder layer, at the empty source's "
                     "row (count of seeds where not)",
                     Compare::Below, 0.5, "AnomalyGuard checks each op's output as it is made"),
       .joint = [rows = s.batch](const G& g) {
         double n = 0;
         for (const Measured* m : g.of("anomaly"))
           n += !(m->anomaly.rfind("anomaly: forward of", 0) == 0 && m->anomaly.find("encoder.layers.0") != std::string::npos && m->anomaly_row == rows - 1);
         return n;
       },
       .evidence = [rows = s.batch](const G& g, const auto&) {
         const Measured& m = g.at("anomaly", 0, 0);
         return fmt::format("seed {}: row {} of {}: {}", m.seed, m.anomaly_row, rows, m.anomaly);
       }},
      {.spec = check("guarded_zero_row",
                     "gradflow's guarded softmax gives that row zero weights and everything finite, the other rows summing to 1 within 1e-5 "
                     "(count of seeds where not)",
                     Compare::Below, 0.5, "gradflow's softmax defines a row of -inf scores as zeros"),
       .joint = [](const G& g) {
         double n = 0;
         for (const Measured* m : g.of("guarded")) n += !guarded_ok(m->step);
         return n;
       },
       .evidence = [](const G& g, const auto&) {
         std::string ev;
         for (const Measured* m : g.of("guarded")) {
           int64_t g_nan = 0;
           for (const auto& [name, c] : m->step.nan_grads) g_nan += c;
           ev += fmt::format("{}seed {}: loss {:.4f}, {} NaN gradient entries, empty row's weights at most {:g}, other rows sum to 1 within {:.1g}",
                             ev.empty() ? "" : "; ", m->seed, m->step.loss, g_nan, m->step.empty_row_weights_max, m->step.other_rows_weight_sum_err);
         }
         return ev;
       }},
      {.spec = check("lr_cannot_help",
                     "a lower learning rate cannot help: at lr, lr/10 and lr/100 the loss is NaN from the step with the empty source on (count of "
                     "runs where not)",
                     Compare::Below, 0.5,
                     "the NaN is made in that step's forward pass, before any update the learning rate scales: a property of the protocol, not "
                     "evidence"),
       .joint = [s](const G& g) {
         double n = 0;
         for (int i = 0; i < g.seeds(); ++i)
           for (const RunRow& x : run_rows(s, g, i)) n += std::string(x.softmax) == "naive" && std::string(x.fix) == "none" && !nan_from_step_2(*x.run);
         return n;
       },
       .evidence = [s](const G& g, const auto&) {
         std::string ev;
         for (int i = 0; i < g.seeds(); ++i) {
           ev += fmt::format("{}seed {}: ", i ? "; " : "", g.at("naive", 0, i).seed);
           const std::vector<RunRow> rows = run_rows(s, g, i);
           for (size_t k = 0; k < 3; ++k)
             ev += fmt::format("{}lr {:g}: {:.3f}, {}, ... ({} NaN parameters after)", k ? ", " : "", rows[k].lr, rows[k].run->losses[0],
                               rows[k].run->losses[1], rows[k].run->nan_params);
         }
         return ev;
       }},
      {.spec = check("masks_fix",
                     "checking the masks does: dropping the fully masked row, or the guarded softmax, keeps every loss and parameter finite at "
                     "every learning rate (count of runs where not)",
                     Compare::Below, 0.5, "both remove the row of -inf scores before the softmax"),
       .joint = [s](const G& g) {
         double n = 0;
         for (int i = 0; i < g.seeds(); ++i)
           for (const RunRow& x : run_rows(s, g, i)) n += !(std::string(x.softmax) == "naive" && std::string(x.fix) == "none") && !x.run->finite();
         return n;
       },
       .evidence = [s](const G& g, const auto&) {
         std::string ev;
         for (int i = 0; i < g.seeds(); ++i) {
           ev += fmt::format("{}seed {}: last losses", i ? "; " : "", g.at("naive", 0, i).seed);
           const std::vector<RunRow> rows = run_rows(s, g, i);
           for (size_t k = 3; k < rows.size(); ++k) ev += fmt::format(" {:.3f}{}", rows[k].run->losses.back(), rows[k].run->nan_params ? " (NaN parameters)" : "");
         }
         return ev + " (drop at lr, lr/10, lr/100, then guarded)";
       }},
  };
}

}  // namespace

Lab nan_lab() {
  return make_lab(Experiment<Settings, Context, Measured>{
      .info = {.name = "nan",
               .title = "a fully masked attention row",
               .reference = "the course: NaN from a fully masked row; check the masks, not the learning rate",
               .question = "What does a row whose every key is masked do to the loss and the gradients with a naive softmax and with a "
                           "guarded one, and does a lower learning rate help?",
               .default_seeds = 5},
      .settings = fields(),
      .validate = validate,
      .arms = arms,
      .prepare = prepare,
      .measure = measure,
      .claims = claims,
      .describe = describe});
}

}  // namespace gf::lab

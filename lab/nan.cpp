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
// Here: a small translator on the built-in corpus, one batch with an empty source added: the NaN
// count of every parameter's gradient with the naive softmax and with gradflow's, anomaly mode's
// report of the first op that made a NaN, and a few training steps at lr, lr/10 and lr/100 with the
// naive softmax, against the same steps with the fully masked row dropped, or the guarded softmax.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/labs.h"
#include "lab/report.h"
#include "nn/masks.h"
#include "optim/adam.h"
#include "train/run/batch_loss.h"

namespace gf::lab {
namespace {

void set_naive(const nn::Seq2SeqTransformer& model, bool naive) {
  for (auto* a : attention_modules(model)) a->naive_softmax = naive;
}

// Rows of a batch whose every source key is PAD: their encoder self-attention and cross-attention
// rows are fully masked. This is the check the course recommends.
std::vector<int64_t> fully_masked_rows(const train::Batch& b) {
  Tensor blocked = nn::make_pad_mask(Tensor::from_vector(b.src, {b.rows, b.src_len}), train::Vocab::kPad);  // (B, S)
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < b.rows; ++r) {
    bool all = true;
    for (int64_t s = 0; s < b.src_len; ++s) all = all && blocked.flat_get(r * b.src_len + s) != 0;
    if (all) rows.push_back(r);
  }
  return rows;
}

// Anomaly mode's report ends "... at element N of its output (B, ...)": the batch row of element N
// (-1 when the report does not have that form).
int64_t element_row(const std::string& report, const train::Batch& b) {
  const size_t at = report.find("at element "), shape = report.find("of its output (");
  if (at == std::string::npos || shape == std::string::npos) return -1;
  const int64_t element = std::stoll(report.substr(at + 11));
  int64_t per_row = 1;  // product of the output's dims after the first
  std::string dims = report.substr(shape + 15);
  dims = dims.substr(0, dims.find(')'));
  size_t comma = dims.find(',');
  if (std::stoll(dims.substr(0, comma)) != b.rows) return -1;
  while (comma != std::string::npos) {
    dims = dims.substr(comma + 1);
    comma = dims.find(',');
    per_row *= std::stoll(dims.substr(0, comma));
  }
  return element / per_row;
}

// ---------------------------------------------------------------- one step, tensor by tensor

struct OneStep {
  double loss = 0;
  std::vector<std::pair<std::string, int64_t>> nan_grads;  // per parameter name: NaN entries of its gradient
  std::vector<int64_t> sizes;                              // entries of each parameter
  int64_t nan_logit_rows = 0;                              // batch rows with a NaN logit
  int64_t empty_row_weights_nan = 0;                       // NaN entries in the empty row's first encoder attention map
  double empty_row_weights_max = 0;                        // largest weight there (guarded: 0)
  double other_rows_weight_sum_err = 0;                    // other rows: largest |sum of a weight row - 1|
};

OneStep one_step(nn::Seq2SeqTransformer& model, const train::Batch& b, int64_t empty_row) {
  OneStep o;
  nn::MultiheadAttention* first = attention_modules(model).front();  // encoder layer 0 self-attention
  Tensor w0;                                                          // (B, H, S, S)
  first->weights_observer = [&w0](const Variable& w) { w0 = w.data(); };
  train::BatchTensors t = train::to_tensors(b);
  Variable logits = model.forward(t.src, t.tgt_in);  // (B, T, V)
  first->weights_observer = nullptr;
  Variable loss = train::batch_loss(model, t, 0.0);  // () the same forward again, as the trainer computes it
  model.zero_grad();
  loss.backward();
  o.loss = loss.item();
  for (const auto& [name, p] : model.named_parameters()) {
    o.nan_grads.push_back({name, count_nonfinite(p.grad())});
    o.sizes.push_back(p.numel());
  }
  const Tensor lg = logits.data();  // (B, T, V)
  for (int64_t r = 0; r < lg.size(0); ++r) o.nan_logit_rows += count_nonfinite(lg.select(0, r)) > 0;
  const Tensor er = w0.select(0, empty_row);  // (H, S, S)
  o.empty_row_weights_nan = count_nonfinite(er);
  o.empty_row_weights_max = max_abs(er);
  const int64_t S = w0.size(3);
  const Tensor wc = w0.contiguous();  // (B, H, S, S)
  for (int64_t i = 0; i < wc.numel() / S; ++i) {
    if (i / (w0.size(1) * w0.size(2)) == empty_row) continue;
    double sum = 0;
    for (int64_t s = 0; s < S; ++s) sum += wc.flat_get(i * S + s);
    // A real query row of a padded sentence sums to 1; a PAD query row of another sentence too.
    o.other_rows_weight_sum_err = std::max(o.other_rows_weight_sum_err, std::abs(sum - 1));
  }
  model.zero_grad();
  return o;
}

// ---------------------------------------------------------------- a few training steps

struct Run {
  std::string softmax, data, lr;
  std::vector<double> losses;
  int64_t nan_params = 0;  // parameter entries that are NaN after the last step
  bool finite() const {
    return nan_params == 0 && std::all_of(losses.begin(), losses.end(), [](double l) { return std::isfinite(l); });
  }
};

// Adam on the given batches, one step each, updating whatever the gradient is (as a plain loop
// does: no skipping of non-finite steps). drop_masked_rows: the fix, rows whose every source key
// is PAD are found from the mask and left out.
Run train_steps(const IdData& data, const std::vector<train::EncodedPair>& pairs, const std::vector<std::vector<size_t>>& steps, Report& r,
                uint64_t seed, bool naive, bool drop_masked_rows, double lr) {
  nn::Seq2SeqTransformer model(small_model(data, r.integer("d-model"), 2, r.integer("layers"), 2 * r.integer("d-model"), false), seed);
  set_naive(model, naive);
  optim::Adam adam(model.named_parameters(), {.lr = lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  Run run;
  for (const auto& rows : steps) {
    train::Batch b = train::collate(pairs, rows);
    if (drop_masked_rows) {
      const std::vector<int64_t> bad = fully_masked_rows(b);
      std::vector<size_t> keep;
      for (int64_t row = 0; row < b.rows; ++row)
        if (std::find(bad.begin(), bad.end(), row) == bad.end()) keep.push_back(rows[static_cast<size_t>(row)]);
      b = train::collate(pairs, keep);
    }
    Variable loss = train::batch_loss(model, train::to_tensors(b), 0.0);  // ()
    adam.zero_grad();
    loss.backward();
    adam.step();
    run.losses.push_back(loss.item());
  }
  for (const auto& p : model.parameters()) run.nan_params += count_nonfinite(p.data());
  return run;
}

// The batches of one run: `steps` batches of `rows` random training pairs; step 2's last row is
// the pair with the empty source (index pairs.size() - 1).
std::vector<std::vector<size_t>> step_batches(size_t n_train, int64_t steps, int64_t rows, uint64_t seed) {
  std::vector<size_t> order(n_train);
  std::iota(order.begin(), order.end(), 0);
  train::seeded_shuffle(order, seed);
  std::vector<std::vector<size_t>> out;
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<size_t> b;
    for (int64_t j = 0; j < rows; ++j) b.push_back(order[static_cast<size_t>((k * rows + j)) % n_train]);
    if (k == 1) b.back() = n_train;  // the empty source
    out.push_back(b);
  }
  return out;
}

// Everything the lab measures, filled section by section, then drawn and checked.
struct Results {
  std::vector<OneStep> naive, guarded;  // per seed
  std::vector<std::string> anomaly;     // per seed: anomaly mode's error
  std::vector<int64_t> anomaly_row;     // per seed: the batch row of the element it names
  std::vector<Run> runs;                // per seed: naive, naive + drop, guarded, each at lr, lr/10, lr/100
  size_t per_seed() const { return runs.size() / std::max<size_t>(1, naive.size()); }
};

// Sections 1 and 2: one batch with the empty source, naive softmax (also under anomaly mode) and guarded.
void one_batch(Report& r, const IdData& data, const std::vector<train::EncodedPair>& pairs, Results& res) {
  const int64_t D = r.integer("d-model"), L = r.integer("layers"), rows = r.integer("batch");
  for (int i = 0; i < r.seeds(); ++i) {
    std::vector<size_t> idx = step_batches(data.train.size(), 2, rows, r.seed(i))[1];  // ends with the empty source
    const train::Batch b = train::collate(pairs, idx);
    nn::Seq2SeqTransformer model(small_model(data, D, 2, L, 2 * D, false), r.seed(i));
    set_naive(model, true);
    res.naive.push_back(one_step(model, b, b.rows - 1));
    {
      AnomalyGuard guard;
      try {
        train::batch_loss(model, train::to_tensors(b), 0.0).backward();
        res.anomaly.push_back("(no error)");
      } catch (const std::runtime_error& e) {
        res.anomaly.push_back(e.what());
      }
      res.anomaly_row.push_back(element_row(res.anomaly.back(), b));
      model.zero_grad();
    }
    set_naive(model, false);
    res.guarded.push_back(one_step(model, b, b.rows - 1));
  }

  r.section(fmt::format("1. one batch of {} rows, the last with an empty source: NaN entries of each parameter's gradient (seed {})", rows,
                        r.seed(0)));
  Table t1("nan_gradients", {"parameter", "entries", "NaN, naive softmax", "NaN, guarded softmax"});
  for (size_t k = 0; k < res.naive[0].nan_grads.size(); ++k)
    t1.row({res.naive[0].nan_grads[k].first, res.naive[0].sizes[k], res.naive[0].nan_grads[k].second, res.guarded[0].nan_grads[k].second});
  r.print(t1);
  Table t1b("nan_summary", {"seed", "softmax", "loss", "rows with NaN logits", "parameters with NaN gradient", "NaN weights, empty row",
                            "largest weight, empty row", "other rows: |row sum - 1|"});
  auto nan_params = [](const OneStep& o) {
    int64_t n = 0;
    for (const auto& [name, c] : o.nan_grads) n += c > 0;
    return n;
  };
  for (int i = 0; i < r.seeds(); ++i)
    for (const OneStep* o : {&res.naive[i], &res.guarded[i]})
      t1b.row({static_cast<int64_t>(r.seed(i)), o == &res.naive[i] ? "naive" : "guarded", o->loss, o->nan_logit_rows,
               fmt::format("{} of {}", nan_params(*o), o->nan_grads.size()), o->empty_row_weights_nan, o->empty_row_weights_max,
               o->other_rows_weight_sum_err});
  r.print(t1b);
  r.say("weights: encoder layer 0's self-attention map of the empty source's row (every key PAD), and of the other rows.");

  r.section("2. anomaly mode (AnomalyGuard) on the naive softmax: the error it raises");
  for (int i = 0; i < r.seeds(); ++i) r.say(fmt::format("seed {}: {}", r.seed(i), res.anomaly[static_cast<size_t>(i)]));
}

// Section 3: a few Adam steps at three learning rates with the naive softmax, and with the two fixes.
void lr_runs(Report& r, const IdData& data, const std::vector<train::EncodedPair>& pairs, Results& res) {
  const int64_t rows = r.integer("batch");
  r.section(fmt::format("3. {} Adam steps (the empty source in step 2's batch): loss per step, NaN parameter entries after", r.integer("steps")));
  const double lr = r.real("lr");
  for (int i = 0; i < r.seeds(); ++i) {
    const auto steps = step_batches(data.train.size(), r.integer("steps"), rows, r.seed(i));
    struct Arm {
      const char *softmax, *fix;
      bool naive, drop;
    };
    for (const Arm arm : {Arm{"naive", "none", true, false}, Arm{"naive", "drop masked rows", true, true}, Arm{"guarded", "none", false, false}})
      for (double f : {1.0, 0.1, 0.01}) {
        Run run = train_steps(data, pairs, steps, r, r.seed(i), arm.naive, arm.drop, lr * f);
        run.softmax = arm.softmax, run.data = arm.fix, run.lr = fmt::format("{:g}", lr * f);
        res.runs.push_back(run);
      }
  }
  std::vector<std::string> cols{"seed", "softmax", "fix", "lr"};
  for (int64_t k = 1; k <= r.integer("steps"); ++k) cols.push_back(fmt::format("loss {}", k));
  cols.push_back("NaN params after");
  Table t3("lr_vs_masks", cols);
  const size_t per_seed = res.per_seed();
  for (size_t k = 0; k < res.runs.size(); ++k) {
    std::vector<Cell> row{static_cast<int64_t>(r.seed(static_cast<int>(k / per_seed))), res.runs[k].softmax, res.runs[k].data, res.runs[k].lr};
    for (double x : res.runs[k].losses) row.push_back(x);
    row.push_back(res.runs[k].nan_params);
    t3.row(row);
  }
  r.print(t3);
  r.say("naive: exp(s - max) / sum written from ops; guarded: gradflow's softmax (a fully masked row gets zeros); drop masked rows:");
  r.say("before each step, rows whose every source key is PAD (found from the padding mask) are left out of the batch.");
}

void add_figure(Report& r, const Results& res) {
  const size_t per_seed = res.per_seed();
  auto& d = r.data();
  for (int i = 0; i < r.seeds(); ++i)
    for (const OneStep* o : {&res.naive[i], &res.guarded[i]}) {
      nlohmann::json g;
      for (const auto& [name, c] : o->nan_grads) g[name] = c;
      d["one_step"].push_back({{"seed", r.seed(i)}, {"softmax", o == &res.naive[i] ? "naive" : "guarded"}, {"loss", o->loss}, {"nan_gradients", g},
                               {"nan_logit_rows", o->nan_logit_rows}});
    }
  d["anomaly"] = res.anomaly;
  for (size_t k = 0; k < res.runs.size(); ++k)
    d["runs"].push_back({{"seed", r.seed(static_cast<int>(k / per_seed))}, {"softmax", res.runs[k].softmax}, {"fix", res.runs[k].data},
                         {"lr", res.runs[k].lr}, {"losses", res.runs[k].losses}, {"nan_params_after", res.runs[k].nan_params}});
  {
    // NaN share of the gradient, by module (the parameter name without its last part).
    ValueMap m{"share of NaN gradient entries by module (seed " + std::to_string(r.seed(0)) + ")", "softmax", "module", {}, {"naive", "guarded"},
               {}, false, "NaN share"};
    std::vector<std::string> groups;
    std::map<std::string, std::array<double, 3>> acc;  // naive NaN, guarded NaN, entries
    for (size_t k = 0; k < res.naive[0].nan_grads.size(); ++k) {
      std::string g = res.naive[0].nan_grads[k].first;
      g = g.substr(0, g.rfind('.'));
      for (auto [from, to] : {std::pair<std::string, std::string>{"transformer.", ""}, {"encoder.layers.", "enc."}, {"decoder.layers.", "dec."},
                              {".out_proj", ""}, {"linear1", "ffn"}, {"linear2", "ffn"}, {"norm1", "norms"}, {"norm2", "norms"}, {"norm3", "norms"}})
        if (auto at = g.find(from); at != std::string::npos) g.replace(at, from.size(), to);
      if (!acc.count(g)) groups.push_back(g);
      acc[g][0] += static_cast<double>(res.naive[0].nan_grads[k].second);
      acc[g][1] += static_cast<double>(res.guarded[0].nan_grads[k].second);
      acc[g][2] += static_cast<double>(res.naive[0].sizes[k]);
    }
    for (const auto& g : groups) {
      m.row_labels.push_back(g);
      m.values.push_back({acc[g][0] / acc[g][2], acc[g][1] / acc[g][2]});
    }
    r.add_panel(m);
  }
  {
    ValueMap m{"loss per step, seed " + std::to_string(r.seed(0)) + " (grey: NaN)", "step (the empty source in step 2)", "", {}, {}, {},
               false, "loss"};
    for (size_t k = 0; k < per_seed; ++k) {
      m.row_labels.push_back(res.runs[k].softmax + (res.runs[k].data == "none" ? "" : ", drop") + ", lr " + res.runs[k].lr);
      m.values.push_back(res.runs[k].losses);
    }
    for (int64_t k = 1; k <= r.integer("steps"); ++k) m.col_labels.push_back(std::to_string(k));
    r.add_panel(m);
  }
}

// The claims (lab/claims.cpp's rows for nan): one paper claim, how far the NaN spreads, and exact
// checks of what the code and the protocol make certain.
void check_claims(Report& r, const Results& res) {
  const int64_t rows = r.integer("batch");
  const size_t per_seed = res.per_seed();
  std::vector<double> nan_share;  // per seed: share of parameter entries whose gradient is NaN, naive softmax
  double not_every_matrix = 0, guarded_bad = 0, not_named = 0, lr_helped = 0, fix_failed = 0;
  std::string ev_spread, ev_guard, ev_lr, ev_fix;
  for (int i = 0; i < r.seeds(); ++i) {
    const OneStep &n = res.naive[i], &g = res.guarded[i];
    int64_t matrices = 0, nan_matrices = 0, tensors_nan = 0, g_nan = 0, entries = 0, nan_entries = 0;
    for (size_t k = 0; k < n.nan_grads.size(); ++k) {
      const std::string& name = n.nan_grads[k].first;
      const bool matrix = name.find("emb") == std::string::npos && name.size() > 7 && name.substr(name.size() - 7) == ".weight" &&
                          name.find("norm") == std::string::npos;  // in_proj, out_proj, linear1, linear2, out
      matrices += matrix, nan_matrices += matrix && n.nan_grads[k].second > 0, tensors_nan += n.nan_grads[k].second > 0;
      g_nan += g.nan_grads[k].second;
      entries += n.sizes[k], nan_entries += n.nan_grads[k].second;
    }
    nan_share.push_back(static_cast<double>(nan_entries) / static_cast<double>(entries));
    not_every_matrix += !(std::isnan(n.loss) && n.nan_logit_rows == 1 && nan_matrices == matrices);
    guarded_bad += !(std::isfinite(g.loss) && g_nan == 0 && g.nan_logit_rows == 0 && g.empty_row_weights_nan == 0 && g.empty_row_weights_max == 0.0 &&
                     g.other_rows_weight_sum_err < 1e-5);
    const std::string& a = res.anomaly[static_cast<size_t>(i)];
    not_named += !(a.rfind("anomaly: forward of", 0) == 0 && a.find("encoder.layers.0") != std::string::npos && res.anomaly_row[i] == rows - 1);
    const std::string sep = i ? "; " : "";
    ev_spread += fmt::format("{}seed {}: loss {}, {} row(s) of logits NaN, {} of {} weight matrices and {} of {} tensors with NaN gradient", sep, r.seed(i),
                             n.loss, n.nan_logit_rows, nan_matrices, matrices, tensors_nan, n.nan_grads.size());
    ev_guard += fmt::format("{}seed {}: loss {:.4f}, {} NaN gradient entries, empty row's weights at most {:g}, other rows sum to 1 within {:.1g}", sep,
                            r.seed(i), g.loss, g_nan, g.empty_row_weights_max, g.other_rows_weight_sum_err);
  }
  for (size_t k = 0; k < res.runs.size(); ++k) {
    const Run& run = res.runs[k];
    if (run.softmax == "naive" && run.data == "none") {
      // NaN from the step with the empty source (step 2) on, whatever the learning rate.
      bool nan_from_2 = std::isfinite(run.losses[0]) && run.nan_params > 0;
      for (size_t j = 1; j < run.losses.size(); ++j) nan_from_2 = nan_from_2 && std::isnan(run.losses[j]);
      lr_helped += !nan_from_2;
      const bool first = k % per_seed == 0;
      ev_lr += fmt::format("{}{}lr {}: {:.3f}, {}, ... ({} NaN parameters after)", first && k ? "; " : first ? "" : ", ",
                           first ? fmt::format("seed {}: ", r.seed(static_cast<int>(k / per_seed))) : "", run.lr, run.losses[0], run.losses[1],
                           run.nan_params);
    } else {
      fix_failed += !run.finite();
      if (k % per_seed == 3) ev_fix += fmt::format("{}seed {}: last losses", k > 3 ? "; " : "", r.seed(static_cast<int>(k / per_seed)));
      ev_fix += fmt::format(" {:.3f}{}", run.losses.back(), run.nan_params ? " (NaN parameters)" : "");
    }
  }
  r.check("naive_nan_spreads", nan_share, fmt::format("share per seed: {:.3f}; {}", fmt::join(nan_share, ", "), ev_spread));
  r.check("naive_nan_every_matrix", not_every_matrix, ev_spread);
  r.check("anomaly_names_first_op", not_named, fmt::format("seed {}: row {} of {}: {}", r.seed(0), res.anomaly_row[0], rows, res.anomaly[0]));
  r.check("guarded_zero_row", guarded_bad, ev_guard);
  r.check("lr_cannot_help", lr_helped, ev_lr);
  r.check("masks_fix", fix_failed, ev_fix + " (drop at lr, lr/10, lr/100, then guarded)");
}

void run(Report& r) {
  const IdData data = builtin_corpus(r.integer("pairs"));
  std::vector<train::EncodedPair> pairs = data.train;
  // An empty source sentence with a real target. The lab has no control: its claims are exact
  // checks (the NaN share is the same on every seed), which a placebo could not move.
  pairs.push_back({std::vector<int64_t>{}, data.train.front().tgt});
  r.say(fmt::format("built-in corpus, {} training pairs plus one with an empty source; Post-LN, d_model {}, 2 heads, {} layers, float32; "
                    "{} seeds (initialisation and batches)",
                    data.train.size(), r.integer("d-model"), r.integer("layers"), r.seeds()));
  Results res;
  one_batch(r, data, pairs, res);
  lr_runs(r, data, pairs, res);
  add_figure(r, res);
  check_claims(r, res);
}

}  // namespace

Lab nan_lab() {
  Lab l;
  l.name = "nan";
  l.title = "a fully masked attention row";
  l.reference = "the course: NaN from a fully masked row; check the masks, not the learning rate";
  l.question = "What does a row whose every key is masked do to the loss and the gradients with a naive softmax and with a "
               "guarded one, and does a lower learning rate help?";
  l.default_seeds = 5;
  l.options = {{"pairs", Option::Int, "2000", "pairs of the built-in corpus (90% train)"},
               {"d-model", Option::Int, "32", "model width (feed-forward 2x)"},
               {"layers", Option::Int, "2", "encoder and decoder layers each"},
               {"batch", Option::Int, "8", "rows of the batch with the empty source (it included)"},
               {"steps", Option::Int, "6", "training steps per run; the empty source is in step 2's batch"},
               {"lr", Option::Real, "0.001", "the highest learning rate (then /10 and /100)"}};
  l.run = run;
  return l;
}

}  // namespace gf::lab

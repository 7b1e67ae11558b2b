// Lab `attribution`: is attention an explanation? (Jain and Wallace 2019, arXiv:1902.10186;
// Wiegreffe and Pinter 2019, arXiv:1908.04626.)
//
// Jain and Wallace: attention weights correlate only weakly with measures of which inputs matter
// (gradients, leave-one-out), which agree with each other more than with attention; and other
// attention distributions (permuted, adversarial) often give the same prediction, in the text
// classifiers they studied (they left sequence-to-sequence models out). Wiegreffe and Pinter:
// whether attention explains depends on the model and task; a model that does as well with uniform
// attention has attention that explains nothing.
//
// Here, on small English -> Korean translators (one per seed, each on a corpus drawn by its seed;
// lab/trained_model.h), for test sentences, the model's own greedy translation, teacher-forced
// (lab/attribution.h): the agreement of the last decoder layer's cross-attention with three
// attribution methods (train/inspect/attribution.h), and counterfactual attention. One arm; with
// --data DIR (lab/real_data.h) the translators are trained on that task instead (Multi30k's German
// -> English, say), each seed its own weights and batch order on the same data. --control, the
// ablation, runs the same protocol with every cross-attention uniform over the source, which is then
// also the attention compared with the methods: the claims that attention carries a specific signal
// must fail.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "lab/attribution.h"
#include "lab/runner.h"
#include "lab/trained_model.h"

namespace gf::lab {
namespace attribution {

void to_json(nlohmann::json& j, const SeedStudy& x) {
  for (int a = 0; a < kMaps; ++a)
    for (int b = a + 1; b < kMaps; ++b) {
      const std::string pair = fmt::format("{}-{}", kMapShort[a], kMapShort[b]);
      for (const Sentence& s : x.sentences) j["per_sentence_spearman"][pair].push_back(s.rho[a][b]), j["per_sentence_kendall"][pair].push_back(s.tau[a][b]);
    }
  for (int m = 1; m < kMaps; ++m) j["methods_agree"][kMapShort[m]] = x.methods_agree[m], j["methods_agree_kendall"][kMapShort[m]] = x.methods_agree_tau[m];
  for (const Sentence& s : x.sentences) j["per_sentence_permuted_tv"].push_back(s.permuted_tv), j["per_sentence_uniform_tv"].push_back(s.uniform_tv);
  j["attention_agrees"] = x.attention_agrees;
  j["permuted_tv"] = x.permuted_tv, j["uniform_tv"] = x.uniform_tv;
  j["teacher_forced_accuracy"] = x.tf_accuracy;
}

}  // namespace attribution

namespace {

using namespace attribution;
using Runs = Grid<SeedStudy>;

struct Settings {
  TrainedModelSettings model;  // 400 steps, the built-in corpus of 8,000 pairs
  int64_t sentences = 60, ig_steps = 32, permutations = 8, max_extra = 50;
};

Fields<Settings> fields() {
  using S = Settings;
  Fields<S> f = Fields<S>::nest(&S::model, trained_model_fields());
  f.add({{"sentences", &S::sentences, "test sentences studied per model"},
         {"ig-steps", &S::ig_steps, "integrated gradients: midpoint-rule steps on the path from the zero embedding"},
         {"permutations", &S::permutations, "permuted-attention draws per sentence"},
         {"max-extra", &S::max_extra, "greedy translations stop after the source's length + this many tokens"}});
  return f.add(Fields<S>::nest(&S::model, trained_model_data_fields()));  // --data: the translators trained on a real task
}

void validate(const Settings& s) {
  GF_CHECK(s.max_extra >= 1, "lab attribution: --max-extra must be at least 1, got {}", s.max_extra);
  GF_CHECK(s.ig_steps >= 1 && s.permutations >= 1, "lab attribution: --ig-steps and --permutations must be at least 1, got {} and {}", s.ig_steps,
           s.permutations);
  GF_CHECK(s.model.model.empty(),
           "lab attribution: --model is not supported: its claims need one model per seed (an interval across seeds) and --model is one "
           "model; the lab trains its own (--cache keeps them)");
}

struct Context {
  Output* out = nullptr;          // where each model says where it came from
  std::optional<RealData> real;   // --data: the task, read once
  std::string first_model;        // the first seed's model, its description and vocabularies (the example sentence)
  train::Vocab src_words, tgt_words;
};

Context prepare(const Settings& s, Report& r) {
  Context c;
  c.out = &r;
  GF_CHECK(r.models().empty() || !s.model.real.given(), "lab attribution: --models analyses the given runs on their own test data; --data does not go with it");
  if (s.model.real.given()) c.real = real_data(s.model.real_settings(), r);
  if (r.ablation_mode()) r.say("every cross-attention runs with a uniform map over the source, and that map is the attention compared with the methods");
  return c;
}

// The seed's model: its --models folder (loaded as translate loads it: digests and config checked),
// else the one trained here (or cached) for k.seed.
TrainedModel model_of(const Settings& s, const Context& c, const RunKey& k) {
  if (k.model.empty()) return trained_model(s.model, c.real ? &*c.real : nullptr, k.seed, *c.out);
  TrainedModelSettings given = s.model;
  given.model = k.model;
  return trained_model(given, nullptr, k.seed, *c.out);
}

SeedStudy measure(const Settings& s, Context& c, const RunKey& k) {
  const TrainedModel tm = model_of(s, c, k);
  const size_t n = std::min(static_cast<size_t>(s.sentences), tm.test.size());
  const StudyOptions o{static_cast<int>(s.ig_steps), static_cast<int>(s.permutations), s.max_extra, k.ablate};
  SeedStudy x = study_model(tm, n, o, k.seed);
  c.out->say(fmt::format("  {} test sentences; teacher-forced token accuracy {:.3f}", n, x.tf_accuracy));
  if (k.index == 0) c.first_model = tm.description, c.src_words = tm.src_words, c.tgt_words = tm.tgt_words;
  return x;
}

// ---------------------------------------------------------------- tables and figures

std::vector<std::string> words(const train::Vocab& v, const std::vector<int64_t>& ids) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.token(id));
  return w;
}

void print_agreement(Report& r, const std::vector<const SeedStudy*>& res) {
  r.section("agreement over the source tokens: Spearman rho per output token, mean over a sentence's tokens, mean over sentences");
  Table t("agreement", {"seed", "sentences", "att-gxi", "att-loo", "att-ig", "gxi-loo", "gxi-ig", "loo-ig", "all-layer att vs methods",
                        "rollout vs methods", "teacher-forced accuracy"});
  for (size_t i = 0; i < res.size(); ++i) {
    const SeedStudy& x = *res[i];
    t.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), x.sentences.size(), x.rho[kAtt][kGxi], x.rho[kAtt][kLoo], x.rho[kAtt][kIg],
           x.rho[kGxi][kLoo], x.rho[kGxi][kIg], x.rho[kLoo][kIg], mean({x.rho_all_layers[1], x.rho_all_layers[2], x.rho_all_layers[3]}),
           mean({x.rho_rollout[1], x.rho_rollout[2], x.rho_rollout[3]}), x.tf_accuracy});
  }
  r.print(t);
  r.say("att: the last decoder layer's cross-attention, mean over heads; gxi: |gradient x input|; loo: leave-one-out (total variation of the");
  r.say("next-token distribution with the token blanked out: masked out of attention, positions kept); ig: |integrated gradients|.");
  r.say("all-layer att and rollout: reported, not claimed.");
  Table k("Kendall's tau (Jain and Wallace's statistic; reported beside Spearman's rho, which the claims use)",
          {"seed", "att-gxi", "att-loo", "att-ig", "gxi-loo", "gxi-ig", "loo-ig", "gxi: methods - att", "loo: methods - att", "ig: methods - att"});
  for (size_t i = 0; i < res.size(); ++i) {
    const SeedStudy& x = *res[i];
    k.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), x.tau[kAtt][kGxi], x.tau[kAtt][kLoo], x.tau[kAtt][kIg], x.tau[kGxi][kLoo],
           x.tau[kGxi][kIg], x.tau[kLoo][kIg], x.methods_agree_tau[kGxi], x.methods_agree_tau[kLoo], x.methods_agree_tau[kIg]});
  }
  r.print(k);
  r.say("Kendall's tau-b (Jain and Wallace's statistic) of the same maps, averaged the same way; reported beside Spearman's rho, on which the");
  r.say("claims are decided. methods - att: the other two methods' mean tau with the method minus attention's.");
  Table m("methods", {"seed", "method", "mean rho with the other two methods", "rho with attention", "difference"});
  for (size_t i = 0; i < res.size(); ++i)
    for (int j = 1; j < kMaps; ++j)
      m.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), kMapName[j], res[i]->methods_agree[j] + res[i]->rho[kAtt][j], res[i]->rho[kAtt][j],
             res[i]->methods_agree[j]});
  r.print(m);
}

void print_counterfactuals(Report& r, const std::vector<const SeedStudy*>& res, int64_t permutations) {
  r.section("counterfactual attention: total variation distance of the next-token distribution from the model's own (mean over output tokens)");
  Table t("counterfactuals", {"seed", "permuted (median of draws), mean over sentences", "permuted, sentence median", "uniform, mean over sentences",
                              "uniform, sentence median"});
  for (size_t i = 0; i < res.size(); ++i) {
    std::vector<double> p, u;
    for (const Sentence& s : res[i]->sentences) p.push_back(s.permuted_tv), u.push_back(s.uniform_tv);
    t.row({static_cast<int64_t>(r.seed(static_cast<int>(i))), res[i]->permuted_tv, median(p), res[i]->uniform_tv, median(u)});
  }
  r.print(t);
  r.say(fmt::format("permuted: every cross-attention row of every layer and head shuffled over the source, {} draws per sentence; uniform: every row "
                    "1 / (source length).",
                    permutations));
}

// The share of a seed's sentences at or below each value: a cumulative curve.
ChartSeries cumulative(const std::string& name, std::vector<double> v, bool dashed, const std::string& color) {
  std::sort(v.begin(), v.end());
  ChartSeries c{name, {}, {}, {}, {}, dashed, color};
  for (size_t i = 0; i < v.size(); ++i) c.x.push_back(v[i]), c.y.push_back(static_cast<double>(i + 1) / static_cast<double>(v.size()));
  return c;
}

void figure(Report& r, const std::vector<const SeedStudy*>& res, const Context& c) {
  const Sentence& ex = res[0]->sentences.front();
  const auto rows = words(c.tgt_words, ex.out), cols = words(c.src_words, ex.src);
  const char* att = r.ablation_mode() ? " (control: uniform)" : " (last layer, head mean)";
  for (int m = 0; m < kMaps; ++m)
    r.add_panel(ValueMap{fmt::format("sentence 0, {}{}", kMapName[m], m == kAtt ? att : " (rows sum to 1)"), "source token", "output token", rows,
                         cols, m == kAtt ? ex.maps[m] : row_normalised(ex.maps[m]), false, "share"});
  ValueMap agree{"mean Spearman rho between maps (mean over seeds)", "map", "map", {}, {}, {}, false, "rho"};
  agree.lo = -1, agree.hi = 1;
  for (int a = 0; a < kMaps; ++a) {
    agree.row_labels.push_back(kMapShort[a]), agree.col_labels.push_back(kMapShort[a]);
    agree.values.emplace_back();
    for (int b = 0; b < kMaps; ++b) {
      std::vector<double> v;
      for (const SeedStudy* x : res) v.push_back(x->rho[a][b]);
      agree.values.back().push_back(mean(v));
    }
  }
  r.add_panel(agree);
  // Per-sentence distributions (first model): agreement pairs, then the counterfactual distances.
  Chart cdf{"per-sentence rho, first model (cumulative)", "Spearman rho (mean over output tokens)", "share of sentences", false, false, {}, {}};
  const std::pair<int, int> pairs[] = {{kAtt, kGxi}, {kAtt, kLoo}, {kAtt, kIg}, {kGxi, kLoo}, {kGxi, kIg}, {kLoo, kIg}};
  for (auto [a, b] : pairs) {
    std::vector<double> v;
    for (const Sentence& s : res[0]->sentences) v.push_back(s.rho[a][b]);
    cdf.series.push_back(cumulative(fmt::format("{}-{}", kMapShort[a], kMapShort[b]), v, a != kAtt, ""));
  }
  r.add_panel(cdf);
  Chart cf{"counterfactual attention, first model (cumulative over sentences)", "total variation of the next-token distribution", "share of sentences",
           false, false, {}, {}};
  std::vector<double> p, u;
  for (const Sentence& s : res[0]->sentences) p.push_back(s.permuted_tv), u.push_back(s.uniform_tv);
  cf.series = {cumulative("permuted", p, false, "#d62728"), cumulative("uniform", u, true, "#2ca02c")};
  cf.legend = Chart::Corner::TopLeft;
  r.add_panel(cf);
}

void describe(const Settings& s, const Context& c, const Runs& g, Report& r) {
  const std::vector<const SeedStudy*> res = g.of("trained");
  print_agreement(r, res);
  print_counterfactuals(r, res, s.permutations);
  const Sentence& ex = res[0]->sentences.front();
  r.data()["model"] = c.first_model;
  r.data()["example"] = {{"source", words(c.src_words, ex.src)}, {"output", words(c.tgt_words, ex.out)}, {"attention", ex.maps[kAtt]},
                         {"gradient_x_input", ex.maps[kGxi]}, {"leave_one_out", ex.maps[kLoo]}, {"integrated_gradients", ex.maps[kIg]},
                         {"rollout", ex.rollout}};
  figure(r, res, c);
}

// ---------------------------------------------------------------- claims

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : ", ", x);
  return s;
}

// Attention's rho with method m, per seed.
std::vector<double> attention_rho(const Runs& g, int m) {
  std::vector<double> v;
  for (const SeedStudy* x : g.of("trained")) v.push_back(x->rho[kAtt][m]);
  return v;
}

// ig_complete over every output token of the first model: the summed |sum of IG - endpoint
// difference|, the summed |endpoint difference|, and the count of tokens.
struct Completeness {
  double err = 0, scale = 0;
  int64_t rows = 0;
};
Completeness completeness(const Runs& g) {
  Completeness c;
  for (const Sentence& s : g.at("trained", 0, 0).sentences)
    for (size_t t = 0; t < s.ig_sum_error.size(); ++t) c.err += s.ig_sum_error[t], c.scale += s.ig_endpoint[t], ++c.rows;
  return c;
}

ClaimDef<SeedStudy> methods_agree(int m, const char* id, const char* statement, const char* source, double pilot_sd, const char* reason) {
  return {.spec = {.id = id, .kind = ClaimKind::Paper, .statement = statement, .side = Compare::Above, .threshold = 0.0, .source = source,
                   .control_targets = false, .range_lo = -2.0, .range_hi = 2.0, .min_effect = 0.05, .min_effect_reason = reason,
                   .pilot_sd = pilot_sd, .pilot_n = 3},
          .per_seed = [m](const SeedView<SeedStudy>& v) { return v("trained").methods_agree[m]; },
          .evidence = [m](const Runs& g, const std::vector<double>& x) {
            return fmt::format("{}: the other methods' mean rho with it minus attention's, per seed: {} (attention's rho: {})", kMapName[m], list(x),
                               list(attention_rho(g, m)));
          }};
}

std::vector<ClaimDef<SeedStudy>> claims(const Settings&) {
  using V = SeedView<SeedStudy>;
  const char* as_gxi = "as methods_agree_gxi";
  return {
      {.spec = {.id = "attention_agrees", .kind = ClaimKind::Paper,
                .statement = "the last decoder layer's cross-attention (head mean) ranks the source tokens somewhat as the attribution methods do: "
                             "its mean Spearman rho with gradient x input, leave-one-out and integrated gradients, per output token, averaged over "
                             "sentences",
                .side = Compare::Above, .threshold = 0.2,
                .source = "Jain and Wallace 2019, section 4.1 (attention correlates with importance measures, weakly); a map unrelated to the input "
                          "scores 0 (s.e. about 0.015 over 60 sentences), so 0.2 is a clear positive agreement; a constant map (ranks nothing) "
                          "scores 0",
                .control_targets = true, .range_lo = -1.0, .range_hi = 1.0, .min_effect = 0.1,
                .min_effect_reason = "half the threshold's distance from no agreement (rho 0)", .pilot_sd = 0.0186, .pilot_n = 3},
       .per_seed = [](const V& v) { return v("trained").attention_agrees; },
       .evidence = [](const Runs&, const std::vector<double>& x) { return "mean rho of attention with gxi, loo, ig, per seed: " + list(x); }},
      methods_agree(kGxi, "methods_agree_gxi",
                    "gradient x input agrees with the other attribution methods (leave-one-out, integrated gradients; mean Spearman rho) more "
                    "than with attention: the difference",
                    "Jain and Wallace 2019, section 4.1 (gradient and leave-one-out measures agree with each other more than with attention); "
                    "the paper claims a direction, the interval across seeds is the margin",
                    0.0224,
                    "0.05 of Spearman's rho, a fortieth of its range: the threshold is the sign (0), and a smaller difference in agreement "
                    "ranks no method above another for a reader"),
      methods_agree(kLoo, "methods_agree_loo",
                    "leave-one-out agrees with the other attribution methods (gradient x input, integrated gradients) more than with attention: "
                    "the difference",
                    as_gxi, 0.021, as_gxi),
      methods_agree(kIg, "methods_agree_ig",
                    "integrated gradients agree with the other attribution methods (gradient x input, leave-one-out) more than with attention: "
                    "the difference",
                    as_gxi, 0.00955, as_gxi),
      {.spec = {.id = "permuted_changes_output", .kind = ClaimKind::Paper,
                .statement = "a translator's output depends on its specific attention: with every cross-attention row permuted over the source, "
                             "the next-token distribution moves by this total variation distance (mean over output tokens, median over "
                             "permutations, mean over sentences)",
                .side = Compare::Above, .threshold = 0.25,
                .source = "Jain and Wallace 2019, section 4.2 (the permutation counterfactual; they found little change for classifiers and left "
                          "sequence-to-sequence models out); Wiegreffe and Pinter 2019 (attention matters where the task needs it). 0.25: a "
                          "quarter of the probability mass moves",
                .control_targets = true, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.125,
                .min_effect_reason = "half the threshold's distance from no change (0)", .pilot_sd = 0.0103, .pilot_n = 3},
       .per_seed = [](const V& v) { return v("trained").permuted_tv; },
       .evidence = [](const Runs&, const std::vector<double>& x) { return "mean over sentences of the total variation, per seed: " + list(x); }},
      {.spec = {.id = "uniform_changes_output", .kind = ClaimKind::Paper,
                .statement = "with every cross-attention row made uniform over the source, the next-token distribution moves by this total "
                             "variation distance (mean over output tokens and sentences)",
                .side = Compare::Above, .threshold = 0.25,
                .source = "Wiegreffe and Pinter 2019, section 3.1 (the uniform-attention baseline); the same 0.25 as permuted_changes_output",
                .control_targets = true, .range_lo = 0.0, .range_hi = 1.0, .min_effect = 0.125,
                .min_effect_reason = "half the threshold's distance from no change (0)", .pilot_sd = 0.016, .pilot_n = 3},
       .per_seed = [](const V& v) { return v("trained").uniform_tv; },
       .evidence = [](const Runs&, const std::vector<double>& x) { return "mean over sentences of the total variation, per seed: " + list(x); }},
      {.spec = {.id = "ig_complete", .kind = ClaimKind::Check,
                .statement = "integrated gradients add up (completeness): |sum over source tokens of IG - (log p(y_t | x) - log p(y_t | 0))|, "
                             "relative to the mean |log p(y_t | x) - log p(y_t | 0)|, over every output token of the first model",
                .side = Compare::Below, .threshold = 0.05,
                .source = "Sundararajan et al. 2017, axiom of completeness; exact in the limit of the path integral, here 32 midpoint steps",
                .control_targets = false},
       .joint = [](const Runs& g) { const Completeness c = completeness(g); return c.err / c.scale; },
       .evidence = [](const Runs& g, const std::vector<double>&) {
         const Completeness c = completeness(g);
         return fmt::format("mean |sum of IG - endpoint difference| {:.3g} against mean |endpoint difference| {:.3g}, over {} output tokens",
                            c.err / c.rows, c.scale / c.rows, c.rows);
       }},
  };
}

}  // namespace

Lab attribution_lab() {
  return make_lab(Experiment<Settings, Context, SeedStudy>{
      .info = {.name = "attribution",
               .title = "is attention an explanation? attribution methods and counterfactual attention",
               .reference = "Jain and Wallace 2019, arXiv:1902.10186; Wiegreffe and Pinter 2019, arXiv:1908.04626",
               .question = "Does a trained translator's cross-attention rank the source tokens as gradient x input, leave-one-out and integrated "
                           "gradients do, do those methods agree among themselves more than with attention, and does the output change when the "
                           "attention is permuted or made uniform?",
               .default_seeds = 3,
               .takes_models = true,
               .ablation = "every cross-attention replaced by a uniform map over the source",
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

// `gradflow lab run FILE`: an experiment declared in a file (app/lab_spec.h) run by the labs' one
// runner (lab/runner.h). Each (arm, level, seed) is one training run of the file's recipe for its
// step budget, with the labs' training loop (lab/common.h fit(): the one training step, the
// recipe's schedule, no early stop), measured at the end and, for the gradient statistics, at the
// named steps. A finished run's measures are kept in OUT/runs/, keyed by the file's digest, so an
// interrupted experiment resumes where it stopped.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "app/lab_run.h"
#include "autograd/grad_mode.h"
#include "lab/common.h"
#include "lab/real_data.h"
#include "lab/runner.h"
#include "tensor/io/atomic_file.h"
#include "train/run/checkpoint.h"
#include "train/decode/decode.h"
#include "train/eval/bleu.h"
#include "train/run/model.h"
#include "train/run/batch_loss.h"
#include "train/run/checkpoint.h"
#include "app/flags.h"

namespace gf::app {
namespace {
namespace fs = std::filesystem;
using lab::Condition;

struct NoSettings {};

struct Measured {
  std::vector<double> values;  // one per measure, in the file's order
  std::vector<std::string> names;
};
void to_json(nlohmann::json& j, const Measured& m) {
  j = nlohmann::json::object();
  for (size_t k = 0; k < m.values.size(); ++k) j[m.names[k]] = std::isfinite(m.values[k]) ? nlohmann::json(m.values[k]) : nlohmann::json(nullptr);
}

struct Context {
  lab::IdData data;  // builtin and dir (a task is drawn per run)
  std::optional<lab::RealData> real;
  std::string runs_dir;
};

const std::vector<train::EncodedPair>& held_out(const lab::IdData& d, bool valid) { return valid && !d.valid.empty() ? d.valid : d.test; }

// Greedy corpus BLEU (13a) of the first 200 validation pairs, on the data's own tokens.
double greedy_bleu_of(const nn::Seq2SeqTransformer& model, const lab::IdData& d, const Context& c) {
  const auto& pairs = held_out(d, true);
  if (c.real) return lab::greedy_bleu(model, *c.real, pairs, d.valid.empty() ? c.real->test_refs : c.real->valid_refs, 200).score;
  auto words = [&](const std::vector<int64_t>& ids) {
    std::vector<std::string> w;
    for (int64_t id : ids)
      if (id > 3) w.push_back(d.tgt_words.size() > 0 ? d.tgt_words.token(id) : fmt::format("s{}", id));
    return fmt::format("{}", fmt::join(w, " "));
  };
  std::vector<std::string> hyps, refs;
  const size_t n = std::min<size_t>(200, pairs.size());
  std::vector<size_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  const train::Batch b = train::collate(pairs, rows);
  const Tensor src = Tensor::from_vector(b.src, {b.rows, b.src_len});  // (B, S)
  for (const auto& ids : train::translate_batch(model, src, train::DecodeOptions{})) hyps.push_back(words(ids));
  for (size_t i = 0; i < n; ++i) refs.push_back(words(pairs[i].tgt));
  return corpus_bleu(hyps, refs, "13a").score;
}

// The least head's entropy / log(visible keys) on one forward of the first 64 held-out pairs.
double head_entropy_min(nn::Seq2SeqTransformer& model, const lab::IdData& d) {
  std::vector<size_t> first(std::min<size_t>(64, d.test.size()));
  std::iota(first.begin(), first.end(), 0);
  const train::BatchTensors b = train::to_tensors(train::collate(d.test, first));
  NoGradGuard ng;
  train::EntropyProbe probe(model);
  probe.arm(b.src, b.tgt_in);
  model.forward(b.src, b.tgt_in);
  double m = INFINITY;
  for (const auto& [site, h] : probe.take())
    for (double e : h.heads) {
      const double v = h.uniform > 0 ? e / h.uniform : NAN;
      m = std::isnan(v) ? v : std::min(m, v);  // NaN (a broken run) propagates
    }
  return m;
}

// A grad-stats quantity of the record at `step`: a group's (or "all": the model's) norm or ratio,
// or an attention's mean entropy over log(visible keys) (SITE.hK: one head's).
double recorded(const train::GradStatsRecorder& g, const SpecMeasure& m) {
  for (const auto& r : g.records()) {
    if (r.at("step").get<int64_t>() != m.step) continue;
    auto number = [](const train::StatsJson& v) { return v.is_number() ? v.get<double>() : NAN; };
    const char* stat = m.kind == SpecMeasure::GradNorm ? "grad_norm" : m.kind == SpecMeasure::ParamNorm ? "param_norm" : "update_ratio";
    if (m.kind != SpecMeasure::Entropy) {
      if (m.target == "all") return number(r.at(stat));
      for (const auto& grp : r.at("groups"))
        if (grp.at("name") == m.target) return number(grp.at(stat));
      GF_FAIL_AS(UsageError, "measure '{}': no module group '{}' (the groups are docs/grad-stats.md's: emb.src, enc0.self.q, dec1.ffn, out, ...)", m.name, m.target);
    }
    const size_t h = m.target.rfind(".h");
    const bool one = h != std::string::npos && m.target.find_first_not_of("0123456789", h + 2) == std::string::npos;
    const std::string site = one ? m.target.substr(0, h) : m.target;
    for (const auto& a : r.at("attention")) {
      if (a.at("name") != site) continue;
      const double uniform = number(a.at("uniform"));
      const auto& e = a.at("entropy");
      if (one) return std::stoul(m.target.substr(h + 2)) < e.size() ? number(e[std::stoul(m.target.substr(h + 2))]) / uniform : NAN;
      double sum = 0;
      for (const auto& x : e) sum += number(x) / uniform;
      return sum / static_cast<double>(e.size());
    }
    GF_FAIL_AS(UsageError, "measure '{}': no attention '{}' (enc0.self, dec0.self, dec0.cross, ...)", m.name, site);
  }
  return NAN;
}

std::string run_name(const LabSpec& s, const lab::RunKey& k) {
  return fmt::format("{}{}-seed{}{}", k.cond.arm, s.arm_has_factor(k.cond.arm) ? fmt::format("-{:g}", k.cond.level) : "", k.seed, k.pool ? "-pool" : "");
}

Measured train_and_measure(const LabSpec& s, Context& c, const lab::RunKey& k) {
  const train::RunConfig rc = spec_config(s, k.cond);
  const lab::IdData task = s.data_kind == "task" ? s.task.make(k.seed) : lab::IdData{};
  const lab::IdData& d = s.data_kind == "task" ? task : c.data;
  nn::Seq2SeqOptions shape = rc.model_options(d.src_vocab, d.tgt_vocab);
  shape.pad = train::Vocab::kPad, shape.max_len = 256;
  nn::Seq2SeqTransformer model(shape, k.seed);
  lab::FitOptions o;
  o.steps = s.steps, o.lr = rc.lr, o.warmup = rc.warmup, o.schedule = rc.schedule, o.decay_fraction = rc.decay_fraction, o.clip = rc.clip;
  o.label_smoothing = rc.label_smoothing, o.max_tokens = rc.max_tokens, o.seed = k.seed;
  std::set<int64_t> steps;
  for (const SpecMeasure& m : s.measures)
    if (m.kind >= SpecMeasure::GradNorm && m.kind <= SpecMeasure::Entropy) steps.insert(m.step);
  const std::string dir = (fs::path(c.runs_dir) / run_name(s, k)).string();
  const auto view = train::view_translation_model(model);
  std::unique_ptr<train::GradStatsRecorder> stats;
  if (!steps.empty()) {
    fs::create_directories(dir);
    stats = std::make_unique<train::GradStatsRecorder>(*view, dir, 1);
    stats->only_at(steps);
    o.grad_stats = stats.get();
  }
  const lab::FitResult f = lab::fit(model, d.train, o);
  model.eval();
  Measured out;
  for (const SpecMeasure& m : s.measures) {
    double v = NAN;
    auto at = [&](const std::string& name) { return out.values[static_cast<size_t>(std::find(out.names.begin(), out.names.end(), name) - out.names.begin())]; };
    switch (m.kind) {
      case SpecMeasure::TrainLoss: v = m.step == 0 ? f.losses.back() : m.step <= static_cast<int64_t>(f.losses.size()) ? f.losses[m.step - 1] : NAN; break;
      case SpecMeasure::ValidLoss:
      case SpecMeasure::TestLoss:  // a diverged run counts as its first loss: what a model that learnt nothing scores
        v = f.diverged ? f.losses.front() : lab::teacher_forced(model, held_out(d, m.kind == SpecMeasure::ValidLoss)).nll;
        break;
      case SpecMeasure::ValidAccuracy:
      case SpecMeasure::TestAccuracy: v = lab::teacher_forced(model, held_out(d, m.kind == SpecMeasure::ValidAccuracy)).accuracy; break;
      case SpecMeasure::ExactMatch: v = lab::free_running_accuracy(model, held_out(d, true), 200).exact; break;
      case SpecMeasure::Bleu: v = greedy_bleu_of(model, d, c); break;
      case SpecMeasure::DivergedAt: v = f.diverged ? static_cast<double>(f.diverged_at) : static_cast<double>(s.steps + 1); break;
      case SpecMeasure::HeadEntropyMin: v = head_entropy_min(model, d); break;
      case SpecMeasure::Ratio: v = at(m.a) / at(m.b); break;
      case SpecMeasure::Difference: v = at(m.a) - at(m.b); break;
      case SpecMeasure::LogRatio: v = std::log(at(m.a) / at(m.b)); break;
      default: v = recorded(*stats, m);
    }
    out.names.push_back(m.name), out.values.push_back(v);
  }
  return out;
}

// A finished run's measures are kept (OUT/runs/NAME.json, with the file's digest): the next run of
// the same file reads them instead of training again.
Measured measure(const LabSpec& s, Context& c, const lab::RunKey& k) {
  const fs::path kept = fs::path(c.runs_dir) / (run_name(s, k) + ".json");
  if (fs::is_regular_file(kept)) {
    const nlohmann::json j = nlohmann::json::parse(train::read_text_file(kept.string()), nullptr, false);
    if (j.is_object() && j.value("digest", "") == s.digest && j.contains("measured")) {
      Measured m;
      for (const SpecMeasure& x : s.measures) {
        const auto& v = j.at("measured").value(x.name, nlohmann::json());
        m.names.push_back(x.name), m.values.push_back(v.is_number() ? v.get<double>() : NAN);
      }
      return m;
    }
  }
  Measured m = train_and_measure(s, c, k);
  fs::create_directories(c.runs_dir);
  write_file_atomic(kept.string(), nlohmann::json{{"digest", s.digest}, {"measured", m}}.dump(1) + "\n");
  return m;
}

size_t index_of(const LabSpec& s, const std::string& measure) {
  for (size_t k = 0; k < s.measures.size(); ++k)
    if (s.measures[k].name == measure) return k;
  GF_FAIL_AS(std::logic_error, "lab run: no measure '{}'", measure);
}

lab::ClaimDef<Measured> claim_of(const LabSpec& s, const SpecClaim& c) {
  const size_t k = index_of(s, c.measure);
  lab::ClaimDef<Measured> d{.spec = c.spec};
  if (c.type == "trend") {
    d.trend = lab::TrendDef<Measured>{c.measure, c.arm, [k](const Measured& m) { return m.values[k]; }, c.trend, s.factor_flag, c.measure,
                                      c.trend == lab::TrendKind::LogSlope, ""};
    return d;
  }
  const Condition a = c.a, b = c.b;
  const std::string type = c.type;
  d.per_seed = [=](const lab::SeedView<Measured>& v) {
    const double x = v(a.arm, a.level).values[k];
    if (type == "value") return x;
    const double y = v(b.arm, b.level).values[k];
    return type == "difference" ? x - y : type == "ratio" ? x / y : std::log(x / y);
  };
  if (type == "value") d.no_placebo = "one condition's measure against a threshold, no contrast between conditions";
  return d;
}

// Every condition's mean and 95% interval of every measure, and, with a factor, a panel per measure.
void describe(const LabSpec& s, const Context&, const lab::Grid<Measured>& g, lab::Report& r) {
  std::vector<std::string> cols{"arm", "level"};
  for (const SpecMeasure& m : s.measures) cols.push_back(m.name);
  lab::Table t("measures: mean over seeds", cols);
  std::vector<ChartSeries> series[64];
  for (const auto& arm : g.arms()) {
    const std::vector<double> levels = arm.levels.empty() ? std::vector<double>{0} : arm.levels;
    for (double l : levels) {
      std::vector<lab::Cell> row{arm.name, arm.levels.empty() ? lab::Cell("-") : lab::Cell(l)};
      for (size_t k = 0; k < s.measures.size(); ++k) {
        std::vector<double> v;
        for (const Measured* m : g.of(arm.name, l)) v.push_back(m->values[k]);
        row.push_back(lab::spread(v).mean);
      }
      t.row(row);
    }
    for (size_t k = 0; k < s.measures.size() && k < 64 && arm.levels.empty(); ++k) {  // no factor: the measure seed by seed
      ChartSeries c{arm.name, {}, {}, {}, {}, false, ""};
      for (int i = 0; i < g.seeds(); ++i) c.x.push_back(i + 1), c.y.push_back(g.at(arm.name, 0, i).values[k]);
      series[k].push_back(c);
    }
    if (arm.levels.empty()) continue;
    for (size_t k = 0; k < s.measures.size() && k < 64; ++k) {
      ChartSeries c{arm.name, arm.levels, {}, {}, {}, false, ""};
      for (double l : arm.levels) {
        std::vector<double> v;
        for (const Measured* m : g.of(arm.name, l)) v.push_back(m->values[k]);
        const lab::Interval iv = lab::t_interval(v);
        c.y.push_back(iv.mean), c.lo.push_back(iv.lo), c.hi.push_back(iv.hi);
      }
      series[k].push_back(c);
    }
  }
  r.print(t);
  for (size_t k = 0; k < s.measures.size() && k < 64; ++k) {
    if (s.factor_flag.empty())
      r.add_panel(Chart{s.measures[k].name + " per seed", "seed (the n-th of the run)", s.measures[k].expr, false, false, series[k], {},
                        Chart::Corner::TopRight});
    else
      r.add_panel(Chart{s.measures[k].name + " (band: 95% t over seeds)", "--" + s.factor_flag, s.measures[k].expr, false, false, series[k],
                        s.levels, Chart::Corner::TopRight});
  }
}

}  // namespace

lab::Lab spec_lab(const LabSpec& spec) {
  auto s = std::make_shared<const LabSpec>(spec);
  std::vector<lab::ArmSpec> arms;
  for (const SpecArm& a : s->arms) arms.push_back({a.name, s->arm_has_factor(a.name) ? s->levels : std::vector<double>{}});
  lab::Lab l = lab::make_lab(lab::Experiment<NoSettings, Context, Measured>{
      .info = {.name = s->name, .title = s->title, .reference = s->source, .question = s->question, .default_seeds = s->seeds,
               .null = s->null, .null_description = fmt::format("arm {}{}", s->null.arm, s->arm_has_factor(s->null.arm) ? fmt::format(" at {:g}", s->null.level) : ""),
               .placebo_pools = s->pools},
      .settings = lab::Fields<NoSettings>(std::vector<lab::Field<NoSettings>>{}),
      .arms = [arms](const NoSettings&) { return arms; },
      .prepare =
          [s](const NoSettings&, lab::Report& r) {
            Context c;
            c.runs_dir = (fs::path(r.out_dir()) / "runs").string();
            if (s->data_kind == "builtin") c.data = lab::builtin_corpus(s->pairs, 1);
            if (s->data_kind == "dir") c.real = lab::real_data(s->real, r), c.data = c.real->ids;
            r.say(fmt::format("experiment file {} ({}); {} steps a run; runs kept in {}", s->file, s->digest, s->steps, c.runs_dir));
            r.data()["spec"] = {{"file", s->file}, {"digest", s->digest}};
            return c;
          },
      .measure = [s](const NoSettings&, Context& c, const lab::RunKey& k) { return measure(*s, c, k); },
      .claims =
          [s](const NoSettings&) {
            std::vector<lab::ClaimDef<Measured>> out;
            for (const SpecClaim& c : s->claims) out.push_back(claim_of(*s, c));
            return out;
          },
      .describe = [s](const NoSettings&, const Context& c, const lab::Grid<Measured>& g, lab::Report& r) { describe(*s, c, g, r); }});
  l.first_seed = s->first_seed;
  return l;
}

}  // namespace gf::app

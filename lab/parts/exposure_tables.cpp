// Lab `exposure`'s tables, figure and JSON (declared in lab/exposure.h), from its runs.
#include <fmt/format.h>

#include <algorithm>

#include "lab/common.h"
#include "lab/exposure.h"

namespace gf::lab::exposure {
namespace {

// The first level is teacher forcing (rate 0), the one gap_grows and derails read.
constexpr size_t kTeacher = 0;
const char* const kLevelColors[] = {"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b"};
const char* level_color(size_t level) { return kLevelColors[level % (sizeof(kLevelColors) / sizeof(kLevelColors[0]))]; }

std::vector<std::string> words(const std::vector<int64_t>& ids, const train::Vocab& v) {
  std::vector<std::string> w;
  for (int64_t id : ids) w.push_back(v.token(id));
  return w;
}

nlohmann::json model_json(const TrainedModel& m) {
  return {{"steps", m.steps}, {"best_step", m.best_step}, {"converged", m.converged}, {"valid_steps", m.valid_steps}, {"valid_nll", m.valid_nll},
          {"valid_free_running", m.valid_free_running},
          {"train_seconds", m.train_seconds}};
}

void example_panels(Report& r, const Example& e, const TrainedModel& m, const std::string& what) {
  if (e.k < 0) return;
  r.add_panel(ValueMap{fmt::format("{}: clean (k = {})", what, e.k), "source token", "output token", words(e.clean, m.tgt_words), words(e.src, m.src_words),
                       e.clean_rows, false, "attention"});
  std::vector<std::string> labels = words(e.forced, m.tgt_words);
  labels[static_cast<size_t>(e.k)] += " (forced)";
  r.add_panel(ValueMap{fmt::format("{}: after the forced token", what), "source token", "output token", labels, words(e.src, m.src_words), e.forced_rows,
                       false, "attention"});
}

}  // namespace

std::string level_name(double rate) { return rate == 0 ? std::string("teacher forcing") : fmt::format("SS k {:g}", 100 / rate); }

void to_json(nlohmann::json& j, const Measured& m) {
  const ModelStudy& s = m.study;
  const Drift& x = s.drift;
  j = {{"model", model_json(m.model)},
       {"positions", {{"total", s.pos.total}, {"teacher_forced_right", s.pos.tf_right}, {"free_running_right", s.pos.fr_right}}},
       {"forced", {{"steps", x.both}, {"changed", x.changed}, {"reference_steps", x.ref_steps}, {"errors_clean", x.err_clean},
                   {"errors_forced", x.err_forced}, {"tv_sum", x.tv_sum}, {"tv_n", x.tv_n}, {"tv_same_token_sum", x.tv_same_sum},
                   {"tv_same_token_n", x.tv_same_n}, {"sentences", x.sentences}, {"reference_tokens_after_k", x.suffix_tokens},
                   {"edits_clean", x.edits_clean}, {"edits_forced", x.edits_forced}, {"recovered_clean", x.exact_clean},
                   {"recovered_forced", x.exact_forced}}},
       {"bleu_by_third", {{"teacher_forced", s.pos.tf_bleu}, {"free_running", s.pos.fr_bleu}}},
       {"token_accuracy_teacher_forced", s.tf_accuracy}, {"token_accuracy_free_running", s.fr_tokens}, {"exact_free_running", s.fr_exact}};
}

nlohmann::json example_json(const Example& e, const TrainedModel& m) {
  return {{"sentence", e.index}, {"source", words(e.src, m.src_words)}, {"reference", words(e.reference, m.tgt_words)}, {"forced_step", e.k},
          {"clean", words(e.clean, m.tgt_words)},
          {"forced", words(e.forced, m.tgt_words)}, {"clean_cross_attention", e.clean_rows}, {"forced_cross_attention", e.forced_rows}};
}

namespace {

// The gap in BLEU, by third of the sentence (PositionCounts::tf_bleu, fr_bleu): reported, not claimed.
void bleu_thirds_table(Report& r, const Levels& res, const std::vector<double>& rates) {
  r.section("corpus BLEU by third of each reference (token ids as words; <eos> left out): teacher-forced predictions vs free-running output; "
            "means over seeds");
  std::vector<std::string> cols{"third"};
  for (double rate : rates) cols.insert(cols.end(), {level_name(rate) + ": teacher-forced", "free-running", "gap"});
  Table t("bleu by third", cols);
  const char* names[kThirds] = {"first", "middle", "last"};
  for (int k = 0; k < kThirds; ++k) {
    std::vector<Cell> row{std::string(names[k])};
    for (const auto& level : res) {
      std::vector<double> tf, fr;
      for (const Measured* s : level) tf.push_back(s->study.pos.tf_bleu[k]), fr.push_back(s->study.pos.fr_bleu[k]);
      row.insert(row.end(), {spread(tf).mean, spread(fr).mean, spread(tf).mean - spread(fr).mean});
    }
    t.row(row);
  }
  r.print(t);
  r.say("Exposure bias reads as a gap that widens from the first third to the last; BLEU here is reported, not claimed.");
}

}  // namespace

PositionSeries position_section(Report& r, const Levels& res, const std::vector<double>& rates, size_t P, int64_t min_support) {
  PositionSeries ps;
  ps.tf.resize(res.size()), ps.fr.resize(res.size()), ps.gap.resize(res.size());
  r.section(fmt::format("next-token accuracy per target position: teacher-forced (true prefix) vs free-running (own prefix); positions with >= {} "
                        "sentences in every model; means over seeds",
                        min_support));
  std::vector<std::string> cols{"position", "sentences"};
  for (double rate : rates) {
    const std::string n = level_name(rate);
    cols.insert(cols.end(), {n + ": teacher-forced", "free-running", "gap"});
  }
  Table t("positions", cols);
  for (size_t j = 0; j < P; ++j) {
    int64_t sentences = 0;
    for (const Measured* s : res[kTeacher]) sentences += s->study.pos.total[j];
    std::vector<Cell> row{static_cast<int64_t>(j), sentences};
    for (size_t l = 0; l < res.size(); ++l) {
      std::vector<double> tf, fr, gap;
      for (const Measured* m : res[l]) {
        const PositionCounts& c = m->study.pos;
        tf.push_back(ratio(c.tf_right[j], c.total[j]));
        fr.push_back(ratio(c.fr_right[j], c.total[j]));
        gap.push_back(tf.back() - fr.back());
      }
      ps.tf[l].push_back(spread(tf)), ps.fr[l].push_back(spread(fr)), ps.gap[l].push_back(spread(gap));
      row.insert(row.end(), {ps.tf[l].back().mean, ps.fr[l].back().mean, ps.gap[l].back().mean});
    }
    t.row(row);
    ps.xs.push_back(static_cast<double>(j));
  }
  r.print(t);
  r.say("sentences: summed over the seeds' test sets. Position j is the j-th target token (a sentence's last one is <eos>).");
  bleu_thirds_table(r, res, rates);
  return ps;
}

DriftSeries drift_section(Report& r, const Levels& res, const std::vector<double>& rates, int64_t D) {
  DriftSeries dr;
  dr.e_forced.resize(res.size()), dr.e_clean.resize(res.size()), dr.changed.resize(res.size()), dr.tv.resize(res.size());
  r.section("a wrong token forced at one step k, then greedy decoding, against greedy decoding from the same true prefix (means over seeds)");
  std::vector<std::string> cols{"offset d"};
  for (double rate : rates) cols.insert(cols.end(), {level_name(rate) + ": tokens changed", "error, forced", "error, clean", "TV of attention rows"});
  Table f("forced", cols);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<Cell> row{d + 1};
    for (size_t arm = 0; arm < res.size(); ++arm) {
      std::vector<double> ch, ef, ec, v;
      for (const Measured* s : res[arm]) {
        const Drift& x = s->study.drift;
        ch.push_back(ratio(x.changed[d], x.both[d]));
        ef.push_back(ratio(x.err_forced[d], x.ref_steps[d]));
        ec.push_back(ratio(x.err_clean[d], x.ref_steps[d]));
        v.push_back(x.tv_n[d] ? x.tv_sum[d] / static_cast<double>(x.tv_n[d]) : NAN);
      }
      row.insert(row.end(), {spread(ch).mean, spread(ef).mean, spread(ec).mean, spread(v).mean});
      dr.changed[arm].push_back(spread(ch).mean), dr.e_forced[arm].push_back(spread(ef).mean), dr.e_clean[arm].push_back(spread(ec).mean);
      dr.tv[arm].push_back(spread(v).mean);
    }
    f.row(row);
    dr.ds.push_back(static_cast<double>(d + 1));
  }
  r.print(f);
  r.say("tokens changed: share of later steps where the two continuations differ; error: share of reference tokens at step k + d the continuation");
  r.say("gets wrong (position by position); TV: total variation distance between the two continuations' cross-attention rows (0 same, 1 disjoint).");
  Table sfx("recovery", {"arm", "seed", "sentences", "edits per reference token, forced", "edits, clean", "recovered, forced", "recovered, clean"});
  for (size_t arm = 0; arm < res.size(); ++arm)
    for (size_t i = 0; i < res[arm].size(); ++i) {
      const Drift& x = res[arm][i]->study.drift;
      sfx.row({level_name(rates[arm]), static_cast<int64_t>(r.seed(static_cast<int>(i))), x.sentences, ratio(x.edits_forced, x.suffix_tokens),
               ratio(x.edits_clean, x.suffix_tokens), ratio(x.exact_forced, x.sentences), ratio(x.exact_clean, x.sentences)});
    }
  r.print(sfx);
  r.say("edits: token edit distance of the continuation after step k to the reference's rest (from step k or k + 1, whichever is nearer), per");
  r.say("reference token; recovered: share of sentences at distance 0.");
  return dr;
}

void figure(Report& r, const PositionSeries& ps, const DriftSeries& dr, const Levels& res, const std::vector<double>& rates) {
  Chart acc{"free-running accuracy per position (band: seeds); dashed: teacher-forced, teacher forcing's model", "target position", "accuracy", false,
            false, {}, ps.xs};
  Chart gap{"teacher-forced minus free-running (band: seeds)", "target position", "accuracy gap", false, false, {}, ps.xs};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    acc.series.push_back(band_series(level_name(rates[arm]) + ", free-running", ps.xs, ps.fr[arm], level_color(arm)));
    gap.series.push_back(band_series(level_name(rates[arm]), ps.xs, ps.gap[arm], level_color(arm)));
  }
  acc.series.push_back(band_series(level_name(0) + ", teacher-forced", ps.xs, ps.tf[kTeacher], level_color(kTeacher), true));
  acc.legend = Chart::Corner::BottomLeft;
  gap.legend = Chart::Corner::TopLeft;
  r.add_panel(acc);
  r.add_panel(gap);
  Chart after{"error rate after step k (solid: forced token; dashed: true prefix)", "steps after k (d)", "error rate", false, false, {}, dr.ds};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    after.series.push_back({level_name(rates[arm]) + ", forced", dr.ds, dr.e_forced[arm], {}, {}, false, level_color(arm)});
    after.series.push_back({level_name(rates[arm]) + ", clean", dr.ds, dr.e_clean[arm], {}, {}, true, level_color(arm)});
  }
  after.legend = Chart::Corner::TopRight;
  r.add_panel(after);
  int64_t last = 0;
  for (const auto& level : res)
    for (const Measured* m : level) last = std::max(last, m->model.valid_steps.empty() ? int64_t{0} : m->model.valid_steps.back());
  std::vector<double> ticks;
  const int64_t every = last <= 600 ? 100 : last <= 1500 ? 250 : 500;
  for (int64_t t = 0; t <= last + every - 1; t += every) ticks.push_back(static_cast<double>(t));
  // The first seed's models only: one curve per level keeps the legend readable.
  Chart curves{fmt::format("held-out NLL per token while training (seed {})", r.seed(0)), "step", "NLL", false, true, {}, ticks};
  for (size_t arm = 0; arm < res.size(); ++arm) {
    const TrainedModel& m = res[arm][0]->model;
    std::vector<double> x(m.valid_steps.begin(), m.valid_steps.end());
    curves.series.push_back({level_name(rates[arm]), x, m.valid_nll, {}, {}, arm != kTeacher, level_color(arm)});
  }
  curves.legend = Chart::Corner::TopRight;
  r.add_panel(curves);
  const Example& e = res[kTeacher][0]->study.derailed;
  example_panels(r, e, res[kTeacher][0]->model, fmt::format("TF model, sentence {}", e.index));
}

}  // namespace gf::lab::exposure

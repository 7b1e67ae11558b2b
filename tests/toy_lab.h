#pragma once
// A lab's output written by the real lab::Report (lab/report.h), for the lab-page tests
// (tests/test_report.cpp, tests/test_report_browser.cpp): lab "toy" with two paper claims (one a
// target of its control), one exact check, a printed table, a figure and (the lab) a dose-response, run once as the lab
// (PARENT/toy, agrees) and once as its control (PARENT/toy-control, disagrees). Its claims are
// given to the Report, not taken from lab/claims.cpp, as the lab framework's own tests do.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/lab.h"
#include "lab/report.h"

namespace gf::test {

inline const lab::Lab& toy_lab() {
  static const lab::Lab l = [] {
    lab::Lab t;
    t.name = "toy";
    t.title = "a toy lab for the page tests";
    t.reference = "Nobody et al. 2024, arXiv:2401.00001 (Figure 1)";
    t.question = "Does the page show claims, intervals and the control?";
    t.control = "the ingredient removed";
    return t;
  }();
  return l;
}

inline std::vector<lab::ClaimSpec> toy_specs() {
  using lab::ClaimKind, lab::Compare;
  std::vector<lab::ClaimSpec> s = {
      {"toy", "grows", ClaimKind::Paper, "the ratio grows above 2", Compare::Above, 2.0, "Figure 1 of the paper", true},
      {"toy", "small_loss", ClaimKind::Paper, "the loss stays below 0.5", Compare::Below, 0.5, "section 3", false},
      {"toy", "exact_zero", ClaimKind::Check, "the masked entry is exactly 0", Compare::Below, 1e-30, "the mask's definition", false}};
  // grows' design: an effect of 1 at a pilot sd of 0.5 needs 5 seeds at 0.05 / 2 (t(0.9875, 4) = 3.50:
  // 3.50 x 0.5 / sqrt(5) = 0.78 < 1; at 4 seeds 4.18 x 0.5 / 2 = 1.04), so the control's 3 seeds leave
  // it unsettled by design.
  s[0].min_effect = 1.0, s[0].pilot_sd = 0.5, s[0].pilot_n = 5, s[0].min_effect_reason = "half the threshold's distance from 0";
  return s;
}

// Writes PARENT/toy (control false) or PARENT/toy-control (control true); returns the folder.
inline std::filesystem::path write_toy_lab(const std::filesystem::path& parent, bool control) {
  const std::filesystem::path dir = parent / (control ? "toy-control" : "toy");
  std::FILE* quiet = std::tmpfile();
  lab::Report r(toy_lab(), {{"out", dir.string()}, {"seeds", "3"}, {"seed", "1"}, {"control", control ? "1" : "0"}}, quiet, toy_specs());
  // The control removes what makes the ratio grow: its values straddle the threshold.
  r.paper("grows", control ? std::vector<double>{1.1, 1.4, 2.6} : std::vector<double>{3.1, 3.4, 3.2}, "ratios per seed");
  r.paper("small_loss", {0.21, 0.25, 0.23}, "losses per seed");
  r.check("exact_zero", 0.0, "max |entry|");
  lab::Table t("ratios", {"seed", "ratio"});
  t.row({1, control ? 1.1 : 3.1}).row({2, control ? 1.4 : 3.4}).row({3, control ? 2.6 : 3.2});
  r.print(t);
  r.say("a line of the log");
  Chart c;
  c.title = "ratio per seed";
  c.x_label = "seed";
  c.y_label = "ratio";
  c.series.push_back({"ratio", {1, 2, 3}, control ? std::vector<double>{1.1, 1.4, 2.6} : std::vector<double>{3.1, 3.4, 3.2}, {}, {}, false, ""});
  r.add_panel(c);
  // A dose-response (the lab only): the page draws its mean and band in its own section.
  if (!control) r.dose_response({"level", "level", "ratio", {1, 2, 4, 8}, {{1, 2, 3, 4}, {1.2, 2.1, 2.9, 4.4}, {0.9, 1.8, 3.2, 4.1}},
                                 lab::TrendKind::LogSlope, true, ""});
  r.finish();
  std::fclose(quiet);
  return dir;
}

}  // namespace gf::test

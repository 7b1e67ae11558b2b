// Lab `entropy` (lab/labs/entropy.cpp): its ablation and its placebo at tiny settings. (Its
// dose-response and --lrs are tested in tests/test_lab_norm.cpp, --data in tests/test_lab_data.cpp.)
#include <doctest/doctest.h>

#include "lab_run.h"

using namespace gf;
using gf::test::claim_of;
using gf::test::placebo_of;

namespace {

const std::map<std::string, std::string> kTiny{{"pairs", "40"}, {"symbols", "6"}, {"min-len", "3"}, {"max-len", "5"},  {"d-model", "16"},
                                               {"heads", "2"},  {"layers", "1"},  {"ff", "32"},     {"steps", "4"}, {"every", "2"},
                                               {"max-tokens", "128"}};

std::map<std::string, std::string> tiny_with(const std::string& flag) {
  auto s = kTiny;
  s[flag] = std::string("1");
  return s;
}

}  // namespace

TEST_CASE("lab entropy --ablate: every run at the safe rate, so no trend, equal losses, and the same numbers as the safe rate's runs") {
  const test::TempDir dir("gf_test_lab_entropy");
  const test::LabRun run = test::run_lab_in(dir, "entropy", tiny_with("ablate"));
  const auto& runs = run.j.at("data").at("runs");
  REQUIRE(runs.size() == 2 * 5);  // 2 seeds x (4 plain levels + σReparam)
  for (const auto& r : runs) CHECK(r.at("measured").at("lr") == 0.001);
  for (double v : claim_of(run.j, "entropy_collapse_trend").at("values")) CHECK(v == 0.0);
  for (double v : claim_of(run.j, "worse_loss").at("values")) CHECK(v == 1.0);
  // The plain runs at every level are the safe rate's, seed by seed.
  for (const auto& r : runs)
    for (const auto& q : runs)
      if (r.at("arm") == "plain" && q.at("arm") == "plain" && r.at("seed") == q.at("seed"))
        CHECK(r.at("measured").at("losses") == q.at("measured").at("losses"));
  for (const char* id : {"entropy_collapse_trend", "worse_loss", "reparam_entropy", "reparam_loss"})
    CHECK(claim_of(run.j, id).at("outcome") != "supported");
}

TEST_CASE("lab entropy --control: the placebo puts a plain run at the high rate, on a seed of its own, in every condition a claim reads") {
  const test::TempDir dir("gf_test_lab_entropy");
  const test::LabRun run = test::run_lab_in(dir, "entropy", tiny_with("control"));
  // Pools of 2 seeds x the conditions each claim reads: the trend's 4 levels, the contrasts' 2 arms.
  CHECK(placebo_of(run.j, "entropy_collapse_trend").at("pool") == 8);
  for (const char* id : {"worse_loss", "reparam_entropy", "reparam_loss"}) {
    CAPTURE(id);
    CHECK(placebo_of(run.j, id).at("pool") == 4);
    CHECK(placebo_of(run.j, id).at("splits") == 1);
  }
  // Runs of one condition on different seeds: the trend's levels and the arms' runs differ.
  CHECK(claim_of(run.j, "entropy_collapse_trend").at("values")[0] != 0.0);
  CHECK(claim_of(run.j, "reparam_loss").at("values")[0] != 1.0);
}

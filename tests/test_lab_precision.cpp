// Lab `precision` (lab/labs/precision.cpp): its training arms, its softmax arithmetic and its
// placebo at tiny settings.
#include <doctest/doctest.h>

#include <cmath>

#include "lab/precision.h"
#include "lab_run.h"

using namespace gf;
using namespace gf::lab;
using gf::test::claim_of;
using gf::test::placebo_of;

namespace {

const std::map<std::string, std::string> kTiny{{"pairs", "200"}, {"d-model", "16"}, {"steps", "6"},  {"warmup", "2"},
                                               {"max-tokens", "256"}, {"eval-pairs", "10"}, {"lengths", "16,256"}, {"head-dim", "16"},
                                               {"rows", "4"}};

}  // namespace

TEST_CASE("train_bf16_arm: the same start and batches in both arms; the float32 master loses no update, the stored weights lose some") {
  const IdData data = builtin_corpus(200, 1);
  BF16Training t;
  t.d_model = 16, t.steps = 6, t.warmup = 2, t.max_tokens = 256, t.eval_pairs = 10;
  const BF16Arm stored = train_bf16_arm(data, t, 3, false, false), master = train_bf16_arm(data, t, 3, true, true);
  REQUIRE(stored.losses.size() == 6);
  REQUIRE(master.losses.size() == 6);
  CHECK(stored.losses.front() == master.losses.front());  // the same bfloat16 weights on the same first batch
  CHECK(master.lost_share == 0.0);
  for (const GroupStats& g : master.groups) CHECK(g.lost == 0.0);
  CHECK(stored.lost_share > 0.0);
  CHECK(stored.lost_share <= 1.0);
  CHECK(stored.group_names == master.group_names);
  CHECK(std::isfinite(stored.nll));
  CHECK(std::isfinite(master.nll));
  // Only the master arm keeps its last step's gradients: the logits' (B, T, V) and every parameter's.
  CHECK_FALSE(stored.logit_grad.defined());
  REQUIRE(master.logit_grad.defined());
  CHECK(master.logit_grad.ndim() == 3);  // (B, T, V)
  CHECK(master.param_grads.size() > 10);
}

TEST_CASE("softmax_errors: reproducible, and the running sum in bfloat16 errs more at long length than bf16 products alone") {
  const SoftmaxErrors a = softmax_errors(1024, 32, 8, 2.0, 5), b = softmax_errors(1024, 32, 8, 2.0, 5);
  CHECK(a.products == b.products);
  CHECK(a.all_bf16 == b.all_bf16);
  CHECK(a.products > 0);
  CHECK(a.all_bf16 > 4 * a.products);
  const SoftmaxErrors shorter = softmax_errors(16, 32, 8, 2.0, 5);
  CHECK(a.all_bf16 > shorter.all_bf16);
}

TEST_CASE("lab precision, tiny settings: its seven claims, and a placebo only for the contrast of held-out NLL") {
  const test::TempDir dir("gf_test_lab_precision");
  const test::LabRun run = test::run_lab_in(dir, "precision", kTiny);
  REQUIRE(run.j.at("claims").size() == 7);
  for (const auto& c : run.j.at("claims")) CHECK_FALSE(c.at("evidence").get<std::string>().empty());
  CHECK(run.j.at("data").at("runs").size() == 2 * 4);  // 2 seeds x (2 training arms + 2 lengths)
  CHECK(claim_of(run.j, "bf16_keeps_range").at("values").size() == 1);  // the largest share over the seeds
  const test::TempDir control_dir("gf_test_lab_precision");
  auto settings = kTiny;
  settings["control"] = std::string("1");
  const test::LabRun control = test::run_lab_in(control_dir, "precision", settings);
  CHECK(placebo_of(control.j, "master_weights_needed").at("pool") == 4);  // 2 seeds x its 2 arms, each a float32-master run
  CHECK(placebo_of(control.j, "master_weights_needed").at("splits") == 1);
  for (const char* id : {"updates_round_away", "stall_follows_ratio", "fp16_would_underflow", "bf16_softmax_sum_degrades", "fp32_softmax_holds"}) {
    CAPTURE(id);
    CHECK(placebo_of(control.j, id).at("splits") == 0);
  }
  CHECK(placebo_of(control.j, "stall_follows_ratio").at("how").get<std::string>().find("rank correlation across module groups") != std::string::npos);
}

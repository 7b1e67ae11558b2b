// lab::fit's options for the exposure lab: training until the held-out loss stops improving (the
// best weights restored), and scheduled sampling (the decay, the share of inputs replaced, and
// nothing changed when it is off).
#include <doctest/doctest.h>

#include <cmath>

#include "lab/common.h"

using namespace gf;
using namespace gf::lab;

TEST_CASE("scheduled sampling's inverse-sigmoid decay: k / (k + exp(step / k)), 1 when off") {
  ScheduledSampling s;
  CHECK(s.gold_probability(1000) == 1.0);
  s.k = 100;
  CHECK(s.gold_probability(0) == doctest::Approx(100.0 / 101.0));
  CHECK(s.gold_probability(static_cast<int64_t>(std::round(100 * std::log(100.0)))) == doctest::Approx(0.5).epsilon(1e-3));
  CHECK(s.gold_probability(2000) < 1e-6);
  for (int64_t t = 0; t < 1000; t += 50) CHECK(s.gold_probability(t + 50) < s.gold_probability(t));
}

TEST_CASE("fit with scheduled sampling off is fit as it was; on, it replaces more inputs as the decay falls") {
  const IdData d = synthetic_task("copy", 6, 2, 5, 200, 0, 5);
  FitOptions o;
  o.steps = 40;
  o.lr = 3e-3;
  o.max_tokens = 256;
  nn::Seq2SeqTransformer a(small_model(d, 32, 2, 1, 64, true), 3), b(small_model(d, 32, 2, 1, 64, true), 3);
  const FitResult ra = fit(a, d.train, o);
  FitOptions off = o;
  off.sampling.k = 0;
  const FitResult rb = fit(b, d.train, off);
  CHECK(ra.losses == rb.losses);
  CHECK(rb.sampled_share.empty());

  nn::Seq2SeqTransformer c(small_model(d, 32, 2, 1, 64, true), 3);
  FitOptions on = o;
  on.sampling.k = 5;  // gold probability 5/6 at step 0, under 0.01 by step 35
  const FitResult rc = fit(c, d.train, on);
  REQUIRE(rc.sampled_share.size() == 40);
  CHECK(rc.losses != ra.losses);
  double early = 0, late = 0;
  for (int i = 0; i < 5; ++i) early += rc.sampled_share[i] / 5, late += rc.sampled_share[35 + i] / 5;
  CAPTURE(early);
  CAPTURE(late);
  CHECK(early < 0.3);
  CHECK(late > 0.4);  // nearly every input is the model's own draw; some draws are the true token
  for (double s : rc.sampled_share) CHECK((s >= 0 && s <= 1));
}

namespace {

// Training until converged on d's held-out pairs: a measurement every 10 steps, 3 without a 5% gain stop it.
FitOptions until_converged(const IdData& d) {
  FitOptions o;
  o.steps = 2000;
  o.lr = 3e-3;
  o.max_tokens = 256;
  o.until.valid = &d.test;
  o.until.every = 10;
  o.until.patience = 3;
  o.until.min_improvement = 0.05;
  return o;
}

}  // namespace

TEST_CASE("fit until converged: stops by the rule, keeps the best measurement's weights") {
  const IdData d = synthetic_task("copy", 6, 2, 5, 300, 40, 7);
  nn::Seq2SeqTransformer model(small_model(d, 32, 2, 1, 64, true), 4);
  FitOptions o = until_converged(d);
  const FitResult r = fit(model, d.train, o);
  REQUIRE_FALSE(r.valid_nll.empty());
  CHECK(r.valid_steps.size() == r.valid_nll.size());
  CHECK(r.converged);
  CHECK(static_cast<int64_t>(r.losses.size()) < 2000);
  CHECK(r.valid_steps.back() == static_cast<int64_t>(r.losses.size()));
  // The kept weights are those of the lowest measurement.
  size_t best = 0;
  for (size_t i = 1; i < r.valid_nll.size(); ++i)
    if (r.valid_nll[i] < r.valid_nll[best]) best = i;
  CHECK(r.best_step == r.valid_steps[best]);
  model.eval();
  CHECK(teacher_forced(model, d.test).nll == r.valid_nll[best]);
  // The rule: the last `patience` measurements did not beat the bar by 5%.
  double bar = INFINITY;
  size_t last_improvement = 0;
  for (size_t i = 0; i < r.valid_nll.size(); ++i)
    if (r.valid_nll[i] < bar * 0.95) bar = r.valid_nll[i], last_improvement = i;
  CHECK(r.valid_nll.size() - 1 - last_improvement == 3);
  o.until.patience = 0;
  CHECK_THROWS_AS(fit(model, d.train, o), std::invalid_argument);
}

TEST_CASE("fit until converged, selecting by free-running accuracy: the same stop, the weights of the best greedy score") {
  const IdData d = synthetic_task("copy", 6, 2, 5, 300, 40, 7);
  nn::Seq2SeqTransformer by_nll(small_model(d, 32, 2, 1, 64, true), 4), by_fr(small_model(d, 32, 2, 1, 64, true), 4);
  FitOptions o = until_converged(d);
  const FitResult a = fit(by_nll, d.train, o);
  o.until.select_free_running = true;
  o.until.select_limit = 30;
  const FitResult r = fit(by_fr, d.train, o);
  CHECK(a.valid_free_running.empty());
  // Selection does not change training or the stop: the same steps and held-out NLLs.
  CHECK(r.losses == a.losses);
  CHECK(r.valid_nll == a.valid_nll);
  REQUIRE(r.valid_free_running.size() == r.valid_nll.size());
  size_t best = 0;  // the first of the highest
  for (size_t i = 1; i < r.valid_free_running.size(); ++i)
    if (r.valid_free_running[i] > r.valid_free_running[best]) best = i;
  CHECK(r.best_step == r.valid_steps[best]);
  by_fr.eval();
  CHECK(free_running_accuracy(by_fr, d.test, 30).tokens == r.valid_free_running[best]);
}

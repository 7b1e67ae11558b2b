// The end of a run: --schedule wsd (warm-up, stable, then a decay to 0 over the last part of the
// budget, measured as a fraction of it), --patience (validation evaluations without a better loss
// end the run; resume continues the count), and the built-in recipe's gradient statistics on by
// default.
#include <doctest/doctest.h>
#include <fmt/core.h>

#include <cmath>
#include <filesystem>

#include "app/flags.h"
#include "app/recipe_flags.h"
#include "app/train_args.h"
#include "optim/adam.h"
#include "optim/schedule.h"
#include "tests/temp_dir.h"
#include "train/run/checkpoint.h"
#include "train/loop/early_stop.h"
#include "train/loop/trainer.h"

#include "tiny_run.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {

// `gradflow train ARGS` parsed as cmd_train parses it, nothing run.
struct Parsed {
  app::Flags f = app::train_flags();
  train::TrainOptions opt;
  train::RunConfig c;
};
Parsed parse_train(std::vector<std::string> args, const train::RunConfig* resumed = nullptr) {
  Parsed p;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  REQUIRE(p.f.parse(static_cast<int>(argv.size()), argv.data()));
  p.opt = app::train_options(p.f);
  p.c = app::train_config(p.f, resumed);
  app::apply_builtin_options(p.f, p.c, p.opt);
  return p;
}

// 200 pairs of the built-in corpus in one or two batches an epoch.
train::RunConfig tiny_run() {
  train::RunConfig c = gf::test::tiny_run(200);
  c.warmup = 2, c.max_tokens = 2048, c.log_every = 1000000;
  return c;
}

}  // namespace

TEST_CASE("wsd: linear warm-up, the peak rate, then a 1-sqrt decay to 0 over the last decay_fraction of the budget") {
  // warm-up: (step + 1) / warmup, whatever the progress before the decay
  CHECK(optim::wsd_factor(0, 10, 0.0, 0.2) == doctest::Approx(0.1));
  CHECK(optim::wsd_factor(4, 10, 0.3, 0.2) == doctest::Approx(0.5));
  // plateau: the peak until the decay starts at progress 1 - 0.2 = 0.8
  CHECK(optim::wsd_factor(9, 10, 0.0, 0.2) == 1.0);
  CHECK(optim::wsd_factor(500, 10, 0.5, 0.2) == 1.0);
  CHECK(optim::wsd_factor(500, 10, 0.8, 0.2) == 1.0);  // the decay's start
  // decay: 1 - sqrt((p - 0.8) / 0.2)
  CHECK(optim::wsd_factor(500, 10, 0.85, 0.2) == doctest::Approx(0.5));  // a quarter into the decay
  CHECK(optim::wsd_factor(500, 10, 0.9, 0.2) == doctest::Approx(1 - std::sqrt(0.5)));
  CHECK(optim::wsd_factor(500, 10, 0.999, 0.2) == doctest::Approx(1 - std::sqrt(0.995)));
  CHECK(optim::wsd_factor(500, 10, 0.999, 0.2) < 0.003);  // about 0 at the end
  CHECK(optim::wsd_factor(500, 10, 1.0, 0.2) == 0.0);
  CHECK(optim::wsd_factor(500, 10, 1.7, 0.2) == 0.0);  // past the budget (a clock's overshoot): clamped
  CHECK(optim::wsd_factor(500, 10, -1.0, 0.2) == 1.0);
  CHECK(optim::wsd_factor(500, 10, NAN, 0.2) == 1.0);
  // a decay that starts inside the warm-up takes the lower of the two
  CHECK(optim::wsd_factor(1, 10, 0.95, 0.2) == doctest::Approx(std::min(0.2, 1 - std::sqrt(0.75))));
  // decay_fraction 1: the decay starts after step 0's progress
  CHECK(optim::wsd_factor(0, 1, 0.0, 1.0) == 1.0);
  CHECK(optim::wsd_factor(5, 1, 0.25, 1.0) == doctest::Approx(0.5));
}

TEST_CASE("LrSchedule: inverse-sqrt ignores the progress and is warmup_inverse_sqrt; wsd scales the base rate by a fraction of the time") {
  const optim::LrSchedule inv{"inverse-sqrt", 400, 0.15};
  for (int64_t s : {0, 1, 399, 400, 5000}) CHECK(inv.lr(2e-3, s, 0.99) == optim::warmup_inverse_sqrt(2e-3, s, 400));
  CHECK_FALSE(inv.uses_progress());
  // A time budget: the trainer passes seconds spent / budget seconds. A 4-minute run, 15% decay:
  // the decay starts at 204 s, the rate is half the peak at 213 s, and about 0 at 240 s.
  const optim::LrSchedule wsd{"wsd", 400, 0.15};
  CHECK(wsd.uses_progress());
  auto at_seconds = [&](int64_t step, double seconds) { return wsd.lr(2e-3, step, seconds / 240.0); };
  CHECK(at_seconds(99, 30) == doctest::Approx(2e-3 * 100 / 400));  // warm-up
  CHECK(at_seconds(1000, 120) == 2e-3);                             // plateau
  CHECK(at_seconds(2000, 204) == doctest::Approx(2e-3));            // decay start
  CHECK(at_seconds(2100, 213) == doctest::Approx(1e-3));
  CHECK(at_seconds(2600, 239.9) < 2e-3 * 0.03);
  CHECK(at_seconds(2600, 240) == 0.0);
  CHECK_THROWS_WITH_AS(optim::LrSchedule({"cosine", 1, 0.1}).lr(1, 0, 0), "unknown learning-rate schedule 'cosine'", std::invalid_argument);
}

TEST_CASE("--schedule, --decay-fraction, --patience: parsed into config.json, checked, and given again on resume") {
  Parsed p = parse_train({"--schedule", "wsd", "--decay-fraction", "0.2", "--patience", "3", "--steps", "10"});
  CHECK(p.c.schedule == "wsd");
  CHECK(p.c.decay_fraction == 0.2);
  CHECK(p.c.patience == 3);
  const train::RunConfig back = train::RunConfig::from_json(p.c.to_json(), "config.json");
  CHECK(back.schedule == "wsd");
  CHECK(back.decay_fraction == 0.2);
  CHECK(back.patience == 3);
  // defaults with --data, from RunConfig: one source
  Parsed d = parse_train({"--data", "corpus.tsv", "--steps", "10"});
  CHECK(d.c.schedule == train::RunConfig{}.schedule);
  CHECK(d.c.schedule == "inverse-sqrt");
  CHECK(d.c.decay_fraction == 0.15);
  CHECK(d.c.patience == 0);
  // the built-in corpus's recipe ends with its budget and stops early, unless told otherwise
  Parsed b = parse_train({"--steps", "10"});
  CHECK(b.c.schedule == app::builtin_recipe().config.schedule);
  CHECK(b.c.schedule == "wsd");
  CHECK(b.c.patience == 3);
  CHECK(b.c.minutes == 0);  // a budget flag was given: the built-in minutes do not apply
  Parsed b0 = parse_train({"--patience", "0", "--schedule", "inverse-sqrt"});
  CHECK(b0.c.patience == 0);
  CHECK(b0.c.schedule == "inverse-sqrt");
  CHECK(b0.c.minutes == app::builtin_recipe().config.minutes);
  // a config.json without the fields (an older run) reads as those defaults
  train::RunConfig old = train::RunConfig::from_json(R"({"lr": 0.002, "warmup": 400})", "old.json");
  CHECK(old.schedule == "inverse-sqrt");
  CHECK(old.patience == 0);
  // resume keeps the run's, unless given again
  Parsed r = parse_train({"--resume", "somewhere"}, &back);
  CHECK(r.c.patience == 3);
  CHECK(r.c.schedule == "wsd");
  Parsed r2 = parse_train({"--resume", "somewhere", "--patience", "0", "--schedule", "inverse-sqrt"}, &back);
  CHECK(r2.c.patience == 0);
  CHECK(r2.c.schedule == "inverse-sqrt");
  // bad values are usage errors naming the flag
  CHECK_THROWS_WITH_AS(parse_train({"--schedule", "cosine"}), doctest::Contains("--schedule must be one of inverse-sqrt, wsd, constant, got 'cosine'"),
                       app::UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--decay-fraction", "0"}), doctest::Contains("--decay-fraction must be in (0, 1]"), app::UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--decay-fraction", "1.5"}), doctest::Contains("--decay-fraction must be in (0, 1]"), app::UsageError);
  CHECK_THROWS_WITH_AS(parse_train({"--patience", "-1"}), doctest::Contains("--patience cannot be negative"), app::UsageError);
}

TEST_CASE("the built-in recipe records gradient statistics every 10 steps unless --grad-stats says otherwise") {
  CHECK(parse_train({}).opt.grad_stats == 10);                          // the first command
  CHECK(parse_train({"--steps", "5"}).opt.grad_stats == 10);
  CHECK(parse_train({"--grad-stats", "0"}).opt.grad_stats == 0);        // off
  CHECK(parse_train({"--grad-stats", "25"}).opt.grad_stats == 25);
  CHECK(parse_train({"--data", "pairs.tsv"}).opt.grad_stats == 0);      // your own data: off unless asked
  train::RunConfig builtin;
  builtin.src = "en", builtin.tgt = "ko";
  CHECK(parse_train({"--resume", "runs/latest"}, &builtin).opt.grad_stats == 10);  // a built-in run keeps recording when resumed
}

TEST_CASE("early_stop: evaluations since the best, the verdict at the patience, and why") {
  using train::CurvePoint;
  CHECK_FALSE(train::early_stop({}, 2).stop);
  const std::vector<CurvePoint> curve = {{10, 3.0}, {20, 2.5}, {30, 2.6}, {40, 2.5}, {50, 2.7}};  // 2.5 again is no gain
  const train::EarlyStop e = train::early_stop(curve, 3);
  CHECK(e.evaluations == 5);
  CHECK(e.since_best == 3);
  CHECK(e.best.step == 20);
  CHECK(e.stop);
  CHECK(e.reason(3) == "validation loss has not improved for 3 evaluations (best 2.5000 at step 20; --patience 3)");
  CHECK_FALSE(train::early_stop(curve, 4).stop);
  CHECK_FALSE(train::early_stop(curve, 0).stop);  // 0: off
  CHECK_FALSE(train::early_stop({{10, 3.0}, {20, 2.9}}, 1).stop);
  const train::EarlyStop nan = train::early_stop({{10, NAN}, {20, NAN}}, 2);
  CHECK(nan.stop);
  CHECK(nan.reason(2) == "validation loss has not improved for 2 evaluations (no finite loss yet; --patience 2)");
}

TEST_CASE("--schedule wsd over --steps: the run's recorded rates hold the peak, then decay to about 0 by the last step") {
  test::TempDir tmp("gf_schedule");
  train::RunConfig c = tiny_run();
  c.schedule = "wsd", c.decay_fraction = 0.5, c.steps = 40, c.lr = 1e-3;
  const train::TrainResult r = train::train_translator(c, gf::test::quiet_options(tmp.file("run")));
  CHECK(r.steps == 40);
  CHECK(r.stopped_early.empty());
  const train::RunState s = train::load_state(tmp.file("run"));
  REQUIRE(s.lr_curve.size() == 2);  // one point per 20 steps, beside the training curve
  CHECK(s.lr_curve[0].step == 20);
  CHECK(s.lr_curve[0].loss == doctest::Approx(1e-3));  // update 19: progress 19/40, before the decay at 0.5
  CHECK(s.lr_curve[1].step == 40);
  CHECK(s.lr_curve[1].loss == doctest::Approx(1e-3 * (1 - std::sqrt((39.0 / 40 - 0.5) / 0.5))));  // the last update: about 2.5% of the peak
}

TEST_CASE("--patience: evaluations without a better validation loss end the run, say why, and resume respects it") {
  test::TempDir tmp("gf_patience");
  // A rate so small that no float32 weight moves: the validation loss cannot improve after epoch 1.
  train::RunConfig c = tiny_run();
  c.lr = 1e-30, c.epochs = 10, c.patience = 2;
  train::TrainOptions o = gf::test::quiet_options(tmp.file("run"));
  const train::TrainResult r = train::train_translator(c, o);
  CHECK(r.epochs_done == 3);  // epoch 1 the best, 2 and 3 no better
  CHECK(r.stopped_early == "validation loss has not improved for 2 evaluations (best " +
                               fmt::format("{:.4f}", r.valid_loss) + " at step " + std::to_string(r.steps / 3) + "; --patience 2)");
  train::RunState s = train::load_state(o.out);
  CHECK(s.valid_curve.size() == 3);
  const int64_t steps = s.step;

  // Resumed with the same patience: it has already stopped; nothing is trained.
  o.resume = true;
  const train::TrainResult again = train::train_translator(c, o);
  CHECK(again.epochs_done == 0);
  CHECK(again.steps == steps);
  CHECK_FALSE(again.stopped_early.empty());
  // A larger patience continues it: one more epoch without a gain, then it stops again.
  c.patience = 3;
  const train::TrainResult more = train::train_translator(c, o);
  CHECK(more.epochs_done == 1);
  CHECK(more.steps == steps + steps / 3);
  CHECK(more.stopped_early.find("for 3 evaluations") != std::string::npos);
}

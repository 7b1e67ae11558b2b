// Training progress: the time left (ETA) from the pace of the steps actually timed, including
// after a mid-epoch resume, and duration formatting.
#include <doctest/doctest.h>

#include "train/loop/progress.h"

using namespace gf::train;

TEST_CASE("ETA: the nearest limit at the pace of the timed steps") {
  EtaInput e;
  e.epoch_seconds = 10, e.steps_timed = 10;  // 1 s a step
  e.steps_left_by_steps = 30;
  CHECK(estimate_eta(e) == doctest::Approx(30));
  e.steps_left_by_epochs = 12;
  CHECK(estimate_eta(e) == doctest::Approx(12));
  e.seconds_left_by_time = 5;
  CHECK(estimate_eta(e) == doctest::Approx(5));
  EtaInput none;
  CHECK(estimate_eta(none) < 0);  // no limit: unknown
}

// The bug this replaces divided the epoch's time by the batch index + 1; after resuming at batch
// 50 of an epoch, 10 steps in 10 s looked like 60 steps in 10 s, an ETA 6x too short.
TEST_CASE("ETA after a mid-epoch resume counts only the steps run since, not the batch index") {
  const int64_t resumed_at = 50, batch_index = 59;  // the 10th step after resuming
  EtaInput e;
  e.epoch_seconds = 10;
  e.steps_timed = batch_index + 1 - resumed_at;
  e.steps_left_by_epochs = 100;
  CHECK(e.steps_timed == 10);
  CHECK(estimate_eta(e) == doctest::Approx(100));  // 1 s a step, not 1/6 s
}

TEST_CASE("format_duration") {
  CHECK(format_duration(12) == "12s");
  CHECK(format_duration(185) == "3m05s");
  CHECK(format_duration(3720) == "1h02m");
}

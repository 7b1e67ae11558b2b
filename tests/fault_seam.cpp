// build/gradflow_faults: the gradflow program with the training run's test seam
// (train/loop/test_seam.h) installed and configured from the environment. Only the tests run it;
// build/gradflow has no seam installed and reads none of these variables.
//
//   GRADFLOW_TEST_KILL_AFTER_BYTES=K    SIGKILL once K bytes went to files, mid-file
//   GRADFLOW_TEST_ENOSPC_AFTER_BYTES=K  writes fail with ENOSPC (a full disk) once K bytes went to files
//   GRADFLOW_TEST_NAN_AT_STEP=N         the first batch tried as step N gives a NaN loss
//   GRADFLOW_TEST_THROW_AT_STEP=N       an error before step N
//   GRADFLOW_TEST_STEP_SLEEP_MS=T       sleep T ms before every step (a slow step, for the signal tests)
//   GRADFLOW_TEST_KILL_IN_SAVE=N        SIGKILL in the N-th checkpoint, after its weights, before state.json
//   GRADFLOW_TEST_NAN_WEIGHTS_AT_EPOCH=E  a weight becomes NaN just before epoch E's replica check
//   GRADFLOW_TEST_BUCKET_BYTES=N        gradient buckets of N bytes
//   GRADFLOW_TEST_RANK=R                the step, save and weight faults only on rank R (several processes)
// A value that is not a non-negative integer stops the program (exit 2) naming the variable.
#include <fmt/core.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "app/commands.h"
#include "tensor/check.h"
#include "train/distributed/comm.h"
#include "train/loop/test_seam.h"

namespace {

using gf::train::TestSeam;

class EnvironmentSeam : public TestSeam {
 public:
  EnvironmentSeam()
      : kill_after_(read("GRADFLOW_TEST_KILL_AFTER_BYTES")),
        enospc_after_(read("GRADFLOW_TEST_ENOSPC_AFTER_BYTES")),
        nan_at_(read("GRADFLOW_TEST_NAN_AT_STEP")),
        throw_at_(read("GRADFLOW_TEST_THROW_AT_STEP")),
        sleep_ms_(read("GRADFLOW_TEST_STEP_SLEEP_MS")),
        kill_in_save_(read("GRADFLOW_TEST_KILL_IN_SAVE")),
        nan_weights_at_(read("GRADFLOW_TEST_NAN_WEIGHTS_AT_EPOCH")),
        bucket_bytes_(read("GRADFLOW_TEST_BUCKET_BYTES")),
        rank_(read("GRADFLOW_TEST_RANK")) {}

  size_t bucket_bytes(size_t normal) override { return bucket_bytes_ >= 0 ? static_cast<size_t>(bucket_bytes_) : normal; }

  void before_step(int64_t step) override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (step == throw_at_ && here())
      GF_FAIL_AS(std::runtime_error, "train: GRADFLOW_TEST_THROW_AT_STEP: a test fault on this process before step {}", step);
  }

  bool nan_loss(int64_t step) override {
    if (nan_fired_ || step != nan_at_ || !here()) return false;
    nan_fired_ = true;
    return true;
  }

  void before_save(int save_index) override {
    if (save_index == kill_in_save_ && here()) std::raise(SIGKILL);
  }

  void before_replica_check(int64_t epoch, std::vector<gf::Variable>& params) override {
    if (epoch != nan_weights_at_ || !here() || params.empty()) return;
    gf::Tensor w = params.front().data();  // shares the parameter's storage (contiguous, float32)
    w.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  }

  Verdict before_write(size_t n) override {
    const long long before = written_.fetch_add(static_cast<long long>(n));
    for (auto [limit, then] : {std::pair{kill_after_, Then::Kill}, std::pair{enospc_after_, Then::NoSpace}})
      if (limit >= 0 && before + static_cast<long long>(n) > limit) return {static_cast<size_t>(std::max(0LL, limit - before)), then};
    return {n, Then::Write};
  }

 private:
  // -1 when unset; exits 2 for a value that is not a non-negative integer.
  static long long read(const char* name) {
    const char* v = std::getenv(name);
    if (!v) return -1;
    char* end = nullptr;
    errno = 0;
    const long long x = *v ? std::strtoll(v, &end, 10) : -1;
    if (!*v || errno != 0 || *end != '\0' || x < 0) {
      fmt::print(stderr, "gradflow_faults: {}='{}' is not a non-negative integer\n", name, v);
      std::exit(2);
    }
    return x;
  }
  bool here() const { return rank_ < 0 || rank_ == gf::train::distributed::world().rank; }

  const long long kill_after_, enospc_after_, nan_at_, throw_at_, sleep_ms_, kill_in_save_, nan_weights_at_, bucket_bytes_, rank_;
  bool nan_fired_ = false;
  std::atomic<long long> written_{0};
};

}  // namespace

int main(int argc, char** argv) {
  static EnvironmentSeam seam;
  gf::train::install_test_seam(&seam);
  return gf::app::run_program(argc, argv);
}

// Data-parallel training with Open MPI (train/distributed/, docs/distributed.md), each case run for
// real: `mpirun -np 2 gradflow train` on a tiny model against one-process runs of the same global
// batches (float32, dropout 0: there is no float64 training mode), checkpoints moved between 2 and
// 1 processes, a rank killed with SIGKILL, an error, a NaN and a SIGTERM on one rank only.
// setup.sh installs Open MPI, so a build without it fails here rather than skipping.
#include <doctest/doctest.h>

#include <cstdlib>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tensor/io/safetensors.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "autograd/variable.h"
#include "train/distributed/batch_split.h"
#include "train/distributed/grad_buckets.h"
#include "train/run/checkpoint.h"

using namespace gf;
using namespace gf::test;
namespace fs = std::filesystem;

namespace {

std::string gradflow_binary() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }
// The same program with the test seam installed from GRADFLOW_TEST_* variables (tests/fault_seam.cpp).
std::string faults_binary() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow_faults"; }

std::string mpirun() {
  const std::string path = GRADFLOW_MPIEXEC;
  INFO("gradflow was built without MPI (CMake found no Open MPI): scripts/setup.sh installs libopenmpi-dev and openmpi-bin, "
       "so this test fails instead of skipping. Install them and re-run cmake.");
  REQUIRE(!path.empty());
  return path;
}

// `mpirun -np N gradflow --threads 1 args...`: root is allowed (CI runs as root), more ranks than
// cores too, and every rank may use every core (not bound to one).
std::vector<std::string> under_mpirun(int n, const std::vector<std::string>& args, const std::string& binary = gradflow_binary()) {
  std::vector<std::string> a{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(n), binary, "--threads", "1"};
  a.insert(a.end(), args.begin(), args.end());
  return a;
}

// Two processes of one job with different arguments (Open MPI's MPMD form: "-np 1 A : -np 1 B").
std::vector<std::string> under_mpirun_each(const std::vector<std::string>& rank0, const std::vector<std::string>& rank1) {
  std::vector<std::string> a = under_mpirun(1, rank0);
  a.insert(a.end(), {":", "-np", "1", gradflow_binary(), "--threads", "1"});
  a.insert(a.end(), rank1.begin(), rank1.end());
  return a;
}

// Open MPI loads its components with dlopen and unloads them at MPI_Finalize; LeakSanitizer then
// reports what they allocated from "<unknown module>" (and from libmpi, libopen-pal, hwloc), which
// no suppression can name. Under scripts/test_sanitized.sh leak checking is therefore off in the
// MPI ranks only; ASan's other checks and UBSan stay on there, and everywhere else LSan stays on.
std::vector<std::string> mpi_env(std::vector<std::string> env) {
  if (const char* asan = std::getenv("ASAN_OPTIONS")) env.push_back(std::string("ASAN_OPTIONS=") + asan + ":detect_leaks=0");
  return env;
}

constexpr double kTimeout = 240;  // seconds for any one run: far above what one takes

struct Setup {
  TempDir tmp{"gf_distributed"};
  fs::path data = tmp.path / "data";
  Setup() {
    Ran r = run_child(gradflow_binary(), {"corpus", "--size", "1200", "--out", data.string()}, tmp.path / "corpus", kTimeout);
    REQUIRE(r.exit_code() == 0);
  }
  // A tiny model; max_tokens per process; dropout 0 so that runs can be compared step by step; a
  // short warmup, so that 30 steps move the weights well away from where they started. float32
  // products: the tolerances below are float32's sums in another order.
  std::vector<std::string> train_args(const fs::path& out, int max_tokens, int steps) const {
    return {"train", "--data", data.string(), "--src", "en", "--tgt", "ko", "--out", out.string(), "--d-model", "32", "--heads", "2",
            "--layers", "1", "--ff", "64", "--dropout", "0", "--lr", "3e-3", "--warmup", "10", "--max-tokens", std::to_string(max_tokens), "--samples", "0",
            "--log-every", "1", "--steps", std::to_string(steps), "--precision", "fp32"};
  }
  static std::vector<std::string> resume_args(const fs::path& out, int steps) {
    return {"train", "--resume", out.string(), "--samples", "0", "--log-every", "1", "--steps", std::to_string(steps)};
  }
  Ran one(const std::vector<std::string>& args, const std::string& log, const std::vector<std::string>& env = {}) {
    return run_child(gradflow_binary(), args, tmp.path / log, kTimeout, {.env = env});
  }
  // With GRADFLOW_TEST_* variables in `env`, the processes are build/gradflow_faults.
  Ran two(const std::vector<std::string>& args, const std::string& log, const std::vector<std::string>& env = {}) {
    return several(2, args, log, env);
  }
  Ran several(int n, const std::vector<std::string>& args, const std::string& log, const std::vector<std::string>& env = {}) {
    return run_child(mpirun(), under_mpirun(n, args, env.empty() ? gradflow_binary() : faults_binary()), tmp.path / log, kTimeout,
                     {.env = mpi_env(env)});
  }
};

// Float32 sums in another order (each process sums its part, then the parts are added) differ in
// the last bits; over 30 steps the weights measured 1.4e-6 apart at most.
constexpr double kLossTolerance = 1.5e-4;  // the progress lines print 4 decimals
constexpr double kWeightTolerance = 2e-5;
constexpr double kNormTolerance = 1e-4;    // relative; printed with 6 significant digits

// step -> (loss, gradient norm before clipping) from the progress lines ("epoch 1 batch 3/24
// step 3 loss 6.1234 grad norm 1.06735 lr ...").
struct StepLog {
  double loss, grad_norm;
};
std::map<int, StepLog> step_logs(const std::string& log) {
  std::map<int, StepLog> m;
  static const std::regex line(R"(step (\d+) loss ([0-9.]+) grad norm ([0-9.e+-]+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    m[std::stoi((*it)[1])] = {std::stod((*it)[2]), std::stod((*it)[3])};
  return m;
}

// Every step of two runs: the same losses and gradient norms. The norm is taken before clipping,
// after the sum across processes: gradients averaged instead of summed would halve it with 2
// processes, which the loss and (through clipping and Adam's normalisation) the weights would hide.
void check_same_steps(const std::string& one, const std::string& several, size_t steps) {
  const std::map<int, StepLog> a = step_logs(one), b = step_logs(several);
  REQUIRE(a.size() == steps);
  REQUIRE(b.size() == steps);
  double worst_norm = 0;
  for (const auto& [step, s] : a) {
    CAPTURE(step);
    CHECK(std::abs(s.loss - b.at(step).loss) <= kLossTolerance);
    worst_norm = std::max(worst_norm, std::abs(s.grad_norm - b.at(step).grad_norm) / s.grad_norm);
  }
  MESSAGE("largest relative difference of a step's gradient norm: ", worst_norm);
  CHECK(worst_norm <= kNormTolerance);
}

// The largest |a - b| over the latest checkpoint's weights of two run folders, but for the key
// biases of attention: their true gradient is zero (softmax ignores a score added to every key), so
// each run's gradient there is rounding noise, which Adam scales up to steps of about lr.
double weight_difference(const fs::path& a, const fs::path& b) {
  const auto wa = load_safetensors((a / train::load_state(a.string()).model_file).string()).tensors;
  const auto wb = load_safetensors((b / train::load_state(b.string()).model_file).string()).tensors;
  REQUIRE(wa.size() == wb.size());
  double worst = 0;
  for (const auto& [name, ta] : wa) {
    const Tensor& tb = wb.at(name);
    REQUIRE(ta.shape() == tb.shape());
    const Tensor ca = ta.contiguous(), cb = tb.contiguous();
    const float* pa = ca.data<float>();
    const float* pb = cb.data<float>();
    const bool in_proj_bias = name.ends_with("in_proj_bias");  // (3 d,): query, key, value
    for (int64_t i = 0; i < ta.numel(); ++i) {
      if (in_proj_bias && i >= ta.numel() / 3 && i < 2 * ta.numel() / 3) continue;
      worst = std::max(worst, std::abs(static_cast<double>(pa[i]) - pb[i]));
    }
  }
  return worst;
}

// The pids of the gradflow processes mpirun started (its children running build/gradflow; their
// name may be "exe" after gradflow re-executed itself for another OpenBLAS kernel).
std::vector<pid_t> ranks_of(pid_t launcher) {
  const fs::path binary = fs::canonical(gradflow_binary());  // the tests below that look for ranks run build/gradflow
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path() / "stat");  // "pid (comm) state ppid ..."
    const size_t close = stat.rfind(')');
    std::error_code ec;
    if (close == std::string::npos || fs::read_symlink(e.path() / "exe", ec) != binary) continue;
    if (std::stoi(stat.substr(close + 4)) == launcher) pids.push_back(std::stoi(name));
  }
  return pids;
}

// Whether the process ends (or is left a zombie) within `seconds`.
bool gone_within(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string stat = slurp(fs::path("/proc") / std::to_string(pid) / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || stat[close + 2] == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE("a global batch is cut into consecutive runs of about equal target tokens") {
  using train::distributed::split_rows;
  using Parts = std::vector<std::pair<size_t, size_t>>;
  CHECK(split_rows({10, 10, 10, 10}, 1) == Parts{{0, 4}});
  CHECK(split_rows({10, 10, 10, 10}, 2) == Parts{{0, 2}, {2, 4}});
  CHECK(split_rows({10, 10, 10, 10, 10}, 2) == Parts{{0, 3}, {3, 5}});  // a tie: the first cut that reaches half
  CHECK(split_rows({1, 1, 100}, 2) == Parts{{0, 2}, {2, 3}});           // never all rows in one part while another is empty
  CHECK(split_rows({5, 5, 5, 30}, 2) == Parts{{0, 3}, {3, 4}});
  CHECK(split_rows({7}, 3) == Parts{{0, 1}, {1, 1}, {1, 1}});            // fewer rows than processes: the last get none
  CHECK(split_rows({7, 7, 7}, 4) == Parts{{0, 1}, {1, 2}, {2, 3}, {3, 3}});
  CHECK(split_rows({}, 2) == Parts{{0, 0}, {0, 0}});
  for (int parts = 1; parts <= 5; ++parts) {  // the parts tile the rows in order
    const std::vector<int64_t> rows{3, 9, 4, 4, 12, 6, 6, 6, 1, 8, 8};
    const Parts p = split_rows(rows, parts);
    REQUIRE(p.size() == static_cast<size_t>(parts));
    size_t at = 0;
    for (const auto& [b, e] : p) {
      CHECK(b == at);
      CHECK(e > b);  // 11 rows: none empty
      at = e;
    }
    CHECK(at == rows.size());
  }
}

TEST_CASE("gradient buckets: parameters in order, a flat buffer each; one process keeps its gradients, a missing one becomes zeros") {
  Variable a(Tensor::full({10, 10}, 1.0), true), b(Tensor::full({30}, 2.0), true), c(Tensor::full({5, 4}, 3.0), true);
  a.mutable_grad() = Tensor::full({10, 10}, 0.5);
  c.mutable_grad() = Tensor::full({5, 4}, -1.0);
  train::distributed::GradientBuckets buckets({a, b, c}, 120 * sizeof(float));  // a+b would be 130 floats: 2 buckets
  CHECK(buckets.buckets() == 2);
  CHECK(buckets.bytes() == 150 * sizeof(float));
  buckets.allreduce();  // one process: the sum is its own gradient
  CHECK(a.grad().contiguous().data<float>()[99] == 0.5f);
  REQUIRE(b.grad().defined());
  CHECK(b.grad().contiguous().data<float>()[7] == 0.0f);
  CHECK(c.grad().contiguous().data<float>()[19] == -1.0f);
  CHECK_THROWS_WITH_AS(train::distributed::GradientBuckets({Variable(Tensor::zeros({2}, DType::Float64), true)}),
                       doctest::Contains("reduced as float32"), std::invalid_argument);
}

TEST_CASE("two processes train as one does on the same global batches, and checkpoints move between 2 and 1 processes") {
  Setup s;
  constexpr int kSteps = 30;  // about one epoch and a bit: validation and a checkpoint in between
  // One process with the global batch (2 x 512 tokens), two with 512 each.
  Ran ref = s.one(s.train_args(s.tmp.path / "one", 1024, kSteps), "one");
  INFO(ref.err);
  REQUIRE(ref.exit_code() == 0);
  // Buckets of 64 KiB: the model's 0.23 MB of gradients go in 4 allreduce calls.
  Ran two = s.two(s.train_args(s.tmp.path / "two", 512, kSteps), "two", {"GRADFLOW_TEST_BUCKET_BYTES=65536"});
  INFO(two.out, two.err);
  REQUIRE(two.exit_code() == 0);
  CHECK(two.out.find("gradflow train: 2 processes") != std::string::npos);
  CHECK(two.out.find("4 bucket(s), 0.2 MB") != std::string::npos);  // and its share of the step time
  CHECK(std::count(two.out.begin(), two.out.end(), '\n') == std::count(ref.out.begin(), ref.out.end(), '\n') + 1);  // rank 0 alone logs

  {  // the loss and gradient norm of every step, and the final weights
    check_same_steps(ref.err, two.err, kSteps);
    const double d = weight_difference(s.tmp.path / "one", s.tmp.path / "two");
    MESSAGE("largest weight difference after ", kSteps, " steps, 1 vs 2 processes: ", d);
    CHECK(d <= kWeightTolerance);
  }

  {  // 2 processes -> 1 -> 2 continues the same run
    const fs::path moved = s.tmp.path / "moved";
    REQUIRE(s.two(s.train_args(moved, 512, 10), "moved-a").exit_code() == 0);
    Ran mid = s.one(Setup::resume_args(moved, 20), "moved-b");
    INFO(mid.err);
    REQUIRE(mid.exit_code() == 0);
    CHECK(train::load_state(moved.string()).step == 20);
    Ran last = s.two(Setup::resume_args(moved, kSteps), "moved-c");
    INFO(last.err);
    REQUIRE(last.exit_code() == 0);
    CHECK(train::load_state(moved.string()).step == kSteps);
    const double d = weight_difference(s.tmp.path / "one", moved);
    MESSAGE("largest weight difference, 2 -> 1 -> 2 processes vs 1 throughout: ", d);
    CHECK(d <= kWeightTolerance);
  }
}

TEST_CASE("the replica check: a NaN in one rank's weights is found, rank 0's are sent, and training goes on unchanged") {
  Setup s;
  constexpr int kSteps = 30;  // past epoch 1's end, where the check runs
  const std::vector<std::string> buckets{"GRADFLOW_TEST_BUCKET_BYTES=65536"};
  Ran plain = s.two(s.train_args(s.tmp.path / "plain", 512, kSteps), "plain", buckets);
  REQUIRE(plain.exit_code() == 0);
  CHECK(plain.err.find("weights or optimizer state differ") == std::string::npos);
  // Just before epoch 1's check, rank 1's first weight becomes NaN (build/gradflow_faults). Rank 1
  // alone sees a NaN digest; every rank must still take the same branch (none waits alone in a
  // broadcast), and rank 0's weights replace rank 1's before anything else uses them.
  std::vector<std::string> env = buckets;
  env.insert(env.end(), {"GRADFLOW_TEST_NAN_WEIGHTS_AT_EPOCH=1", "GRADFLOW_TEST_RANK=1"});
  Ran hit = s.two(s.train_args(s.tmp.path / "hit", 512, kSteps), "hit", env);
  INFO(hit.err);
  REQUIRE(hit.exit_code() == 0);
  CHECK(hit.err.find("warning: the processes' weights or optimizer state differ after step") != std::string::npos);
  CHECK(hit.err.find("(rank 1 from rank 0's); rank 0's were sent to all") != std::string::npos);
  check_same_steps(plain.err, hit.err, kSteps);
  const double d = weight_difference(s.tmp.path / "plain", s.tmp.path / "hit");
  MESSAGE("largest weight difference after the repaired replica: ", d);
  CHECK(d == 0);  // the same run, bit for bit
}

TEST_CASE("three processes where some batches have fewer rows than processes train as one does") {
  Setup s;
  // Ten pairs of 60-token sentences beside the short ones: at --max-tokens 100 per process (300 in
  // all) a batch of them holds 2 rows (each row 60 + 62 padded tokens), so rank 2 gets none.
  std::string en, ko;
  for (int i = 0; i < 12; ++i) en += "i read a book . ", ko += "저 는 책 을 읽습니다 ";
  std::string long_en, long_ko;
  for (int i = 0; i < 10; ++i) long_en += en + "\n", long_ko += ko + "\n";
  for (const char* split : {"train"}) {
    std::ofstream(s.data / fmt::format("{}.en", split), std::ios::app) << long_en;
    std::ofstream(s.data / fmt::format("{}.ko", split), std::ios::app) << long_ko;
  }
  // One whole epoch, so that every batch, the long ones included, is a step of both runs.
  auto epoch = [&](const fs::path& out, int max_tokens) {
    std::vector<std::string> a = s.train_args(out, max_tokens, 100000);
    a.insert(a.end(), {"--epochs", "1"});
    return a;
  };
  Ran one = s.one(epoch(s.tmp.path / "one", 300), "one");
  INFO(one.err);
  REQUIRE(one.exit_code() == 0);
  Ran three = s.several(3, epoch(s.tmp.path / "three", 100), "three");
  INFO(three.out, three.err);
  REQUIRE(three.exit_code() == 0);
  std::smatch m;
  const std::string out = three.out;
  REQUIRE(std::regex_search(out, m, std::regex(R"(\((\d+) batches of <= 300 tokens, each split over 3 processes \(train/distributed/batch_split.h\); (\d+) of them have fewer rows than processes)")));
  CHECK(std::stoi(m[2]) >= 5);  // the long pairs' batches
  check_same_steps(one.err, three.err, std::stoul(m[1]));
  const double d = weight_difference(s.tmp.path / "one", s.tmp.path / "three");
  MESSAGE("largest weight difference, 1 vs 3 processes: ", d);
  CHECK(d <= kWeightTolerance);
}

TEST_CASE("processes that built different runs stop together, naming the rank and what differs") {
  Setup s;
  const fs::path other = s.tmp.path / "other-data";
  Ran corpus = run_child(gradflow_binary(), {"corpus", "--size", "1200", "--seed", "2", "--out", other.string()}, s.tmp.path / "corpus2", kTimeout);
  REQUIRE(corpus.exit_code() == 0);
  {  // other data on rank 1: its vocabularies, pairs and plan all differ
    std::vector<std::string> a = s.train_args(s.tmp.path / "vocab", 512, 10), b = a;
    b[2] = other.string();  // --data
    Ran r = run_child(mpirun(), under_mpirun_each(a, b), s.tmp.path / "vocab", kTimeout, {.env = mpi_env({})});
    INFO(r.err);
    CHECK(r.exit_code() == 1);
    CHECK(r.err.find("the 2 processes did not build the same run") != std::string::npos);
    CHECK(r.err.find("rank 1 differs from rank 0 in its source vocabulary (") != std::string::npos);
    CHECK(r.err.find("rank 1 differs from rank 0 in its target vocabulary (") != std::string::npos);
    CHECK(r.err.find("no process has trained") != std::string::npos);
    CHECK(r.err.find("MPI_ABORT") == std::string::npos);  // an agreed stop, not an abort
    CHECK(r.err.find("step 1 ") == std::string::npos);
  }
  {  // another --max-len on rank 1: the same vocabularies, another batch plan
    std::vector<std::string> a = s.train_args(s.tmp.path / "plan", 512, 10), b = a;
    b.insert(b.end(), {"--max-len", "8"});
    Ran r = run_child(mpirun(), under_mpirun_each(a, b), s.tmp.path / "plan", kTimeout, {.env = mpi_env({})});
    INFO(r.err);
    CHECK(r.exit_code() == 1);
    CHECK(r.err.find("the 2 processes did not build the same run") != std::string::npos);
    CHECK(r.err.find("rank 1 differs from rank 0 in its batch plan (") != std::string::npos);
    CHECK(r.err.find("rank 1 differs from rank 0 in its run config (config.json)") != std::string::npos);
    CHECK(r.err.find("vocabulary") == std::string::npos);
    CHECK(r.err.find("no process has trained") != std::string::npos);
    CHECK(r.err.find("MPI_ABORT") == std::string::npos);
  }
}

TEST_CASE("a rank killed with SIGKILL ends the whole job within seconds, non-zero") {
  Setup s;
  Child job = start_child(mpirun(), under_mpirun(2, s.train_args(s.tmp.path / "killed", 512, 100000)), s.tmp.path / "killed", {.env = mpi_env({})});
  REQUIRE(wait_for_text(job.err, "step 3 ", 120));  // training is under way
  std::vector<pid_t> ranks = ranks_of(job.pid);
  REQUIRE(ranks.size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(::kill(ranks[1], SIGKILL) == 0);
  const int status = wait_child(job, 30);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("mpirun ended ", seconds, " s after one rank was killed");
  CHECK(seconds < 10);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(gone_within(ranks[0], 5));  // the other rank too
}

TEST_CASE("an error on one rank ends the job with its message (MPI_Abort), not a hang") {
  Setup s;
  Ran r = s.two(s.train_args(s.tmp.path / "error", 512, 100000), "error", {"GRADFLOW_TEST_THROW_AT_STEP=4", "GRADFLOW_TEST_RANK=1"});
  INFO(r.err);
  CHECK(r.exit_code() == 1);  // mpirun passes on the code rank 1 gave MPI_Abort: its error's
  CHECK(r.err.find("rank 1 of 2: gradflow train: error: train: GRADFLOW_TEST_THROW_AT_STEP: a test fault on this process before step 4") !=
        std::string::npos);
}

TEST_CASE("a NaN on one rank: every rank stops together, or with --skip-nonfinite skips together") {
  Setup s;
  const std::vector<std::string> nan_on_rank_1{"GRADFLOW_TEST_NAN_AT_STEP=4", "GRADFLOW_TEST_RANK=1"};
  Ran stop = s.two(s.train_args(s.tmp.path / "nan", 512, 12), "nan", nan_on_rank_1);
  INFO(stop.err);
  CHECK(stop.exit_code() == 1);
  CHECK(stop.err.find("step 4 (epoch 1, batch 4 of") != std::string::npos);
  CHECK(stop.err.find("rank 1: anomaly") != std::string::npos);  // rank 1's anomaly report, printed by rank 0
  CHECK(stop.err.find("MPI_ABORT") == std::string::npos);       // an agreed stop, not an abort

  std::vector<std::string> skip = s.train_args(s.tmp.path / "skip", 512, 12);
  skip.push_back("--skip-nonfinite");
  Ran skipped = s.two(skip, "skip", nan_on_rank_1);
  INFO(skipped.err);
  CHECK(skipped.exit_code() == 0);
  const train::RunState st = train::load_state((s.tmp.path / "skip").string());
  CHECK(st.skipped_nonfinite == 1);
  CHECK(st.step == 12);
}

TEST_CASE("SIGTERM to one rank: every rank stops after the same step, rank 0 saves the checkpoint, --resume continues") {
  Setup s;
  const fs::path out = s.tmp.path / "term";
  Child job = start_child(mpirun(), under_mpirun(2, s.train_args(out, 512, 100000)), s.tmp.path / "term", {.env = mpi_env({})});
  REQUIRE(wait_for_text(job.err, "step 3 ", 120));
  std::vector<pid_t> ranks = ranks_of(job.pid);
  REQUIRE(ranks.size() == 2);
  REQUIRE(::kill(ranks[1], SIGTERM) == 0);
  const int status = wait_child(job, 60);
  const std::string err = slurp(job.err);
  INFO(err);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  CHECK(err.find("interrupted by SIGTERM at step") != std::string::npos);
  const train::RunState st = train::load_state(out.string());
  CHECK(st.step >= 3);
  Ran again = s.two(Setup::resume_args(out, static_cast<int>(st.step) + 3), "term-resume");
  INFO(again.err);
  CHECK(again.exit_code() == 0);
  CHECK(train::load_state(out.string()).step == st.step + 3);
}

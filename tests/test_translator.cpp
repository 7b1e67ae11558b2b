// The translator end to end: training learns the built-in corpus, resume reproduces an
// uninterrupted run, a run killed while saving leaves a loadable checkpoint, and cached decoding
// gives the same tokens as recomputing the prefix.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "train/run/checkpoint.h"
#include "train/decode/decode.h"
#include "train/run/run_data.h"
#include "train/loop/trainer.h"
#include "train/eval/translator.h"
#include "test_budget.h"
#include "tiny_run.h"

using namespace gf;
using namespace gf::train;
namespace fs = std::filesystem;

namespace {

// A folder path no other process uses (mkdtemp makes it; the trainer creates what is below it).
fs::path fresh_dir(const std::string& name) {
  std::string tmpl = (fs::temp_directory_path() / ("gradflow_test_" + name + "_XXXXXX")).string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  return fs::path(tmpl) / "run";
}

TrainOptions quiet_options(const fs::path& out) { return gf::test::quiet_options(out.string()); }

std::string gradflow() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }

}  // namespace

TEST_CASE("resuming gives the same losses as an uninterrupted run with the same seed") {
  RunConfig c = gf::test::learning_run();
  c.steps = 30;
  fs::path a = fresh_dir("resume_a"), b = fresh_dir("resume_b");
  TrainResult full = train_translator(c, quiet_options(a));
  REQUIRE(full.step_losses.size() == 30);

  RunConfig half = c;
  half.steps = 13;  // stops mid-epoch
  TrainResult first = train_translator(half, quiet_options(b));
  REQUIRE(first.step_losses.size() == 13);
  TrainOptions resume = quiet_options(b);
  resume.resume = true;
  TrainResult second = train_translator(c, resume);
  REQUIRE(second.step_losses.size() == 17);
  for (size_t i = 0; i < 13; ++i) CHECK(first.step_losses[i].second == full.step_losses[i].second);
  for (size_t i = 0; i < 17; ++i) {
    INFO("step " << second.step_losses[i].first);
    CHECK(second.step_losses[i].first == full.step_losses[13 + i].first);
    CHECK(second.step_losses[i].second == full.step_losses[13 + i].second);
  }
  fs::remove_all(a.parent_path());
  fs::remove_all(b.parent_path());
}

TEST_CASE("a run killed while writing a checkpoint leaves the last good one loadable and resumable") {
  fs::path dir = fresh_dir("killed");
  // The built-in corpus (24,000 pairs) at 1024 tokens a batch; the second save (end of epoch 2)
  // dies after epoch 2's best.safetensors and before its checkpoint files (build/gradflow_faults,
  // tests/fault_seam.cpp). The short budget trains
  // on a 3000-pair copy of it written by `gradflow corpus`: the same epochs, an eighth of the steps.
  std::string data;
  if (test::short_budget()) {
    const fs::path corpus = dir.parent_path() / "corpus";
    REQUIRE(std::system((gradflow() + " corpus --size 3000 --out " + corpus.string() + " > /dev/null 2>&1").c_str()) == 0);
    data = " --data " + corpus.string() + " --src en --tgt ko";
  }
  std::string cmd = "GRADFLOW_TEST_KILL_IN_SAVE=2 " + std::string(GRADFLOW_BINARY_DIR) + "/gradflow_faults train --quiet --out " + dir.string() + data +
                    " --d-model 32 --heads 2 --layers 1 --ff 64 --max-tokens 1024 --epochs 3 --samples 0 > /dev/null 2>&1";
  int status = std::system(cmd.c_str());
  // Killed by the planned SIGKILL (directly, or as the shell's 128 + 9), not by any failure: a
  // crash or a sanitizer report (docs/testing.md) before the kill must not pass for it.
  const bool killed = (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) || (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL);
  REQUIRE(killed);
  RunState s = load_state(dir.string());
  CHECK(s.epoch == 2);  // the first epoch's checkpoint is the one state.json names
  CHECK(fs::exists(dir / s.model_file));
  Translator t = Translator::load(dir.string());
  CHECK(t.translate({"i am a student ."}, t.default_decode_options()).size() == 1);
  std::string resume = gradflow() + " train --quiet --resume " + dir.string() + " --epochs 2 --samples 0 > /dev/null 2>&1";
  CHECK(std::system(resume.c_str()) == 0);
  CHECK(load_state(dir.string()).epoch == 3);
  fs::remove_all(dir.parent_path());
}

TEST_CASE("training learns the built-in corpus; cached and uncached decoding agree") {
  // The short budget: half the pairs (so half the steps) and half the sentences decoded, with
  // the same bars (the loss, and most decoded sentences exact).
  const bool short_budget = test::short_budget();
  RunConfig c = gf::test::learning_run();
  c.corpus_size = short_budget ? 3000 : 6000;
  c.layer.d_model = 96;
  c.layer.dim_feedforward = 256;
  c.max_tokens = 2048;
  c.warmup = 150;
  c.epochs = 12;
  const size_t n = short_budget ? 100 : 200;
  fs::path dir = fresh_dir("learns");
  TrainResult r = train_translator(c, quiet_options(dir));
  REQUIRE(r.step_losses.size() > 20);
  double first = r.step_losses.front().second, last = r.step_losses.back().second;
  MESSAGE("loss " << first << " -> " << last << " in " << r.steps << " steps, " << r.train_seconds << " s");
  CHECK(last < 0.35 * first);

  Translator t = Translator::load(dir.string());
  RunData data = load_run_data(c, true, kMaxLineBytes, korean_run_data);
  std::vector<std::string> srcs, refs;
  for (size_t i = 0; i < n; ++i) {
    srcs.push_back(join_tokens(data.train[i].first));
    refs.push_back(join_tokens(data.train[i].second));
  }
  DecodeOptions cached = t.default_decode_options(), uncached = cached;
  uncached.use_cache = false;
  const std::vector<std::string> a = t.translate(srcs, cached, 64);
  int exact = 0;
  for (size_t i = 0; i < a.size(); ++i) exact += a[i] == refs[i];
  MESSAGE("exact match on " << n << " training sentences: " << exact);
  CHECK(exact > static_cast<int>(n / 2));  // most training sentences
  {  // cached = uncached, in float64 (tests/rounding.h: in float32 a near-tie may go either way on some kernel)
    Translator t64 = Translator::load(dir.string());
    t64.net->module().to(DType::Float64);
    CHECK(t64.translate(srcs, cached, 64) == t64.translate(srcs, uncached, 64));
  }

  DecodeOptions beam = cached;
  beam.beam = 4;
  std::vector<std::string> bs = t.translate(srcs, beam, 64);
  int beam_exact = 0;
  for (size_t i = 0; i < bs.size(); ++i) beam_exact += bs[i] == refs[i];
  MESSAGE("beam 4 exact: " << beam_exact);
  CHECK(beam_exact > static_cast<int>(n / 2));
  fs::remove_all(dir.parent_path());
}

TEST_CASE("bad flags and inputs get clear errors, not crashes") {
  const fs::path scratch = fresh_dir("bad_inputs").parent_path();
  auto run = [&](const std::string& args) {
    const std::string log = (scratch / "out.txt").string();
    std::string cmd = gradflow() + " " + args + " > " + log + " 2>&1";
    int st = std::system(cmd.c_str());
    std::ifstream in(log);
    std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(WEXITSTATUS(st), out);
  };
  auto [rc1, out1] = run("train --d-model 30 --heads 4 --out " + (scratch / "bad").string());
  CHECK(rc1 == 2);
  CHECK(out1.find("not divisible") != std::string::npos);
  auto [rc2, out2] = run("train --data /nonexistent/dir --out " + (scratch / "bad2").string());
  CHECK(rc2 == 1);
  CHECK(out2.find("/nonexistent/dir") != std::string::npos);
  auto [rc3, out3] = run("train --epochs two");
  CHECK(rc3 == 2);
  CHECK(out3.find("--epochs expects an integer") != std::string::npos);
  auto [rc4, out4] = run("translate --model /nonexistent");
  CHECK(rc4 == 1);
  CHECK(out4.find("does not exist") != std::string::npos);
  auto [rc7, out7] = run("attention --model /nonexistent --src x");
  CHECK(rc7 == 1);
  auto [rc5, out5] = run("frobnicate");
  CHECK(rc5 == 2);
  CHECK(out5.find("unknown command") != std::string::npos);
  fs::path d = fresh_dir("mismatch");
  fs::create_directories(d);
  std::ofstream(d / "train.en") << "a b\nc d\n";
  std::ofstream(d / "train.ko") << "e f\n";
  std::ofstream(d / "val.en") << "a b\n";
  std::ofstream(d / "val.ko") << "e f\n";
  auto [rc6, out6] = run("train --data " + d.string() + " --src en --tgt ko --out " + (d / "run").string());
  CHECK(rc6 == 1);
  CHECK(out6.find("train.en' has 2 lines but") != std::string::npos);
  fs::remove_all(d.parent_path());
  fs::remove_all(scratch);
}

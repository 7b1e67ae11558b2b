// Faults during training, each caused for real in a child `gradflow train`: kill -9 in the middle
// of checkpoint files, a write that fails (the file-size limit, as a full disk would), a read-only
// run folder, a missing or truncated best.safetensors or latest checkpoint, NaN in the loss, an
// update that overflows, and Ctrl-C / SIGTERM. Every time: the previous checkpoint stays loadable,
// the error says what failed and where, and --resume continues from the last good one. The faults
// that need the program's help (a kill at a byte offset, a NaN loss, a slow step) come from
// build/gradflow_faults, the same program with the test seam installed (tests/fault_seam.cpp);
// build/gradflow itself ignores those variables (tested last).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/io/safetensors.h"
#include "tests/fault_util.h"
#include "tests/test_budget.h"
#include "train/run/checkpoint.h"

using namespace gf;
using namespace gf::train;
namespace fs = std::filesystem;
using namespace gf::test;

TEST_CASE("kill -9 in the middle of checkpoint files, at ten points: the run always resumes") {
  Setup s;
  // The bytes a run writes: config and vocabularies, then per epoch best, model and optimizer
  // files (and small state/svg files). Kill points spread over the first three epochs' writes.
  const fs::path ref = s.trained("reference", 1);
  const double head = static_cast<double>(fs::file_size(ref / "config.json") + fs::file_size(ref / "vocab.src.txt") +
                                          fs::file_size(ref / "vocab.tgt.txt"));
  const RunState rs = load_state(ref.string());
  const double epoch_bytes = static_cast<double>(2 * fs::file_size(ref / rs.model_file) + fs::file_size(ref / rs.optim_file));
  int resumed = 0, torn = 0;
  const std::vector<double> points = {0.05, 0.2, 0.45, 0.7, 0.9, 1.1, 1.35, 1.6, 1.85, 2.3};
  for (double f : points) {
    const long long at = static_cast<long long>(head + f * epoch_bytes);
    CAPTURE(at);
    const fs::path out = s.tmp.path / fmt::format("killed-{}", at);
    Ran r = run(faults_binary(), s.train_args(out, 4), s.tmp.path / "killed", {{fmt::format("GRADFLOW_TEST_KILL_AFTER_BYTES={}", at)}});
    REQUIRE(r.killed_by(SIGKILL));
    torn += temp_files(out) > 0;  // killed inside a file: its partial temporary copy is left behind
    if (!fs::exists(out / "state.json")) {
      CHECK(f < 1.0);  // only a kill during the first epoch's files leaves no checkpoint yet
      Ran anew = run(gradflow_binary(), s.train_args(out, 1), s.tmp.path / "anew");  // the same --out starts over
      CHECK(anew.exit_code() == 0);
      CHECK(temp_files(out) == 0);
      continue;
    }
    check_loadable(out);
    Ran again = run(gradflow_binary(), Setup::resume_args(out, 4), s.tmp.path / "resume");
    INFO(again.err);
    CHECK(again.exit_code() == 0);
    CHECK(load_state(out.string()).epoch == 5);
    CHECK(temp_files(out) == 0);  // resume removed what the killed writer left
    ++resumed;
  }
  // The seam kills only from inside a write, and every file is written to a temporary file
  // created before its first byte, so each kill leaves one: every point is a torn file.
  CHECK(torn == static_cast<int>(points.size()));
  CHECK(resumed == 5);  // the five kill points after the first epoch's files
}

TEST_CASE("a write that fails (file-size limit, as a full disk) stops the run, names the file, and loses nothing") {
  Setup s;
  const fs::path out = s.trained("full", 1);
  const auto before = snapshot(out);
  const long long limit = static_cast<long long>(fs::file_size(out / "best.safetensors") / 2);
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 3), s.tmp.path / "full-resume", {.file_size_limit = limit});
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("File too large") != std::string::npos);
  CHECK(r.err.find(out.string() + "/") != std::string::npos);  // names the file it was writing
  CHECK(r.err.find(".safetensors") != std::string::npos);
  CHECK(snapshot(out) == before);  // nothing replaced, no temporary file left
  check_loadable(out);
  Ran again = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "full-again");
  CHECK(again.exit_code() == 0);
  CHECK(load_state(out.string()).epoch == 3);
}

TEST_CASE("a read-only run folder is refused before training, naming the folder; nothing changes") {
  Setup s;
  const fs::path out = s.trained("readonly", 1);
  // Root ignores permissions; then the child runs as nobody, from a copy of the binary it may read.
  const bool root = ::geteuid() == 0;
  std::string binary = gradflow_binary();
  if (root) {
    binary = (s.tmp.path / "gradflow").string();
    fs::copy_file(gradflow_binary(), binary);
    fs::permissions(s.tmp.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                                    fs::perms::others_exec);
    fs::permissions(s.data, fs::perms::others_read | fs::perms::others_exec, fs::perm_options::add);
  }
  fs::permissions(out, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  const auto before = snapshot(out);
  Ran r = run(binary, Setup::resume_args(out, 2), s.tmp.path / "ro-resume", {.as_nobody = root});
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("Permission denied") != std::string::npos);
  CHECK(r.err.find("run folder '" + out.string() + "'") != std::string::npos);
  CHECK(r.out.find("epoch 2 done") == std::string::npos);  // refused at the start, not after an epoch
  // A new run inside a read-only parent: the same early refusal.
  Ran fresh = run(binary, s.train_args(out / "sub", 1), s.tmp.path / "ro-new", {.as_nobody = root});
  CHECK(fresh.exit_code() == 1);
  CHECK(fresh.err.find(out.string()) != std::string::npos);
  fs::permissions(out, fs::perms::owner_write, fs::perm_options::add);
  CHECK(snapshot(out) == before);
  check_loadable(out);
}

TEST_CASE("a missing or truncated best.safetensors: translate says which file and what to use; resume rewrites it") {
  Setup s;
  const fs::path out = s.trained("best", 1);
  const std::string best = (out / "best.safetensors").string();
  const std::string bytes = slurp(best);
  std::ofstream(best, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  Ran t = run(gradflow_binary(), {"translate", "--model", out.string(), "--input", (s.data / "test.en").string()}, s.tmp.path / "tr");
  INFO(t.err);
  CHECK(t.exit_code() == 1);
  CHECK(t.err.find(best) != std::string::npos);
  CHECK(t.err.find("--model " + (out / load_state(out.string()).model_file).string()) != std::string::npos);
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "best-resume");
  CHECK(r.exit_code() == 0);
  CHECK(r.err.find("warning: " + best + " cannot be read") != std::string::npos);
  CHECK_NOTHROW(load_safetensors(best));  // the next validation wrote it again
  fs::remove(best);
  Ran m = run(gradflow_binary(), Setup::resume_args(out, 3), s.tmp.path / "best-missing");
  CHECK(m.exit_code() == 0);
  CHECK(m.err.find("warning: " + best + " is missing") != std::string::npos);
  CHECK_NOTHROW(load_safetensors(best));
}

TEST_CASE("a damaged latest checkpoint: resume falls back to the previous one and says so") {
  Setup s;
  const fs::path out = s.trained("damaged", 2);
  const RunState latest = load_state(out.string());
  const RunState previous = saved_states(out.string()).at(1).state;  // epoch 1's checkpoint, which will load
  const std::string model = (out / latest.model_file).string();
  const std::string bytes = slurp(model);
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes.substr(0, 1000);
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "damaged-resume");  // --epochs: the total
  INFO(r.err);
  CHECK(r.exit_code() == 0);
  CHECK(r.err.find("resuming from the previous checkpoint") != std::string::npos);
  CHECK(r.err.find(latest.model_file) != std::string::npos);
  const RunState now = load_state(out.string());
  CHECK(now.epoch == 3);  // epoch 2 was trained again from the epoch-1 checkpoint
  CHECK(now.step == latest.step);
  // The save after the fallback keeps the checkpoint that loaded as the fallback (issue 36): not
  // the damaged one, whose files are gone, and with the good files still there.
  const std::vector<SavedState> after = saved_states(out.string());
  REQUIRE(after.size() == 2);
  CHECK(after[1].error.empty());
  CHECK(after[1].state.model_file == previous.model_file);
  CHECK(after[1].state.step == previous.step);
  CHECK_NOTHROW(load_safetensors((out / previous.model_file).string()));
  CHECK_NOTHROW(load_safetensors((out / previous.optim_file).string()));
  CHECK_NOTHROW(load_safetensors(model));  // the same step saved again, whole this time
  // With both damaged, the error lists both.
  for (const SavedState& st : saved_states(out.string())) {
    const std::string f = (out / st.state.model_file).string();
    std::ofstream(f, std::ios::binary | std::ios::trunc) << "x";
  }
  Ran both = run(gradflow_binary(), Setup::resume_args(out, 1), s.tmp.path / "damaged-both");
  CHECK(both.exit_code() == 1);
  CHECK(both.err.find("no loadable checkpoint") != std::string::npos);
  CHECK(both.err.find("state.json") != std::string::npos);
  CHECK(both.err.find("state.prev.json") != std::string::npos);
}

namespace {
// Flips one bit in the middle of a file's tensor data, as a failing disk or memory would.
void flip_data_bit(const fs::path& file) {
  std::string bytes = slurp(file);
  bytes.at(bytes.size() - bytes.size() / 4) ^= 0x04;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}
}  // namespace

TEST_CASE("a flipped bit in saved weights is found by its digest: resume falls back, eval and translate refuse (issue 36)") {
  Setup s;
  const fs::path out = s.trained("bitflip", 2);
  const RunState latest = load_state(out.string());
  CHECK(latest.model_digest.rfind("xxh3-64:", 0) == 0);
  CHECK(latest.optim_digest.rfind("xxh3-64:", 0) == 0);
  // best.safetensors: translate and eval name the file and the damage.
  const fs::path best = out / "best.safetensors";
  const std::string good_best = slurp(best);
  flip_data_bit(best);
  for (const std::string cmd : {"translate", "eval"}) {
    std::vector<std::string> args{cmd, "--model", out.string()};
    if (cmd == "translate") args.insert(args.end(), {"--input", (s.data / "test.en").string()});
    Ran r = run(gradflow_binary(), args, s.tmp.path / ("bitflip-" + cmd));
    INFO(r.err);
    CHECK(r.exit_code() == 1);
    CHECK(r.err.find(best.string() + "': the contents hash to xxh3-64:") != std::string::npos);
    CHECK(r.err.find("damaged or changed after it was written") != std::string::npos);
  }
  std::ofstream(best, std::ios::binary | std::ios::trunc) << good_best;
  // The latest optimizer state: resume falls back to the previous checkpoint, naming the file.
  flip_data_bit(out / latest.optim_file);
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "bitflip-resume");
  INFO(r.err);
  CHECK(r.exit_code() == 0);
  CHECK(r.err.find("resuming from the previous checkpoint") != std::string::npos);
  CHECK(r.err.find(latest.optim_file + "': the contents hash to") != std::string::npos);
  // A checkpoint file whose own digest was removed is refused by name: it still says it is gradflow's
  // (issue 50; before, it loaded unverified and only state.json's copy could catch it).
  const RunState now = load_state(out.string());
  const std::string good_model = slurp(out / now.model_file);
  std::string bytes = good_model;
  const size_t key = bytes.find("gradflow.digest");
  REQUIRE(key != std::string::npos);
  bytes.replace(key, 15, "gradflow.digesT");  // another writer's metadata key now
  std::ofstream(out / now.model_file, std::ios::binary | std::ios::trunc) << bytes;
  Ran m = run(gradflow_binary(), Setup::resume_args(out, 3), s.tmp.path / "bitflip-key");
  INFO(m.err);
  CHECK(m.exit_code() == 0);
  CHECK(m.err.find(now.model_file + "': it carries gradflow's format metadata (\"format\": \"gradflow\") but no digest") != std::string::npos);
  // With its format stripped too, it no longer says whose it is: state.json's copy of the digest catches it.
  const RunState later = load_state(out.string());
  bytes = slurp(out / later.model_file);
  const size_t digest = bytes.find("gradflow.digest"), format = bytes.find("\"format\":\"gradflow\"");
  REQUIRE(digest != std::string::npos);
  REQUIRE(format != std::string::npos);
  bytes.replace(digest, 15, "gradflow.digesT");
  bytes.replace(format, 10, "\"formaT\":\"");
  std::ofstream(out / later.model_file, std::ios::binary | std::ios::trunc) << bytes;
  Ran n = run(gradflow_binary(), Setup::resume_args(out, 4), s.tmp.path / "bitflip-both");
  INFO(n.err);
  CHECK(n.exit_code() == 0);
  CHECK(n.err.find(later.model_file + "': its digest is missing but the run state recorded xxh3-64:") != std::string::npos);
}

TEST_CASE("a malformed state.json: resume falls back, and the save after it keeps the good state.prev.json (issue 36)") {
  Setup s;
  const fs::path out = s.trained("malformed", 2);
  const RunState previous = saved_states(out.string()).at(1).state;
  std::ofstream(out / "state.json", std::ios::trunc) << "{ \"step\": ";
  Ran r = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "malformed-resume");  // epoch 2 again, then a save
  INFO(r.err);
  REQUIRE(r.exit_code() == 0);  // before the fix the first save overwrote state.prev.json, then threw
  CHECK(r.err.find("resuming from the previous checkpoint") != std::string::npos);
  CHECK(r.err.find("malformed run state") != std::string::npos);
  const std::vector<SavedState> after = saved_states(out.string());
  REQUIRE(after.size() == 2);
  CHECK_MESSAGE(after[0].error.empty(), after[0].error);
  CHECK_MESSAGE(after[1].error.empty(), after[1].error);
  CHECK(after[1].state.model_file == previous.model_file);  // the checkpoint that loaded
  // state.json malformed again: the next resume still finds a checkpoint.
  std::ofstream(out / "state.json", std::ios::trunc) << "not json";
  Ran again = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "malformed-again");
  INFO(again.err);
  CHECK(again.exit_code() == 0);
  CHECK(again.err.find("no loadable checkpoint") == std::string::npos);
}

TEST_CASE("NaN in the loss: the run stops naming the step and the op, or skips it with --skip-nonfinite") {
  Setup s;
  const fs::path out = s.trained("nan", 1);
  const auto before = snapshot(out);
  const int64_t step = load_state(out.string()).step + 3;
  const ChildOptions poison{{fmt::format("GRADFLOW_TEST_NAN_AT_STEP={}", step)}};
  Ran r = run(faults_binary(), Setup::resume_args(out, 2), s.tmp.path / "nan-stop", poison);
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find(fmt::format("step {} (epoch 2, batch 3 of", step)) != std::string::npos);
  CHECK(r.err.find("anomaly mode, re-running that batch: anomaly: forward of mul_scalar") != std::string::npos);
  CHECK(r.err.find("Check the masks before the learning rate") != std::string::npos);
  CHECK(r.err.find("is untouched") != std::string::npos);
  CHECK(snapshot(out) == before);

  Ran skip = run(faults_binary(), [&] { auto a = Setup::resume_args(out, 2); a.push_back("--skip-nonfinite"); return a; }(),
                 s.tmp.path / "nan-skip", poison);
  INFO(skip.err);
  CHECK(skip.exit_code() == 0);
  CHECK(skip.err.find(fmt::format("warning: skipped step {}", step)) != std::string::npos);
  const RunState after = load_state(out.string());
  CHECK(after.skipped_nonfinite == 1);
  CHECK(after.epoch == 3);
}

TEST_CASE("a diverging run stops at the first NaN naming the op; an overflow to Inf is never checkpointed") {
  Setup s;
  // lr 1e30: step 1's update makes the weights huge, step 2's attention scores NaN.
  const fs::path out = s.tmp.path / "diverge";
  auto args = s.train_args(out, 1);
  for (const char* a : {"--lr", "1e30", "--warmup", "1", "--clip", "0"}) args.push_back(a);
  Ran r = run(gradflow_binary(), args, s.tmp.path / "diverge");
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("step 2 (epoch 1, batch 2 of") != std::string::npos);
  CHECK(r.err.find("produced NaN") != std::string::npos);
  CHECK(r.err.find("created in ") != std::string::npos);  // the module it came from
  CHECK(r.err.find("no checkpoint was written yet") != std::string::npos);
  CHECK(!fs::exists(out / "state.json"));
  args.push_back("--skip-nonfinite");
  fs::remove_all(out);
  Ran skip = run(gradflow_binary(), args, s.tmp.path / "diverge-skip");
  CHECK(skip.exit_code() == 1);
  CHECK(skip.err.find("bad batch number 10 in a row: the model has diverged") != std::string::npos);

  // lr 1e39: one update takes float32 weights to Inf; --steps 1 then tries to checkpoint them.
  const fs::path inf = s.tmp.path / "inf";
  auto a2 = s.train_args(inf, 1);
  for (const char* a : {"--lr", "1e39", "--warmup", "1", "--clip", "0", "--steps", "1"}) a2.push_back(a);
  Ran o = run(gradflow_binary(), a2, s.tmp.path / "inf");
  INFO(o.err);
  CHECK(o.exit_code() == 1);
  CHECK(o.err.find("not writing a checkpoint") != std::string::npos);
  CHECK(o.err.find("holds a NaN or Inf") != std::string::npos);
  CHECK(!fs::exists(inf / "state.json"));
  for (const auto& e : fs::directory_iterator(inf)) CHECK(e.path().extension() != ".safetensors");
}

TEST_CASE("Ctrl-C saves a checkpoint, says where and exits 130; SIGTERM 143") {
  Setup s;
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    const fs::path out = s.tmp.path / fmt::format("signal-{}", sig);
    Child c = start(gradflow_binary(), s.train_args(out, 1000), s.tmp.path / "signal");
    // Once the first epoch's checkpoint exists the run is mid-way through epoch 2 or later.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(out / "state.json") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(c.pid, sig);
    const int status = wait_for(c, 60);
    const std::string err = slurp(c.err);
    INFO(err);
    INFO("terminated by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + sig);
    const RunState st = load_state(out.string());
    CHECK(err.find(fmt::format("interrupted by {} at step {}; checkpoint saved in {}", sig == SIGINT ? "Ctrl-C (SIGINT)" : "SIGTERM", st.step,
                               out.string())) != std::string::npos);
    CHECK(err.find("gradflow train --resume " + out.string()) != std::string::npos);
    check_loadable(out);
    Ran again = run(gradflow_binary(), Setup::resume_args(out, 1), s.tmp.path / "signal-resume");
    CHECK(again.exit_code() == 0);
  }
}

TEST_CASE("a second Ctrl-C ends the run at once, within 1 s (Release), without a checkpoint") {
  Setup s;
  const fs::path out = s.trained("twice", 1);
  const auto before = snapshot(out);
  // Every step of the resumed run sleeps 2 s first (gradflow_faults): both signals land inside the
  // first step, so the first asks for a checkpoint after that step, and only the second can end
  // the run before it.
  Child c = start(faults_binary(), Setup::resume_args(out, 3), s.tmp.path / "twice", {{"GRADFLOW_TEST_STEP_SLEEP_MS=2000"}});
  REQUIRE(wait_for_text(c.out, "train: lr ", 60));  // set up; the first step follows at once
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(c.pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto second = std::chrono::steady_clock::now();
  ::kill(c.pid, SIGINT);
  const int status = wait_for(c, 10);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - second).count();
  MESSAGE("the run ended ", seconds, " s after the second Ctrl-C");
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);  // the signal's default action, not an exit after saving
  CHECK(seconds < time_limit(1.0));
  CHECK(slurp(c.err).find("stopping after this step to save a checkpoint") != std::string::npos);  // the first one was seen
  CHECK(snapshot(out) == before);  // no checkpoint, no temporary file
  check_loadable(out);
}

TEST_CASE("build/gradflow ignores the test hooks; build/gradflow_faults refuses a malformed one") {
  Setup s;
  // Every hook set, the empty KILL_AFTER_BYTES first among them (once read as 0 by the shipped
  // program, which then killed itself silently on its first write): the run is written normally.
  const ChildOptions hooks{{"GRADFLOW_TEST_KILL_AFTER_BYTES=", "GRADFLOW_TEST_ENOSPC_AFTER_BYTES=0", "GRADFLOW_TEST_NAN_AT_STEP=1",
                            "GRADFLOW_TEST_THROW_AT_STEP=1", "GRADFLOW_TEST_KILL_IN_SAVE=1", "GRADFLOW_TEST_STEP_SLEEP_MS=100000",
                            "GRADFLOW_TEST_NAN_WEIGHTS_AT_EPOCH=1"}};
  const fs::path out = s.tmp.path / "shipped";
  Ran r = run(gradflow_binary(), s.train_args(out, 2), s.tmp.path / "shipped", hooks);
  INFO(r.err);
  CHECK(r.exit_code() == 0);
  CHECK(load_state(out.string()).epoch == 3);
  check_loadable(out);
  // Not even the names are in the shipped program.
  CHECK(slurp(gradflow_binary()).find("GRADFLOW_TEST_") == std::string::npos);
  CHECK(slurp(faults_binary()).find("GRADFLOW_TEST_KILL_AFTER_BYTES") != std::string::npos);

  Ran bad = run(faults_binary(), s.train_args(s.tmp.path / "bad-hook", 1), s.tmp.path / "bad-hook", {{"GRADFLOW_TEST_KILL_AFTER_BYTES="}});
  CHECK(bad.exit_code() == 2);
  CHECK(bad.err.find("GRADFLOW_TEST_KILL_AFTER_BYTES='' is not a non-negative integer") != std::string::npos);
  CHECK(!fs::exists(s.tmp.path / "bad-hook"));
}

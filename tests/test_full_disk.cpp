// A full disk at every kind of file a run writes, on every machine: build/gradflow_faults
// (tests/fault_seam.cpp) makes the file writer fail with ENOSPC once a given number of bytes went
// to files, in the middle of whichever file that byte falls in, as write(2) fails on a full file
// system. Each time the run stops with exit 1 and "No space left on device", naming the file; the
// folder holds exactly what it held before, but for the state files of a checkpoint completed
// before the fault (no temporary file left, nothing half-written); and once there is room again
// (the same command without the fault) --resume continues. tests/test_full_disk_tmpfs.cpp does
// the same on a real, small tmpfs where the machine allows mounting one.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <string>

#include "tests/fault_util.h"

using namespace gf;
using namespace gf::train;
using namespace gf::test;
namespace fs = std::filesystem;

namespace {

using Files = std::map<std::string, std::string>;

// What a run folder holds after a full disk stopped the resumed epoch 2 in the file `file`, given
// what it held before (`before`) and after (`after`). Every file is written to a temporary file and
// renamed into place, and epoch 2 recomputes the reference's epoch 2 bit for bit, so the files
// written before the fault are the ones the folder already held; only the state files change.
Files expected_after(const std::string& file, const Files& before, const Files& after, const RunState& reference) {
  Files want = before;
  if (file == "state.json" || file == "loss.svg") want["state.prev.json"] = before.at("state.json");  // the checkpoint it replaces
  if (file == "loss.svg" && after.count("state.json")) {
    // The new checkpoint was complete: state.json names epoch 2's files. Its text holds times, so
    // it is compared by what it names.
    const RunState now = train::state_from_json(after.at("state.json"), "state.json");
    CHECK(now.epoch == 3);
    CHECK(now.model_file == reference.model_file);
    CHECK(now.optim_file == reference.optim_file);
    want["state.json"] = after.at("state.json");
  }
  return want;
}

}  // namespace

TEST_CASE("no space left on device while writing each kind of file: named, nothing lost, resumable") {
  Setup s;
  const fs::path ref = s.trained("reference", 2);
  const RunState rs = load_state(ref.string());
  auto size = [&](const std::string& file) { return static_cast<long long>(fs::file_size(ref / file)); };
  const long long model = size(rs.model_file), optim = size(rs.optim_file);
  // A resumed run's writes in order: the write check (0 bytes), then epoch 2's best.safetensors,
  // model, optimizer, state.prev.json (the state it resumed from: the reference's
  // state.prev.json), state.json (about the reference's; its times vary in length), loss.svg. The
  // offsets fall inside each.
  const long long states = 2 * model + optim + size("state.prev.json");
  REQUIRE(size("loss.svg") > 400);  // room for the state.json length's variation
  struct Point {
    const char* file;
    long long at;
  };
  const Point points[] = {{"best.safetensors", model / 2},
                          {"model-", model + model / 2},
                          {"optim-", 2 * model + optim / 2},
                          {"state.prev.json", 2 * model + optim + 10},
                          {"state.json", states + 10},
                          {"loss.svg", states + size("state.json") + size("loss.svg") / 2}};
  for (const Point& p : points) {
    CAPTURE(p.file);
    const fs::path out = s.tmp.path / fmt::format("full-{}", p.at);
    fs::copy(s.tmp.path / "reference", out, fs::copy_options::recursive);
    fs::remove(out / "state.json");  // back to the epoch-1 checkpoint, which state.prev.json names
    fs::rename(out / "state.prev.json", out / "state.json");
    const auto before = snapshot(out);
    Ran r = run(faults_binary(), Setup::resume_args(out, 2), s.tmp.path / "full", {{fmt::format("GRADFLOW_TEST_ENOSPC_AFTER_BYTES={}", p.at)}});
    INFO(r.err);
    CHECK(r.exit_code() == 1);
    CHECK(r.err.find("No space left on device") != std::string::npos);
    CHECK(r.err.find(out.string() + "/" + p.file) != std::string::npos);  // names the file it was writing
    CHECK(r.err.find("terminate called") == std::string::npos);
    const auto after = snapshot(out);
    CHECK(after == expected_after(p.file, before, after, rs));  // nothing else replaced, no temporary file left
    check_loadable(out);
    Ran again = run(gradflow_binary(), Setup::resume_args(out, 2), s.tmp.path / "full-again");
    INFO(again.err);
    CHECK(again.exit_code() == 0);
    CHECK(load_state(out.string()).epoch == 3);
  }
}

TEST_CASE("no space for a new run's first files: refused before training, naming the file") {
  Setup s;
  const fs::path out = s.tmp.path / "new";
  Ran r = run(faults_binary(), s.train_args(out, 1), s.tmp.path / "new", {{"GRADFLOW_TEST_ENOSPC_AFTER_BYTES=100"}});
  INFO(r.err);
  CHECK(r.exit_code() == 1);
  CHECK(r.err.find("No space left on device") != std::string::npos);
  CHECK(r.err.find(out.string() + "/vocab.src.txt") != std::string::npos);  // the first file past 100 bytes
  CHECK(r.out.find("epoch 1 done") == std::string::npos);
  CHECK(!fs::exists(out / "state.json"));
  CHECK(temp_files(out) == 0);
}

#pragma once
// For the fault tests: children through tests/child_process.h, a tiny training setup, and checks
// of a run folder.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensor/io/safetensors.h"
#include "tests/child_process.h"
#include "tests/temp_dir.h"
#include "train/eval/translator.h"
#include "train/run/checkpoint.h"
#include "train/loop/run_lock.h"

namespace gf::test {

namespace fs = std::filesystem;
using train::RunState;
using train::load_state;
using train::Translator;

inline std::string gradflow_binary() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow"; }
// The same program with the test seam installed from GRADFLOW_TEST_* variables (tests/fault_seam.cpp).
inline std::string faults_binary() { return std::string(GRADFLOW_BINARY_DIR) + "/gradflow_faults"; }

// The fault tests' children: two minutes at most each.
inline Child start(const std::string& binary, const std::vector<std::string>& args, const fs::path& logs, const ChildOptions& o = {}) {
  return start_child(binary, args, logs, o);
}
inline int wait_for(const Child& c, double seconds = 120) { return wait_child(c, seconds); }
inline Ran run(const std::string& binary, const std::vector<std::string>& args, const fs::path& logs, const ChildOptions& o = {}) {
  return run_child(binary, args, logs, 120, o);
}

// A 1,200-pair corpus and a model small enough that an epoch takes well under a second.
struct Setup {
  test::TempDir tmp{"gf_faults"};
  fs::path data = tmp.path / "data";
  Setup() {
    Ran r = run(gradflow_binary(), {"corpus", "--size", "1200", "--out", data.string()}, tmp.path / "corpus");
    REQUIRE(r.exit_code() == 0);
  }
  std::vector<std::string> train_args(const fs::path& out, int epochs) const {
    return {"train", "--data", data.string(), "--src", "en", "--tgt", "ko", "--out", out.string(), "--d-model", "32", "--heads", "2",
            "--layers", "1", "--ff", "64", "--max-tokens", "1024", "--samples", "0", "--quiet", "--epochs", std::to_string(epochs),
            "--precision", "fp32"};  // float32, as these runs were written for (the diverging run among them)
  }
  static std::vector<std::string> resume_args(const fs::path& out, int epochs) {
    return {"train", "--resume", out.string(), "--samples", "0", "--quiet", "--epochs", std::to_string(epochs)};
  }
  fs::path trained(const std::string& name, int epochs) const {
    fs::path out = tmp.path / name;
    Ran r = run(gradflow_binary(), train_args(out, epochs), tmp.path / (name + "-train"));
    INFO(r.err);
    REQUIRE(r.exit_code() == 0);
    return out;
  }
};

// Every file of a folder, name -> bytes; not the lock file, which holds the pid of whichever run
// last held the folder (train/loop/run_lock.h) and is no part of the run's output.
inline std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != train::RunFolderLock::kFileName) m[e.path().filename().string()] = slurp(e.path());
  return m;
}

inline int temp_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp-") != std::string::npos;
  return n;
}

// The checkpoint state.json names loads, and so does the model gradflow translate would use.
inline void check_loadable(const fs::path& dir) {
  RunState s = load_state(dir.string());
  CHECK_NOTHROW(load_safetensors((dir / s.model_file).string()));
  CHECK_NOTHROW(load_safetensors((dir / s.optim_file).string()));
  CHECK_NOTHROW(Translator::load(dir.string()));
}


}  // namespace gf::test

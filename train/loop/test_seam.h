#pragma once
// The points where a test makes a training run fail on purpose, behind one object. The shipped
// program installs none: every point then does nothing, and no environment variable is read.
// The tests' build adds build/gradflow_faults (tests/fault_seam.cpp: the same program with a seam
// configured from GRADFLOW_TEST_* variables), and in-process tests may install their own.
//
// Points, in the order a run meets them:
//   bucket_bytes         the gradient buckets' size (several processes): smaller, so a tiny model has several
//   before_step          before each optimizer step: may throw (a process failing alone) or sleep
//   nan_loss             whether this step's loss is multiplied by NaN (an op of the graph makes it)
//   before_save          during the N-th checkpoint, after its weights and before state.json: may kill
//   before_replica_check before the once-an-epoch comparison of the processes' weights: may change them
//   before_write         (WriteFaults) before bytes go to a file: a kill mid-file, or ENOSPC
#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "tensor/io/atomic_file.h"

namespace gf::train {

class TestSeam : public WriteFaults {
 public:
  virtual size_t bucket_bytes(size_t normal) { return normal; }
  virtual void before_step(int64_t step) {}  // step: the one about to be made (1-based)
  virtual bool nan_loss(int64_t step) { return false; }
  virtual void before_save(int save_index) {}  // save_index: 1 for the run's first checkpoint
  virtual void before_replica_check(int64_t epoch, std::vector<Variable>& params) {}
  Verdict before_write(size_t n) override { return {n, Then::Write}; }
};

// Installs `seam` for this process (nullptr: none). Not owned; it must outlive the runs using it.
// Also installs it as the file writers' WriteFaults.
void install_test_seam(TestSeam* seam);
// The installed seam, or one whose points all do nothing.
TestSeam& test_seam();

}  // namespace gf::train

#pragma once
// Training progress: a one-line bar redrawn in place on a terminal, or a plain line every
// `every` steps when the output is a file or a pipe.
#include <cstdint>
#include <cstdio>
#include <string>

namespace gf::train {

struct ProgressInfo {
  int64_t epoch = 0, step = 0;
  int64_t batch = 0, batches = 0;  // within the epoch
  double loss = 0;                 // recent average
  double grad_norm = -1;           // the last step's, before clipping; < 0: not shown
  double tokens_per_s = 0;         // target tokens
  double eta_seconds = -1;         // < 0: unknown
  double lr = 0;
};

class Progress {
 public:
  Progress(std::FILE* out, int64_t every);
  void update(const ProgressInfo& info);
  // Ends the bar's line before other output is printed.
  void clear();
  bool is_terminal() const { return tty_; }

 private:
  std::FILE* out_;
  bool tty_;
  int64_t every_;
  bool drawn_ = false;
  double last_draw_ = 0;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

// What the time left depends on; a limit that does not apply stays negative.
struct EtaInput {
  double epoch_seconds = 0;         // time spent on this epoch's steps in this call
  int64_t steps_timed = 0;          // those steps (after a mid-epoch resume: not the epoch's earlier batches)
  int64_t steps_left_by_steps = -1;   // --steps: steps until the limit
  int64_t steps_left_by_epochs = -1;  // --epochs: batches until the last epoch ends
  double seconds_left_by_time = -1;   // --minutes: seconds until the limit
};
// Seconds left: the nearest limit, at the pace of the steps timed so far. < 0: unknown.
double estimate_eta(const EtaInput& in);

}  // namespace gf::train

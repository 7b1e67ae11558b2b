#include "train/loop/progress.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace gf::train {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  long t = std::lround(s);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(std::FILE* out, int64_t every) : out_(out), tty_(isatty(fileno(out)) != 0), every_(every < 1 ? 1 : every) {}

void Progress::update(const ProgressInfo& p) {
  if (tty_) {
    double t = now();
    if (drawn_ && t - last_draw_ < 0.2 && p.batch != p.batches) return;  // at most 5 redraws a second
    last_draw_ = t;
    const int width = 24;
    double frac = p.batches > 0 ? static_cast<double>(p.batch) / static_cast<double>(p.batches) : 0;
    int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    fmt::print(out_, "\r\033[Kepoch {} [{}] {}/{}  step {}  loss {:.3f}  {:.0f} tok/s  ETA {}", p.epoch, bar, p.batch, p.batches, p.step,
               p.loss, p.tokens_per_s, format_duration(p.eta_seconds));
    std::fflush(out_);
    drawn_ = true;
    return;
  }
  if (p.step % every_ != 0) return;
  fmt::print(out_, "epoch {} batch {}/{} step {} loss {:.4f}{} lr {:.2e} {:.0f} tok/s ETA {}\n", p.epoch, p.batch, p.batches, p.step, p.loss,
             p.grad_norm >= 0 ? fmt::format(" grad norm {:.6g}", p.grad_norm) : "", p.lr, p.tokens_per_s, format_duration(p.eta_seconds));
  std::fflush(out_);
}

void Progress::clear() {
  if (tty_ && drawn_) {
    fmt::print(out_, "\r\033[K");
    std::fflush(out_);
    drawn_ = false;
  }
}

double estimate_eta(const EtaInput& in) {
  const double per_step = in.steps_timed > 0 ? in.epoch_seconds / static_cast<double>(in.steps_timed) : -1;
  double eta = in.seconds_left_by_time >= 0 ? in.seconds_left_by_time : INFINITY;
  if (per_step >= 0) {
    if (in.steps_left_by_steps >= 0) eta = std::min(eta, per_step * static_cast<double>(in.steps_left_by_steps));
    if (in.steps_left_by_epochs >= 0) eta = std::min(eta, per_step * static_cast<double>(in.steps_left_by_epochs));
  }
  return std::isfinite(eta) ? eta : -1;
}

}  // namespace gf::train

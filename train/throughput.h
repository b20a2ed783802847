// The pace of a training run, one definition for everything that shows it: the progress line and its
// metrics.jsonl row (tokens_per_s), and the live progress bar (rate and ETA). Both are over the last
// `window` steps (train.log_every, so a logged row covers exactly the steps since the one before it),
// timed from the end of one step to the end of another, so that what runs between steps (evaluation,
// checkpoints) counts against the pace as it counts against the time left.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>

namespace loom {

// Seconds left at the mean pace of a stretch: `done` steps took `seconds`, `left` remain (0 before any step).
double eta_seconds(double seconds, int64_t done, int64_t left);

class ThroughputMeter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ThroughputMeter(int64_t window);

  // The session's first step starts (forgets any earlier session).
  void start(Clock::time_point now = Clock::now());
  // A step of `tokens` tokens (the global batch's) has just ended.
  void step_done(int64_t tokens, Clock::time_point now = Clock::now());

  // Over the last `window` steps (fewer at the start of a session); 0 before the first.
  double tokens_per_s() const;
  double eta_s(int64_t steps_left) const;

 private:
  double seconds() const;  // from the window's start to its last step's end
  int64_t window_;
  std::deque<std::pair<Clock::time_point, int64_t>> marks_;  // the window's start, then each step's end and tokens
};

}  // namespace loom

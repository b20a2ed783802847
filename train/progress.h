// A live progress bar with ETA on stderr, for a person watching a run in a terminal:
//   step 45/100 [#########...........]  45% | loss 3.2104 | 12.3k tok/s | 1m02s elapsed | ETA 1m16s
// redrawn in place after every step. Log lines still appear above it (a pair of spdlog sinks takes the bar
// away before each message and draws it again after), so nothing is lost from the scroll-back. When stderr
// is not a terminal (a log file, a pipe, a cluster job) there is no bar and the output is the plain log
// lines alone, unchanged. Only rank 0 draws it. The rate and ETA it shows are the run's ThroughputMeter's
// (train/throughput.h), the same as the log lines'.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <spdlog/sinks/sink.h>

namespace loom {

// "[#####.....]": width characters between the brackets, '#' for the fraction step / total (rounded down).
std::string progress_bar(int64_t step, int64_t total, int width);

// What the bar shows.
struct ProgressState {
  int64_t step = 0, max_steps = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double elapsed_s = 0;  // of the whole run, resumed sessions included
  double eta_s = 0;
};

// The whole line, no wider than `columns` (the bar takes what the text leaves, 10 to 40 characters; the
// text alone is cut if even that does not fit).
std::string progress_line(const ProgressState& state, int columns);

class ProgressBar {
 public:
  // Draws only when `enabled` (rank 0 with stderr a terminal: see stderr_is_terminal()).
  explicit ProgressBar(bool enabled);
  ~ProgressBar();  // leaves the last bar on its own line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // After a step: what the bar shows (ProgressState) but its width, which the terminal decides.
  void update(const ProgressState& state);
  // Any other line in the same place (`loom prepare`'s bytes, MB/s and ETA).
  void show(const std::string& line);
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  std::shared_ptr<spdlog::sinks::sink> erase_, redraw_;
};

bool stderr_is_terminal();

}  // namespace loom

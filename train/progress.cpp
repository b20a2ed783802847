#include "train/progress.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "train/metrics.h"

namespace loom {
namespace {

// The line on screen, shared by the two sinks: erased before a log message, drawn again after it.
struct Screen {
  std::string line;  // empty: nothing drawn
  void erase() const {
    if (!line.empty()) std::fputs("\r\033[K", stderr);
  }
  void draw() const {
    if (line.empty()) return;
    std::fputs(("\r\033[K" + line).c_str(), stderr);
    std::fflush(stderr);
  }
};
Screen& screen() {
  static Screen s;  // stderr is one per process, and so is what is drawn on it
  return s;
}

class ScreenSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ScreenSink(bool erase) : erase_(erase) {}

 protected:
  void sink_it_(const spdlog::details::log_msg&) override {
    if (erase_) {
      screen().erase();
    } else {
      screen().draw();
    }
  }
  void flush_() override { std::fflush(stderr); }

 private:
  bool erase_;
};

int terminal_columns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

std::string tokens_rate(double tokens_per_s) {
  char text[32];
  if (tokens_per_s >= 1e6) {
    std::snprintf(text, sizeof text, "%.1fM tok/s", tokens_per_s / 1e6);
  } else if (tokens_per_s >= 1e3) {
    std::snprintf(text, sizeof text, "%.1fk tok/s", tokens_per_s / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f tok/s", tokens_per_s);
  }
  return text;
}

}  // namespace

std::string progress_bar(int64_t step, int64_t total, int width) {
  const int64_t filled = total > 0 ? std::clamp<int64_t>(step * width / total, 0, width) : 0;
  return "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.') +
         "]";
}

std::string progress_line(const ProgressState& s, int columns) {
  const std::string counter = "step " + std::to_string(s.step) + "/" + std::to_string(s.max_steps) + " ";
  char percent[16];
  std::snprintf(percent, sizeof percent, " %3d%%", s.max_steps > 0 ? static_cast<int>(100 * s.step / s.max_steps) : 0);
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", s.loss);
  const std::string rest = std::string(percent) + " | loss " + (std::isfinite(s.loss) ? loss : "non-finite") + " | " +
                           tokens_rate(s.tokens_per_s) + " | " + format_duration(s.elapsed_s) + " elapsed | ETA " +
                           format_duration(s.eta_s);
  const int text = static_cast<int>(counter.size() + rest.size());
  const int width = std::clamp(columns - text - 2, 10, 40);
  std::string line = counter + progress_bar(s.step, s.max_steps, width) + rest;
  if (static_cast<int>(line.size()) > columns) line.resize(static_cast<size_t>(std::max(columns, 0)));
  return line;
}

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  erase_ = std::make_shared<ScreenSink>(true);
  redraw_ = std::make_shared<ScreenSink>(false);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.insert(sinks.begin(), erase_);
  sinks.push_back(redraw_);
}

ProgressBar::~ProgressBar() {
  if (!enabled_) return;
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), erase_), sinks.end());
  sinks.erase(std::remove(sinks.begin(), sinks.end(), redraw_), sinks.end());
  if (!screen().line.empty()) std::fputs("\n", stderr);
  screen().line.clear();
}

void ProgressBar::update(const ProgressState& state) {
  if (!enabled_) return;
  show(progress_line(state, terminal_columns()));
}

void ProgressBar::show(const std::string& line) {
  if (!enabled_) return;
  screen().line = line.substr(0, static_cast<size_t>(std::max(terminal_columns(), 0)));
  screen().draw();
}

}  // namespace loom

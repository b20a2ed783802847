#include "train/throughput.h"

#include <algorithm>

namespace loom {

double eta_seconds(double seconds, int64_t done, int64_t left) {
  if (done <= 0 || left <= 0) return 0;
  return seconds / static_cast<double>(done) * static_cast<double>(left);
}

ThroughputMeter::ThroughputMeter(int64_t window) : window_(std::max<int64_t>(1, window)) {}

void ThroughputMeter::start(Clock::time_point now) {
  marks_.clear();
  marks_.emplace_back(now, 0);
}

void ThroughputMeter::step_done(int64_t tokens, Clock::time_point now) {
  if (marks_.empty()) start(now);
  marks_.emplace_back(now, tokens);
  while (static_cast<int64_t>(marks_.size()) > window_ + 1) marks_.pop_front();
}

double ThroughputMeter::seconds() const {
  return marks_.size() < 2 ? 0.0 : std::chrono::duration<double>(marks_.back().first - marks_.front().first).count();
}

double ThroughputMeter::tokens_per_s() const {
  int64_t tokens = 0;
  for (size_t i = 1; i < marks_.size(); ++i) tokens += marks_[i].second;
  const double s = seconds();
  return s > 0 ? static_cast<double>(tokens) / s : 0.0;
}

double ThroughputMeter::eta_s(int64_t steps_left) const {
  return eta_seconds(seconds(), static_cast<int64_t>(marks_.size()) - 1, steps_left);
}

}  // namespace loom

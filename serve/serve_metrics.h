// What `loom serve` reports on GET /metrics, and its Prometheus text exposition format: requests running and
// waiting, KV blocks in use and in the pool, prompt and generated tokens, the generation rate over the last
// seconds, engine steps and preemptions, prefix cache hits, finished requests by reason, and the time to first
// token as a histogram; with speculative decoding, the tokens drafted and accepted and each finished request's
// acceptance rate as a histogram.
#pragma once
#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace loom {

// A Prometheus histogram: observations counted into buckets with upper bounds `bounds` (ascending), their count
// (the +Inf bucket) and sum.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts = std::vector<int64_t>(bounds.size());  // not cumulative: [i] holds (bound i-1, bound i]
  int64_t count = 0;
  double sum = 0;
  void observe(double value);
  // The HELP, TYPE, cumulative bucket, sum and count lines of metric `name`.
  void write(std::ostream& out, const char* name, const char* help) const;
};

struct ServeMetrics {
  int64_t running = 0, waiting = 0, kv_blocks_used = 0, kv_blocks_total = 0, kv_block_size = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, steps = 0, preemptions = 0, requests = 0;
  int64_t prefix_hit_tokens = 0, kv_blocks_cached = 0;  // prefix caching: positions not prefilled, blocks filed
  double tokens_per_second = 0;  // generated, over the last RateWindow
  std::map<std::string, int64_t> finished;  // by finish reason ("stop", "length", "cancelled", "error")
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0}};  // seconds to the first token
  // Speculative decoding: proposals made and kept in total; per finished request, its accepted / drafted.
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  Histogram acceptance{{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}};

  std::string prometheus() const;  // text/plain; version=0.0.4
};

// Tokens counted over the last `span` (a sliding window of per-step counts): a rate that falls to 0 when idle.
class RateWindow {
 public:
  explicit RateWindow(std::chrono::duration<double> span = std::chrono::seconds(10)) : span_(span) {}
  void add(int64_t tokens, std::chrono::steady_clock::time_point now);
  double per_second(std::chrono::steady_clock::time_point now);

 private:
  std::chrono::duration<double> span_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> events_;
};

}  // namespace loom

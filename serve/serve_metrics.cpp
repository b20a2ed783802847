#include "serve/serve_metrics.h"

#include <sstream>

namespace loom {

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds.size() && value > bounds[i]) ++i;
  if (i < bounds.size()) ++counts[i];
  ++count;  // the +Inf bucket is the count
  sum += value;
}

void Histogram::write(std::ostream& out, const char* name, const char* help) const {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    out << name << "_bucket{le=\"" << bounds[i] << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << count << "\n" << name << "_sum " << sum << "\n"
      << name << "_count " << count << "\n";
}

std::string ServeMetrics::prometheus() const {
  std::ostringstream out;
  const auto gauge = [&](const char* name, const char* help, const char* type, auto value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << value
        << "\n";
  };
  gauge("loom_requests_running", "Requests in the running batch.", "gauge", running);
  gauge("loom_requests_waiting", "Requests queued for the batch.", "gauge", waiting);
  gauge("loom_kv_blocks_used", "KV cache blocks held by sequences.", "gauge", kv_blocks_used);
  gauge("loom_kv_blocks_total", "KV cache blocks in the pool.", "gauge", kv_blocks_total);
  gauge("loom_kv_block_size", "Positions per KV cache block.", "gauge", kv_block_size);
  gauge("loom_prompt_tokens_total", "Prompt tokens of the requests admitted.", "counter", prompt_tokens);
  gauge("loom_generated_tokens_total", "Tokens generated.", "counter", generated_tokens);
  gauge("loom_generation_tokens_per_second", "Tokens generated per second over the last 10 s.", "gauge",
        tokens_per_second);
  gauge("loom_engine_steps_total", "Engine iterations.", "counter", steps);
  gauge("loom_preemptions_total", "Sequences preempted (blocks taken, recomputed later).", "counter", preemptions);
  gauge("loom_prefix_cache_hit_tokens_total", "Prompt positions found in the prefix cache, not prefilled.", "counter",
        prefix_hit_tokens);
  gauge("loom_kv_blocks_cached", "KV cache blocks filed in the prefix cache (in use or evictable).", "gauge",
        kv_blocks_cached);
  gauge("loom_requests_total", "Generation requests received.", "counter", requests);
  out << "# HELP loom_requests_finished_total Requests finished, by reason.\n"
      << "# TYPE loom_requests_finished_total counter\n";
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    const auto it = finished.find(reason);
    out << "loom_requests_finished_total{reason=\"" << reason << "\"} " << (it == finished.end() ? 0 : it->second)
        << "\n";
  }
  ttft.write(out, "loom_time_to_first_token_seconds", "From a request's arrival to its first generated token.");
  gauge("loom_speculative_drafted_tokens_total", "Tokens proposed by the drafter (speculative decoding).", "counter",
        drafted_tokens);
  gauge("loom_speculative_accepted_tokens_total", "Proposed tokens the target accepted.", "counter", accepted_tokens);
  gauge("loom_speculative_acceptance_rate", "Accepted over drafted tokens, all requests.", "gauge",
        drafted_tokens > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(drafted_tokens) : 0.0);
  acceptance.write(out, "loom_request_acceptance_rate", "Each finished request's accepted over drafted tokens.");
  return out.str();
}

void RateWindow::add(int64_t tokens, std::chrono::steady_clock::time_point now) {
  events_.emplace_back(now, tokens);
  per_second(now);
}

double RateWindow::per_second(std::chrono::steady_clock::time_point now) {
  while (!events_.empty() && now - events_.front().first > span_) events_.pop_front();
  int64_t total = 0;
  for (const auto& e : events_) total += e.second;
  return static_cast<double>(total) / span_.count();
}

}  // namespace loom

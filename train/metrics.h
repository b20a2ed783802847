// RUN_DIR/metrics.jsonl (one JSON object per line) and the human progress line.
// On resume the file is cut back to the checkpoint's step, so it always tells one consistent history.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace loom {

class MetricsLog {
 public:
  // Keeps only rows with step <= keep_through_step (all rows are dropped for a fresh run: pass 0).
  MetricsLog(const std::filesystem::path& run_dir, int64_t keep_through_step);
  void write(const nlohmann::json& row);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace loom

#include "train/metrics.h"

#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace loom {

MetricsLog::MetricsLog(const std::filesystem::path& run_dir, int64_t keep_through_step)
    : path_(run_dir / "metrics.jsonl") {
  const auto& path = path_;
  std::string kept;
  if (std::filesystem::exists(path)) {
    std::istringstream lines(read_file(path));
    for (std::string line; std::getline(lines, line);) {
      const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (row.is_object() && row.value("step", int64_t{0}) <= keep_through_step) kept += line + "\n";
    }
  }
  write_file_atomic(path, kept);
  out_.open(path, std::ios::app);
  LOOM_CHECK(out_, "cannot open ", path.string(), " for appending");
}

void MetricsLog::write(const nlohmann::json& row) {
  out_ << row.dump() << "\n";
  out_.flush();
  if (!out_) throw Error("cannot write " + path_.string() + " (is the disk full?)");
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%ldh%02ldm", static_cast<long>(s / 3600), static_cast<long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buffer, sizeof buffer, "%ldm%02lds", static_cast<long>(s / 60), static_cast<long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof buffer, "%lds", static_cast<long>(s));
  }
  return buffer;
}

}  // namespace loom

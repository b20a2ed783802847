#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace loom {

void init_logging(int rank, int world_size, bool verbose) {
  spdlog::drop("loom");
  auto logger = spdlog::stderr_color_mt("loom");
  logger->set_level(verbose ? spdlog::level::debug : (rank == 0 ? spdlog::level::info : spdlog::level::warn));
  spdlog::set_default_logger(logger);
  set_log_tag(world_size > 1 ? "rank " + std::to_string(rank) : "");
}

void set_log_tag(const std::string& tag) {
  spdlog::default_logger()->set_pattern("%^[%H:%M:%S %L]%$ " + (tag.empty() ? "" : "[" + tag + "] ") + "%v");
}

}  // namespace loom

// spdlog set-up: rank 0 logs at info, other ranks only warnings and errors, every line tagged with the rank.
#pragma once
#include <spdlog/spdlog.h>

namespace loom {

void init_logging(int rank = 0, int world_size = 1, bool verbose = false);

// Tags every later line of a distributed run with the rank and its mesh coordinates ("rank 3 dp1-tp1-pp0").
void set_log_tag(const std::string& tag);

}  // namespace loom

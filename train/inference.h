// Loading a trained model back from a run directory (its resolved config + a checkpoint) for
// generation and evaluation. Nothing of the optimizer or RNG state is touched.
#pragma once
#include <filesystem>
#include <optional>

#include "core/config.h"
#include "models/gpt.h"

namespace loom {

struct LoadedModel {
  Config config;
  Gpt model{nullptr};
  int64_t step = 0;
};

// step: a checkpoint step, or the newest complete one. Throws loom::Error if run_dir is not a run dir.
LoadedModel load_trained_model(const std::filesystem::path& run_dir, std::optional<int64_t> step = std::nullopt);

}  // namespace loom

// Loading a trained model back from a run directory (its resolved config + a checkpoint) for
// generation and evaluation. Nothing of the optimizer or RNG state is touched.
#pragma once
#include <filesystem>
#include <optional>

#include "core/config.h"
#include "models/encoder_decoder.h"
#include "models/gpt.h"

namespace loom {

// One of model and translator is set, as the run's model.arch says.
struct LoadedModel {
  Config config;
  Gpt model{nullptr};
  EncoderDecoder translator{nullptr};
  int64_t step = 0;
  torch::nn::Module& module() { return translator ? static_cast<torch::nn::Module&>(*translator) : *model; }
};

// step: a checkpoint step, or the newest complete one. The model is on its run's runtime.device, or on the CPU
// where that is cuda and no GPU is visible. Throws loom::Error if run_dir is not a run dir.
LoadedModel load_trained_model(const std::filesystem::path& run_dir, std::optional<int64_t> step = std::nullopt);

}  // namespace loom

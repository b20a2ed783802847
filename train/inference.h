// Loading a trained model back from a run directory (its resolved config + a checkpoint) for
// generation and evaluation. Nothing of the optimizer or RNG state is touched.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>

#include "core/config.h"
#include "models/model_stage.h"
#include "parallel/mesh.h"

namespace loom {

struct LoadedModel {
  Config config;
  std::shared_ptr<StagedModel> model;  // of the family config.model.arch names (train/model_family.h)
  int64_t step = 0;
  std::shared_ptr<Mesh> mesh;  // a TP-split model's (load_trained_model_tp): its groups live as long as the model
  // The model as a family's module holder (Gpt, EncoderDecoder); an empty holder if it is of another family.
  template <class Holder>
  Holder as() const {
    return Holder(std::dynamic_pointer_cast<typename Holder::ContainedType>(model));
  }
};

// step: a checkpoint step, or the newest complete one. The model is on its run's runtime.device, or on the CPU
// where that is cuda and no GPU is visible. Throws loom::Error if run_dir is not a run dir.
LoadedModel load_trained_model(const std::filesystem::path& run_dir, std::optional<int64_t> step = std::nullopt);

// The same model split over the tensor-parallel group `world` (every rank of an `mpirun -np N` job, N = its
// size, parallel.tp=N; no dp, pp or cp): each rank builds its TP shard and loads it, resharded from the
// checkpoint's layout (train/checkpoint_reshard.h). Collective over world. local_rank / local_size: this rank's
// place among the ranks on its node (its GPU, its share of the CPU threads).
LoadedModel load_trained_model_tp(const std::filesystem::path& run_dir, std::optional<int64_t> step,
                                  std::unique_ptr<Communicator> world, int64_t local_rank, int64_t local_size);

}  // namespace loom

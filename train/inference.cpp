#include "train/inference.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/model_family.h"
#include "train/runtime.h"

namespace loom {

namespace {

// The run's checkpoint config for one process (the layout reset to one rank) and the step to load.
LoadedModel inference_config(const std::filesystem::path& run_dir, std::optional<int64_t>& step) {
  LOOM_CHECK(std::filesystem::is_regular_file(run_dir / "config.yaml"), run_dir.string(),
             " is not a loom run directory (no config.yaml): pass the run.dir of a `loom train` run");
  if (!step) step = latest_checkpoint(run_dir);
  LOOM_CHECK(step.has_value(), run_dir.string(), " has no complete checkpoint yet");
  // The checkpoint's own copy of the config describes the model in its shard, even if the run's
  // config.yaml was changed since.
  const auto dir = checkpoint_dir(run_dir, *step);
  if (auto problem = checkpoint_problem(dir)) throw Error("checkpoint " + dir.string() + ": " + *problem);
  LoadedModel loaded;
  loaded.config = load_config((dir / "config.yaml").string());
  // One process holds the whole model: a tensor- or pipeline-parallel checkpoint is joined when it loads.
  // (An expert-parallel one too: its experts are stored whole by name.)
  loaded.config.parallel.set_one_process();
  configure_cpu(loaded.config.runtime);
  if (loaded.config.runtime.device == DeviceKind::kCuda && !torch::cuda::is_available()) {
    spdlog::info("{} trained on a GPU; none is visible here, so its model runs on the CPU", run_dir.string());
    loaded.config.runtime.device = DeviceKind::kCpu;
  }
  return loaded;
}

}  // namespace

LoadedModel load_trained_model(const std::filesystem::path& run_dir, std::optional<int64_t> step) {
  LoadedModel loaded = inference_config(run_dir, step);
  loaded.model = model_family(loaded.config.model.arch).build(loaded.config, TensorParallelism(), ModelStage(),
                                                                 ContextParallelism());
  loaded.model->to(runtime_device(loaded.config.runtime));
  const Mesh mesh(loaded.config, 1, 0);
  load_checkpoint(run_dir, *step, mesh, {*loaded.model, nullptr}, /*restore_rng=*/false);
  loaded.step = *step;
  return loaded;
}

LoadedModel load_trained_model_tp(const std::filesystem::path& run_dir, std::optional<int64_t> step,
                                  std::unique_ptr<Communicator> world, int64_t local_rank, int64_t local_size) {
  LoadedModel loaded = inference_config(run_dir, step);
  configure_cpu(loaded.config.runtime, local_size);  // the node's cores shared by its ranks
  const int64_t tp = world->size();
  loaded.config.parallel.tp = tp;
  loaded.config.parallel.sequence_parallel = false;  // decoding feeds one position a row: nothing to split
  LOOM_CHECK(loaded.config.model.n_heads % tp == 0 && loaded.config.model.kv_heads() % tp == 0,
             "parallel.tp=", tp, " must divide model.n_heads=", loaded.config.model.n_heads,
             " and the key/value heads (", loaded.config.model.kv_heads(), ")");
  const auto device = runtime_device(loaded.config.runtime, local_rank);
  loaded.mesh = std::make_shared<Mesh>(loaded.config, std::move(world), device);
  loaded.model = model_family(loaded.config.model.arch)
                     .build(loaded.config, TensorParallelism(&loaded.mesh->device_group(MeshAxis::kTp), nullptr, false),
                            ModelStage(), ContextParallelism());
  loaded.model->to(device);
  load_checkpoint(run_dir, *step, *loaded.mesh, {*loaded.model, nullptr}, /*restore_rng=*/false);
  loaded.step = *step;
  return loaded;
}

}  // namespace loom

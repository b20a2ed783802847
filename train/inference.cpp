#include "train/inference.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/model_family.h"
#include "train/runtime.h"

namespace loom {

LoadedModel load_trained_model(const std::filesystem::path& run_dir, std::optional<int64_t> step) {
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
  loaded.config.parallel.dp = loaded.config.parallel.tp = loaded.config.parallel.pp = loaded.config.parallel.cp = 1;
  loaded.config.parallel.pp_layers.clear();
  configure_cpu(loaded.config.runtime);
  if (loaded.config.runtime.device == DeviceKind::kCuda && !torch::cuda::is_available()) {
    spdlog::info("{} trained on a GPU; none is visible here, so its model runs on the CPU", run_dir.string());
    loaded.config.runtime.device = DeviceKind::kCpu;
  }
  loaded.model = model_family(loaded.config.model.arch).build(loaded.config, TensorParallelism(), ModelStage(),
                                                                 ContextParallelism());
  loaded.model->to(runtime_device(loaded.config.runtime));
  const Mesh mesh(loaded.config, 1, 0);
  load_checkpoint(run_dir, *step, mesh, {*loaded.model, nullptr}, /*restore_rng=*/false);
  loaded.step = *step;
  return loaded;
}

}  // namespace loom

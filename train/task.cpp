#include "train/task.h"

#include "core/error.h"
#include "models/model_stage.h"
#include "train/model_family.h"

namespace loom {

std::unique_ptr<TensorParallelRng> make_tp_rng(const Config& config, const Communicator* tp, int64_t pp_stage,
                                               int64_t cp_rank) {
  if (tp == nullptr || tp->size() == 1) return nullptr;
  // Megatron's tensor-model-parallel seed: every TP rank, pipeline stage and CP rank its own stream, alike
  // across DP replicas.
  return std::make_unique<TensorParallelRng>(
      TensorParallelRng::stream_seed(static_cast<uint64_t>(config.run.seed), tp->rank(), pp_stage, cp_rank));
}

void seed_dropout(const Config& config, int64_t pp_stage, int64_t cp_rank) {
  if (pp_stage == 0 && cp_rank == 0) return;
  torch::manual_seed(static_cast<uint64_t>(config.run.seed) +
                     TensorParallelRng::kPipelineSeedStride * static_cast<uint64_t>(pp_stage) +
                     TensorParallelRng::kContextSeedStride * static_cast<uint64_t>(cp_rank));
}

std::unique_ptr<Task> make_task(const Config& config, torch::Device device, TaskData data,
                                std::shared_ptr<StagedModel> trained, Communicator* tp, int64_t pp_stage,
                                const ContextParallelism& cp) {
  LOOM_CHECK(config.model.vocab_size > 0, "make_task: model.vocab_size is not resolved (train/run_plan.h)");
  const ModelFamily& family = model_family(config.model.arch);
  const ModelSource model = [&] {
    TaskModel out;
    if (trained) {
      out.module = trained;
      return out;
    }
    // Every rank draws the same full weights from the seed and keeps its TP shard: any layout starts alike.
    torch::manual_seed(static_cast<uint64_t>(config.run.seed));
    out.tp_rng = make_tp_rng(config, tp, pp_stage, cp.rank());
    out.module = family.build(config, TensorParallelism(tp, out.tp_rng.get(), config.parallel.sequence_parallel),
                              model_stage(config.model, config.parallel, pp_stage), cp);
    out.module->to(device);
    seed_dropout(config, pp_stage, cp.rank());
    return out;
  };
  return family.make_task(config, data, model);
}

}  // namespace loom

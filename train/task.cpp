#include "train/task.h"

#include "core/error.h"
#include "train/inference.h"
#include "train/lm_task.h"
#include "train/translation_task.h"

namespace loom {

int64_t batch_tokens(const TaskBatch& batch) {
  if (const auto* lm = std::get_if<LmBatch>(&batch)) return lm->targets.numel();
  return std::get<Seq2SeqBatch>(batch).target_tokens();
}

std::unique_ptr<TensorParallelRng> make_tp_rng(const Config& config, const Communicator* tp, int64_t pp_stage) {
  if (tp == nullptr || tp->size() == 1) return nullptr;
  // Megatron's tensor-model-parallel seed: every TP rank and pipeline stage its own stream, alike across
  // DP replicas.
  return std::make_unique<TensorParallelRng>(
      TensorParallelRng::stream_seed(static_cast<uint64_t>(config.run.seed), tp->rank(), pp_stage));
}

void seed_stage_dropout(const Config& config, int64_t pp_stage) {
  if (pp_stage > 0) torch::manual_seed(static_cast<uint64_t>(config.run.seed + 100 * pp_stage));
}

std::unique_ptr<Task> make_task(Config& config, torch::Device device, TaskData data, const LoadedModel* trained,
                                Communicator* tp, std::unique_ptr<LmBatches> lm_batches, int64_t pp_stage) {
  if (config.model.encoder_decoder()) {
    LOOM_CHECK(lm_batches == nullptr, "synthetic LM batches feed a gpt model only");
    return make_translation_task(config, device, data, trained ? trained->translator : EncoderDecoder(nullptr), tp,
                                 pp_stage);
  }
  return make_lm_task(config, device, data, trained ? trained->model : Gpt(nullptr), tp, std::move(lm_batches),
                      pp_stage);
}

}  // namespace loom

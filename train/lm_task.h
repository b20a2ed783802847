// The language-model task: the GPT trained on windows of token files or prepared directories, one or a
// weighted mixture (data/corpus/lm_mixture.h), loss the next-token cross-entropy.
#pragma once
#include <memory>

#include "data/corpus/lm_batches.h"
#include "data/corpus/lm_mixture.h"
#include "data/corpus/token_corpus.h"
#include "models/gpt.h"
#include "train/window_task.h"

namespace loom {

class LmTask : public WindowTask {
 public:
  // batches: where training batches come from (null: evaluation only); valid may be null (no evaluation).
  LmTask(Gpt model, std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid, const Config& config,
         std::unique_ptr<TensorParallelRng> tp_rng = nullptr);

  StagedModel& model() override { return *model_; }
  TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  TaskBatch eval_batch(int64_t first, int64_t count) const override;
  torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) override;
  std::vector<torch::Tensor> stage_forward(const TaskBatch& batch, torch::Device device,
                                           const std::vector<torch::Tensor>& inputs, double label_smoothing) override;
  std::vector<std::vector<int64_t>> stage_output_shapes(const TaskBatch& batch) const override;

 private:
  Gpt model_;
  int64_t loss_chunk_tokens_;  // train.loss_chunk_tokens: the fused head + loss, 0 the plain logits
};

// The token data of a task trained on windows (the GPT's, BERT's): data.train's sources (TaskData::kTraining,
// data.train required) and data.valid (required for TaskData::kEvaluation), checked against tokenizer.model
// and model.vocab_size.
struct LmData {
  std::vector<LmSource> sources;
  std::unique_ptr<TokenCorpus> valid;  // null: none
  std::vector<TokenCorpus*> corpora() const;  // every source's, then valid
};
LmData open_lm_data(const Config& config, TaskData data);

// The gpt family's task (train/gpt_family.cpp): opens data.train (each source: a token file or a prepared
// directory's train split) and data.valid (a token file or a prepared directory's valid split) as `data`
// asks, or for TaskData::kSynthetic uniform random tokens instead of data.train (`loom bench`); checks them
// against tokenizer.model and model.vocab_size, then takes a Gpt from `model`.
std::unique_ptr<LmTask> make_lm_task(const Config& config, TaskData data, const ModelSource& model);

}  // namespace loom

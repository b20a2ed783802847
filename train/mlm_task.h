// The masked language model task (model.arch bert): windows of token files or prepared directories (one or
// a weighted mixture, data/corpus/lm_mixture.h, of data.seq_len - 2 text tokens) become [CLS] ... [SEP]
// sequences of data.seq_len, masked by data/corpus/mlm_masking.h (15% chosen, 80/10/10, a pure function of
// seed, step and sequence); the loss is the cross-entropy at the chosen positions (the head runs on those
// only); evaluation also counts the chosen tokens predicted right (valid accuracy in metrics.jsonl).
// [CLS], [SEP], [MASK] and [PAD] are the tokenizer's tokens of those texts; those it lacks take the ids after
// its vocabulary, in that order (model.vocab_size must cover them: docs/models.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/lm_batches.h"
#include "data/corpus/mlm_masking.h"
#include "data/corpus/token_corpus.h"
#include "models/bert.h"
#include "train/window_task.h"

namespace loom {

struct MlmBatch {
  MlmMasked masked;
  int64_t loss_tokens() const { return masked.selected.numel(); }
  int64_t tokens() const { return masked.inputs.numel(); }
};

class MlmTask : public WindowTask {
 public:
  // batches: windows of data.seq_len - 2 tokens (null: evaluation only); valid may be null.
  MlmTask(Bert model, std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid, const MlmTokenIds& ids,
          const Config& config, std::unique_ptr<TensorParallelRng> tp_rng = nullptr);

  StagedModel& model() override { return *model_; }
  TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  TaskBatch eval_batch(int64_t first, int64_t count) const override;
  torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) override;
  std::vector<torch::Tensor> stage_forward(const TaskBatch& batch, torch::Device device,
                                           const std::vector<torch::Tensor>& inputs, double label_smoothing) override;
  std::vector<std::vector<int64_t>> stage_output_shapes(const TaskBatch& batch) const override;
  std::vector<std::string> eval_metric_names() const override { return {"accuracy"}; }
  std::vector<double> take_eval_metric_sums() override;

  const MlmTokenIds& token_ids() const { return ids_; }

 private:
  Bert model_;
  MlmTokenIds ids_;
  uint64_t seed_;
  double correct_ = 0;  // chosen tokens predicted right by evaluation's forwards since the last take
};

// The ids of [CLS], [SEP], [MASK], [PAD] for `config`: the tokenizer's (tokenizer.model), the missing ones
// after its vocabulary; without a tokenizer (loom bench's synthetic data) the last four ids of
// model.vocab_size. A ConfigError when model.vocab_size does not cover them.
MlmTokenIds mlm_token_ids(const Config& config);

// The bert family's task (train/bert_family.cpp): opens data.train and data.valid as `data` asks (for
// TaskData::kSynthetic uniform random text instead of data.train), checks them against tokenizer.model and
// model.vocab_size, then takes a Bert from `model`.
std::unique_ptr<MlmTask> make_mlm_task(const Config& config, TaskData data, const ModelSource& model);

}  // namespace loom

// The language-model task: the GPT trained on windows of a token file (data/lm_sampler.h), loss the
// next-token cross-entropy.
#pragma once
#include <memory>

#include "data/token_file.h"
#include "models/gpt.h"
#include "train/task.h"

namespace loom {

class LmTask : public Task {
 public:
  // train may be null (evaluation only); valid may be null (no evaluation).
  LmTask(Gpt model, std::unique_ptr<TokenFile> train, std::unique_ptr<TokenFile> valid, const Config& config);

  torch::nn::Module& model() override { return *model_; }
  TaskBatch train_batch(int64_t step, int64_t first, int64_t count) const override;
  TaskBatch eval_batch(int64_t first, int64_t count) const override;
  bool can_evaluate() const override { return valid_ != nullptr; }
  torch::Tensor loss(const TaskBatch& batch, torch::Device device, double label_smoothing) override;
  void load_weights(const std::filesystem::path& file) override;

 private:
  Gpt model_;
  std::unique_ptr<TokenFile> train_, valid_;
  LmSampler sampler_;
};

// Opens data.train / data.valid as `data` asks, checks them against tokenizer.model and fills
// model.vocab_size from the training (else validation) file when it is 0.
std::unique_ptr<LmTask> make_lm_task(Config& config, torch::Device device, TaskData data, Gpt trained);

}  // namespace loom

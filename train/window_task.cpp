#include "train/window_task.h"

#include "core/error.h"

namespace loom {

WindowTask::WindowTask(std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid, const Config& config,
                       int64_t window, std::unique_ptr<TensorParallelRng> tp_rng)
    : batches_(std::move(batches)),
      valid_(std::move(valid)),
      sampler_(static_cast<uint64_t>(config.run.seed), window),
      valid_name_(config.data.valid),
      batch_size_(config.train.batch_size) {
  tp_rng_ = std::move(tp_rng);
}

std::vector<std::string> WindowTask::source_names() const {
  return batches_ ? batches_->source_names() : std::vector<std::string>{};
}

std::vector<int64_t> WindowTask::source_tokens(int64_t step) const {
  return batches_ ? batches_->source_tokens(step) : std::vector<int64_t>{};
}

LmBatch WindowTask::train_windows(int64_t step, int64_t first, int64_t count) const {
  LOOM_CHECK(batches_ != nullptr, "no training data (data.train)");
  return batches_->train_batch(step, first, count);
}

LmBatch WindowTask::eval_windows(int64_t first, int64_t count) const {
  LOOM_CHECK(valid_ != nullptr, "no validation data (data.valid)");
  return sampler_.eval_batch(*valid_, first, count);  // no seed: the same windows every evaluation
}

}  // namespace loom

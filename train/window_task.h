// What the tasks trained on windows of token files share (the GPT's LmTask, BERT's MlmTask): the training
// windows (data.train's sources, one or a weighted mixture, or synthetic tokens: data/corpus/lm_batches.h), the
// validation corpus (data.valid, read in order without a seed), train.batch_size, and the Task questions these
// answer. Each task turns the windows into its own batches (next-token targets, masked positions).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/corpus/lm_batches.h"
#include "data/corpus/token_corpus.h"
#include "train/task.h"

namespace loom {

class WindowTask : public Task {
 public:
  int64_t train_batch_size(int64_t) const override { return batch_size_; }
  bool can_evaluate() const override { return valid_ != nullptr; }
  std::string eval_data_name() const override { return valid_name_; }
  std::vector<std::string> source_names() const override;
  std::vector<int64_t> source_tokens(int64_t step) const override;

 protected:
  // batches: null for evaluation only; valid: null for no evaluation; windows of `window` tokens.
  WindowTask(std::unique_ptr<LmBatches> batches, std::unique_ptr<TokenCorpus> valid, const Config& config,
             int64_t window, std::unique_ptr<TensorParallelRng> tp_rng);
  // Step `step`'s training windows first .. first + count - 1 (an Error without data.train).
  LmBatch train_windows(int64_t step, int64_t first, int64_t count) const;
  // Validation windows first .. first + count - 1 (an Error without data.valid).
  LmBatch eval_windows(int64_t first, int64_t count) const;

 private:
  std::unique_ptr<LmBatches> batches_;
  std::unique_ptr<TokenCorpus> valid_;
  LmSampler sampler_;
  std::string valid_name_;  // data.valid
  int64_t batch_size_;      // train.batch_size
};

}  // namespace loom
